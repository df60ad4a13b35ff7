import type { Env } from "../env";
import { AUDIT_STREAM_NAME, NudgeReplySchema, subscribeUrl, type AuditStreamFilter } from "../shared/audit-stream-contract";

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

  async subscriberCount(): Promise<number> {
    return this.stub.subscriberCount();
  }
}

export const auditStream = (env: Env) => new AuditStreamClient(env);

/** A nudge that never fails its caller: a lost one is made up by the next, or by the minute cron. */
export async function nudgeAuditStream(env: Env): Promise<void> {
  try {
    await auditStream(env).nudge();
  } catch (error) {
    console.error("audit stream nudge failed; the cron will catch up", error);
  }
}
