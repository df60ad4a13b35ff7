import { drizzle } from "drizzle-orm/d1";
import { lt } from "drizzle-orm";
import * as schema from "./db/schema";
import type { Db, Env } from "./env";
import { runIntentMaintenance } from "./services/intents";
import { runCommandMaintenance } from "./services/commands";
import { runJobMaintenance } from "./services/jobs";
import { runRolloutMaintenance } from "./services/rollouts";
import { RETAINED_TABLES, pruneTable } from "./services/analytics-retention";
import { readConfig } from "./shared/config";
import { runAuditRetention } from "./services/audit-retention";
import { notifyOfflineDevices } from "./services/web-push";
import { prunePushRecords } from "./services/push";
import { summariseApiAccess } from "./services/api-access-summary";
import { auditStream } from "./hub/audit-stream";

interface Step {
  name: string;
  run: (env: Env, db: Db, now: Date) => Promise<unknown>;
}

/** The minute cron's steps, in order. Every step is idempotent, so a step that failed simply runs again next minute. */
const SCHEDULED_STEPS: Step[] = [
  // Retention of the analytics tables (ANALYTICS_RETENTION_DAYS, REQUEST_LOG_RETENTION_DAYS): one
  // step per table, so one table's trouble does not keep the others growing.
  ...RETAINED_TABLES.map((retained): Step => ({
    name: `${retained.table} retention`,
    run: (env, _db, now) => pruneTable(env.DB, retained, readConfig(env), now),
  })),
  {
    name: "ws_tickets expiry",
    run: (_env, db, now) => db.delete(schema.wsTickets).where(lt(schema.wsTickets.expiresAt, now.toISOString())).run(),
  },
  {
    name: "invitations expiry",
    run: (_env, db, now) => db.delete(schema.invitations).where(lt(schema.invitations.expiresAt, now.toISOString())).run(),
  },
  // Pending/approved enrolment intents past expires_at → expired (audited, published); stale claim-failure windows dropped.
  { name: "intents", run: runIntentMaintenance },
  // Device commands past their TTL that their site hub has not swept (its alarm is the first line).
  { name: "commands", run: runCommandMaintenance },
  // Jobs stuck in queued (never handed to their hub) or sent (hub evicted, deadline passed) are re-driven.
  { name: "jobs", run: runJobMaintenance },
  // The audit trail's retention policy, when one is set: archive to R2, then delete (docs/audit-retention.md).
  { name: "audit retention", run: (env, db, now) => runAuditRetention(env, db, now, "cron") },
  // Web Push to subscribed users about devices of their sites that went offline since the last run.
  { name: "device-offline notifications", run: (env, db) => notifyOfflineDevices(env, db) },
  // Push records are kept as long as the commands they point to.
  { name: "push records retention", run: (_env, db, now) => prunePushRecords(db, now) },
  // Unfinished rollouts whose row has not moved for a minute get a step from their orchestrator.
  { name: "rollouts", run: runRolloutMaintenance },
  // One api_access audit event per user per finished hour, from the request log (docs/audit.md).
  { name: "api_access summary", run: (env, _db, now) => summariseApiAccess(env.DB, now) },
  // Last, so it covers the rows the steps above wrote: seals and publishes any audit row whose
  // nudge was lost (docs/audit.md, "Publication").
  { name: "audit stream", run: (env) => auditStream(env).nudge() },
];

/**
 * The minute cron: time-driven work that no request triggers. The steps touch unrelated tables and
 * hubs, so one failing (a D1 hiccup, a hub that cannot be reached) must not starve the others: each
 * runs on its own and a failure is logged. Returns the names of the steps that failed.
 */
export async function runScheduled(env: Env, now: Date): Promise<string[]> {
  const db = drizzle(env.DB, { schema });
  const failed: string[] = [];
  for (const step of SCHEDULED_STEPS) {
    try {
      await step.run(env, db, now);
    } catch (error) {
      failed.push(step.name);
      console.error(`scheduled step "${step.name}" failed`, error);
    }
  }
  return failed;
}
