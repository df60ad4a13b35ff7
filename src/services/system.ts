import { and, gte, inArray, isNull, ne, sql, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { apiRequestLogs, auditLogs, devices, jobs, serviceVersions } from "../db/schema";
import { auditRow } from "../shared/audit-row";
import { classify } from "../shared/vocabulary";
import pkg from "../../package.json";
import { currentDate, workerClock } from "../lib/clock";

export const SERVICE_VERSION: string = pkg.version;
export const COMPONENTS = ["api", "d1", "site-hub", "scheduler"];

const isolateStartedAt = workerClock.now();
export const isolateUptimeSeconds = () => Math.round((workerClock.now() - isolateStartedAt) / 1000);

let versionRecorded = false;
/** When this isolate's write started; a write whose request was cut off is retried after a while. */
let versionWriteStartedAt: number | undefined;
const VERSION_WRITE_PATIENCE_MS = 30_000;

/**
 * A Worker has no start or stop hook, so the first request a newly deployed version serves records
 * `system_startup` for it and `system_shutdown` for the version it replaced. Requests arriving while
 * that write runs do not wait for it: a promise started by one request cannot be awaited by another,
 * and the write is idempotent anyway. A failed write is retried by the next request.
 */
export async function recordVersionOnce(db: Db): Promise<void> {
  const now = workerClock.now();
  if (versionRecorded || (versionWriteStartedAt !== undefined && now - versionWriteStartedAt < VERSION_WRITE_PATIENCE_MS)) return;
  versionWriteStartedAt = now;
  try {
    await recordVersion(db);
    versionRecorded = true;
  } catch (error) {
    console.error("recording the service version failed", error);
  } finally {
    versionWriteStartedAt = undefined;
  }
}

/**
 * Records `version` as serving: one batch (a single D1 transaction) writes the shutdown events of the
 * versions it supersedes, its startup event, marks the old versions superseded and inserts its row,
 * every statement guarded by "this version has no row yet". However many isolates race on their
 * first request, exactly one batch does the work; a batch that fails leaves nothing behind, so a
 * later request retries. Returns whether this call recorded the version.
 */
export async function recordVersion(db: Db, version: string = SERVICE_VERSION, components: string[] = COMPONENTS): Promise<boolean> {
  const unrecorded = sql`not exists (select 1 from service_versions as sv where sv.version = ${version})`;
  const startup = auditRow({ eventType: "system_startup", description: `Fleet Edge ${version} started serving`, metadata: { version, components } });
  const shutdown = classify("system_shutdown");
  // `insert … select` names every audit column in table order (drizzle checks the order).
  const selectAuditRow = (eventType: string, category: string, severity: string, description: SQL, eventMetadata: SQL) => ({
    id: sql`null`.as("id"), eventType: sql`${eventType}`.as("event_type"), category: sql`${category}`.as("category"),
    severity: sql`${severity}`.as("severity"), description: description.as("description"),
    userId: sql`null`.as("user_id"), jobId: sql`null`.as("job_id"), deviceId: sql`null`.as("device_id"), siteId: sql`null`.as("site_id"),
    eventMetadata: eventMetadata.as("event_metadata"), ipAddress: sql`null`.as("ip_address"), userAgent: sql`null`.as("user_agent"),
    sessionId: sql`null`.as("session_id"), createdAt: sql`strftime('%Y-%m-%dT%H:%M:%fZ','now')`.as("created_at"),
    archivedAt: sql`null`.as("archived_at"),
    prevHash: sql`null`.as("prev_hash"), hash: sql`null`.as("hash"),
  });
  const [, , , inserted] = await db.batch([
    db.insert(auditLogs).select(db.select(selectAuditRow("system_shutdown", shutdown.category, shutdown.severity,
      sql`'Fleet Edge ' || ${serviceVersions.version} || ' superseded by ' || ${version}`,
      sql`json_object('version', ${serviceVersions.version}, 'reason', 'superseded', 'superseded_by', ${version})`))
      .from(serviceVersions)
      .where(and(ne(serviceVersions.version, version), isNull(serviceVersions.supersededAt), unrecorded))),
    db.insert(auditLogs).select(db.select(selectAuditRow("system_startup", startup.category!, startup.severity!,
      sql`${startup.description}`, sql`${JSON.stringify(startup.eventMetadata)}`))
      .from(sql`(select 1)`)
      .where(unrecorded)),
    db.update(serviceVersions).set({ supersededAt: currentDate().toISOString() })
      .where(and(ne(serviceVersions.version, version), isNull(serviceVersions.supersededAt), unrecorded)),
    db.insert(serviceVersions).values({ version }).onConflictDoNothing().returning({ version: serviceVersions.version }),
  ]);
  return inserted.length > 0;
}

// Per-isolate busy time: the share of the last minute this isolate spent inside request handlers.
const busyWindow: { at: number; ms: number }[] = [];
export function recordBusy(ms: number, now = workerClock.now()) {
  busyWindow.push({ at: now, ms });
  while (busyWindow.length && busyWindow[0].at < now - 60_000) busyWindow.shift();
  if (busyWindow.length > 10_000) busyWindow.splice(0, busyWindow.length - 10_000);
}
function isolateBusyPercent(now = workerClock.now()) {
  const total = busyWindow.filter((b) => b.at >= now - 60_000).reduce((sum, b) => sum + b.ms, 0);
  return Math.min(100, Math.round((total / 60_000) * 1000) / 10);
}

export async function systemPulse(db: Db) {
  const minuteAgo = new Date(workerClock.now() - 60_000).toISOString();
  const [jobCounts, deviceCounts, requests] = await Promise.all([
    db.select({ status: jobs.status, n: sql<number>`count(*)` }).from(jobs)
      .where(inArray(jobs.status, ["queued", "sent"])).groupBy(jobs.status).all(),
    db.select({ online: sql<number>`coalesce(sum(case when ${devices.status} = 'online' then 1 else 0 end), 0)`, total: sql<number>`count(*)` })
      .from(devices).get(),
    db.select({ n: sql<number>`count(*)` }).from(apiRequestLogs).where(gte(apiRequestLogs.createdAt, minuteAgo)).get(),
  ]);
  const queued = jobCounts.find((r) => r.status === "queued")?.n ?? 0;
  const sent = jobCounts.find((r) => r.status === "sent")?.n ?? 0;
  const activeJobs = queued + sent;
  const requestsPerMinute = requests?.n ?? 0;
  const cpuPercent = isolateBusyPercent();
  // 0–100: weighted by what actually loads the service — work in flight and request rate.
  const loadScore = Math.min(100, Math.round(activeJobs * 5 + requestsPerMinute / 60 + cpuPercent / 2));
  const status: "idle" | "active" | "busy" | "overloaded" =
    loadScore === 0 ? "idle" : loadScore < 50 ? "active" : loadScore < 80 ? "busy" : "overloaded";
  return {
    status,
    load_score: loadScore,
    active_jobs: activeJobs,
    queue_depth: queued,
    active_agents: deviceCounts?.online ?? 0,
    total_agents: deviceCounts?.total ?? 0,
    requests_per_minute: requestsPerMinute,
    cpu_percent: cpuPercent,
    memory_percent: null,
  };
}
