/**
 * The Worker's only way into a rollout's orchestrator (the RolloutOrchestrator Durable Object, one
 * per rollout, named by rollout_id). Replies are parsed against src/shared/rollout-contract.ts where
 * they come back, as the site hubs' are in ./client.ts.
 */
import type { Env } from "../env";
import {
  ControlResultSchema, RolloutProgressSchema, ROLLOUT_STATUSES, rolloutEventsUrl,
  type Actor, type RolloutControl, type RolloutPlan,
} from "../shared/rollout-contract";
import { z } from "@hono/zod-openapi";

export class RolloutClient {
  private readonly stub;

  constructor(env: Env, readonly rolloutId: string) {
    this.stub = env.ROLLOUTS.get(env.ROLLOUTS.idFromName(rolloutId));
  }

  /** Hands the plan over; the orchestrator starts at once. Repeating it changes nothing. */
  async initialise(plan: RolloutPlan) {
    return RolloutProgressSchema.parse(await this.stub.initialise(plan));
  }

  /** Live figures; null when the orchestrator never received its plan. */
  async progress() {
    return RolloutProgressSchema.nullable().parse(await this.stub.getProgress());
  }

  async control(kind: RolloutControl, actor: Actor) {
    return ControlResultSchema.parse(await this.stub.control(kind, actor));
  }

  /** The progress stream (server-sent events) for an authorised user, resuming after `lastEventId`. */
  events(userId: number, lastEventId: number | undefined): Promise<Response> {
    return this.stub.fetch(rolloutEventsUrl(userId, lastEventId), { headers: { Accept: "text/event-stream" } });
  }

  /** Ends the user's progress streams of this rollout; answers how many. */
  async revokeSubscriber(userId: number): Promise<number> {
    return z.number().int().parse(await this.stub.revokeSubscriber(userId));
  }

  /** The cron's re-drive: one step now. */
  async drive() {
    return z.enum(ROLLOUT_STATUSES).nullable().parse(await this.stub.drive());
  }
}

export const rolloutOrchestrator = (env: Env, rolloutId: string) => new RolloutClient(env, rolloutId);
