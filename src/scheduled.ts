import { drizzle } from "drizzle-orm/d1";
import { lt } from "drizzle-orm";
import * as schema from "./db/schema";
import type { Env } from "./env";
import { runIntentMaintenance } from "./services/intents";
import { runCommandMaintenance } from "./services/commands";
import { runJobMaintenance } from "./services/jobs";

const RETENTION_DAYS = 90;

/** The minute cron: time-driven work that no request triggers. Every step is idempotent. */
export async function runScheduled(env: Env, now: Date) {
  const db = drizzle(env.DB, { schema });
  const cutoff = new Date(now.getTime() - RETENTION_DAYS * 86_400_000).toISOString();
  await db.batch([
    db.delete(schema.apiRequestLogs).where(lt(schema.apiRequestLogs.createdAt, cutoff)),
    db.delete(schema.userActivities).where(lt(schema.userActivities.createdAt, cutoff)),
    db.delete(schema.wsTickets).where(lt(schema.wsTickets.expiresAt, now.toISOString())),
  ]);
  // Pending/approved enrolment intents past expires_at → expired (audited, published); idempotent.
  await runIntentMaintenance(env, db, now);
  // Device commands past their TTL that their site hub has not swept (its alarm is the first line).
  await runCommandMaintenance(env, db, now);
  // Jobs stuck in queued (never handed to their hub) or sent (hub evicted, deadline passed) are re-driven.
  await runJobMaintenance(env, db, now);
}
