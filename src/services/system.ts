import { and, gte, inArray, isNull, ne, sql } from "drizzle-orm";
import type { Db } from "../env";
import { apiRequestLogs, auditLogs, devices, jobs, serviceVersions } from "../db/schema";
import { auditValues } from "./audit";
import pkg from "../../package.json";

export const SERVICE_VERSION: string = pkg.version;
export const COMPONENTS = ["api", "d1", "site-hub", "scheduler"];

const isolateStartedAt = Date.now();
export const isolateUptimeSeconds = () => Math.round((Date.now() - isolateStartedAt) / 1000);

let versionRecorded: Promise<void> | undefined;

/**
 * A Worker has no start or stop hook, so the first request a newly deployed version serves records
 * `system_startup` for it and `system_shutdown` for the version it replaced. The insert-or-ignore and
 * the guarded update make each event happen once, however many isolates race on their first request.
 */
export function recordVersionOnce(db: Db): Promise<void> {
  versionRecorded ??= recordVersion(db).catch((error) => {
    versionRecorded = undefined;
    console.error("recording the service version failed", error);
  });
  return versionRecorded;
}

async function recordVersion(db: Db) {
  const inserted = await db.insert(serviceVersions).values({ version: SERVICE_VERSION })
    .onConflictDoNothing().returning({ version: serviceVersions.version }).all();
  if (inserted.length === 0) return;
  const superseded = await db.update(serviceVersions).set({ supersededAt: new Date().toISOString() })
    .where(and(ne(serviceVersions.version, SERVICE_VERSION), isNull(serviceVersions.supersededAt)))
    .returning({ version: serviceVersions.version }).all();
  await db.batch([
    db.insert(auditLogs).values(auditValues({
      eventType: "system_startup",
      description: `Fleet Edge ${SERVICE_VERSION} started serving`,
      metadata: { version: SERVICE_VERSION, components: COMPONENTS },
    })),
    ...superseded.map((old) => db.insert(auditLogs).values(auditValues({
      eventType: "system_shutdown",
      description: `Fleet Edge ${old.version} superseded by ${SERVICE_VERSION}`,
      metadata: { version: old.version, reason: "superseded", superseded_by: SERVICE_VERSION },
    }))),
  ]);
}

// Per-isolate busy time: the share of the last minute this isolate spent inside request handlers.
const busyWindow: { at: number; ms: number }[] = [];
export function recordBusy(ms: number, now = Date.now()) {
  busyWindow.push({ at: now, ms });
  while (busyWindow.length && busyWindow[0].at < now - 60_000) busyWindow.shift();
  if (busyWindow.length > 10_000) busyWindow.splice(0, busyWindow.length - 10_000);
}
function isolateBusyPercent(now = Date.now()) {
  const total = busyWindow.filter((b) => b.at >= now - 60_000).reduce((sum, b) => sum + b.ms, 0);
  return Math.min(100, Math.round((total / 60_000) * 1000) / 10);
}

export async function systemPulse(db: Db) {
  const minuteAgo = new Date(Date.now() - 60_000).toISOString();
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
