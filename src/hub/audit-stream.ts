import type { Env } from "../env";
import { workerClock } from "../lib/clock";
import {
  AUDIT_STREAM_NAME, NudgeReplySchema, WatchedSitesSchema, subscribeUrl, type AuditStreamFilter, type WatchedSites,
} from "../shared/audit-stream-contract";

/**
 * The Worker's only way into the AuditStream object (durable-objects/audit-stream.ts): one
 * instance for the whole service, so every audit row is sealed and published by a single writer.
 */
export class AuditStreamClient {
  private readonly stub;

  constructor(env: Env) {
    this.stub = env.AUDIT_STREAM.get(env.AUDIT_STREAM.idFromName(AUDIT_STREAM_NAME));
  }

  /** Seal and publish every audit row inserted so far. */
  async nudge() {
    return NudgeReplySchema.parse(await this.stub.nudge());
  }

  /** An SSE response of the events matching `filter`, resuming after `filter.since`. */
  subscribe(filter: AuditStreamFilter): Promise<Response> {
    return this.stub.fetch(subscribeUrl(filter), { headers: { Accept: "text/event-stream" } });
  }

  /** Alert rules changed in D1: the object re-reads them and drops notifications of deleted rules. */
  async alertRulesChanged(): Promise<void> {
    await this.stub.alertRulesChanged();
  }

  /** The sites the user's open subscriptions watch. */
  async watchedSites(userId: number): Promise<WatchedSites> {
    return WatchedSitesSchema.parse(await this.stub.watchedSites(userId));
  }

  /** Ends the user's subscriptions outside `allowed`; answers how many. */
  async revokeSubscriber(userId: number, allowed: WatchedSites): Promise<number> {
    return this.stub.revokeSubscriber(userId, WatchedSitesSchema.parse(allowed));
  }

  async subscriberCount(): Promise<number> {
    return this.stub.subscriberCount();
  }
}

export const auditStream = (env: Env) => new AuditStreamClient(env);

/** Per isolate: whether a nudge is in flight, and whether another was asked for while it ran. */
const nudging = new WeakMap<Env, { again: boolean; startedAt: number }>();
/** A nudge running longer than this belonged to a request that was cut off; the next caller starts afresh. */
const NUDGE_PATIENCE_MS = 30_000;

/**
 * A nudge that never fails its caller: a lost one is made up by the next, or by the minute cron.
 * Per isolate at most one is in flight; those asked for meanwhile become one more round of it, which
 * starts after them, so none of their rows is missed. A caller that joins a nudge in flight gets a
 * settled promise, not the running one: a Worker request may not await what another request started.
 */
export async function nudgeAuditStream(env: Env): Promise<void> {
  const current = nudging.get(env);
  if (current && workerClock.now() - current.startedAt < NUDGE_PATIENCE_MS) {
    current.again = true;
    return;
  }
  const state = { again: false, startedAt: workerClock.now() };
  nudging.set(env, state);
  try {
    do {
      state.again = false;
      await auditStream(env).nudge();
    } while (state.again);
  } catch (error) {
    console.error("audit stream nudge failed; the cron will catch up", error);
  } finally {
    if (nudging.get(env) === state) nudging.delete(env);
  }
}
