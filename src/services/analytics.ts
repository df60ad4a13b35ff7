import type { AuthUser, Db } from "../env";
import { deviceStateHistory, jobOutcomes, userActivities } from "../db/schema";
import { JOB_OUTCOME_ROLLUP_UPSERT, jobOutcomeRollupRows, jsonChunks } from "../shared/rollups";
import type { DeviceRow } from "./devices";
import type { JobRow } from "./jobs";
import { workerClock } from "../lib/clock";

export const ACTIVITY_TYPES = ["page_view", "click", "search", "interaction"] as const;
export const JOB_OUTCOME_STATUSES = ["completed", "failed", "cancelled", "timeout", "expired"] as const;
export type JobOutcomeStatus = (typeof JOB_OUTCOME_STATUSES)[number];

/** Who sent a report: an operator (changed_by `user`) or the device itself (`system`). */
export type Reporter = { kind: "user"; user: AuthUser } | { kind: "device"; deviceId: string; siteId: string };

export const changedByOf = (reporter: Reporter): "user" | "system" => (reporter.kind === "user" ? "user" : "system");

export interface UserActivityInput {
  activity_type: (typeof ACTIVITY_TYPES)[number];
  page_url?: string | null;
  element_id?: string | null;
  search_query?: string | null;
  session_id?: string | null;
  duration_ms?: number | null;
  extra_data?: Record<string, unknown> | null;
}

export async function recordUserActivity(db: Db, user: AuthUser, input: UserActivityInput) {
  const row = await db.insert(userActivities).values({
    userId: user.id,
    activityType: input.activity_type,
    pageUrl: input.page_url ?? null,
    elementId: input.element_id ?? null,
    searchQuery: input.search_query ?? null,
    sessionId: input.session_id ?? null,
    durationMs: input.duration_ms ?? null,
    extraData: input.extra_data ?? null,
  }).returning({ id: userActivities.id }).get();
  return row.id;
}

export interface StateChangeInput {
  previous_state?: string | null;
  new_state: string;
  reason?: string | null;
  extra_data?: Record<string, unknown> | null;
}

/**
 * A state change someone reports joins the device's timeline. It is history only: the device's
 * `status` stays what its presence says, so a report cannot fight the heartbeats.
 */
export async function recordDeviceStateChange(db: Db, device: DeviceRow, input: StateChangeInput, reporter: Reporter) {
  return db.insert(deviceStateHistory).values({
    deviceId: device.deviceId,
    siteId: device.siteId,
    previousState: input.previous_state?.toLowerCase() ?? null,
    newState: input.new_state.toLowerCase(),
    changedBy: changedByOf(reporter),
    userId: reporter.kind === "user" ? reporter.user.id : null,
    reason: input.reason ?? null,
    extraData: input.extra_data ?? null,
    source: "reported",
  }).returning().get();
}

export interface JobOutcomeInput {
  job_type?: string | null;
  device_id?: string | null;
  status: JobOutcomeStatus;
  duration_ms?: number | null;
  initiated_by?: string | null;
  error_code?: string | null;
  retry_count?: number | null;
  metadata?: Record<string, unknown> | null;
}

/**
 * A reported job outcome: one row (an execution when it names a device, else the job's own) and
 * its share of the job-outcome rollups, in one batch.
 */
export async function recordJobOutcome(d1: D1Database, db: Db, job: JobRow, input: JobOutcomeInput, reporter: Reporter) {
  const now = workerClock.now();
  const scope: "job" | "execution" = input.device_id ? "execution" : "job";
  const jobType = input.job_type ?? job.action;
  const insert = db.insert(jobOutcomes).values({
    jobId: job.jobId,
    siteId: job.siteId,
    scope,
    jobType,
    deviceId: input.device_id ?? null,
    status: input.status,
    durationMs: input.duration_ms ?? null,
    initiatedBy: input.initiated_by ?? (reporter.kind === "user" ? reporter.user.email : input.device_id ?? null),
    errorCode: input.error_code ?? null,
    retryCount: input.retry_count ?? 0,
    metadata: { ...(input.metadata ?? {}), reported_by: reporter.kind === "user" ? { user_id: reporter.user.id } : { device_id: reporter.deviceId } },
    timestamp: new Date(now).toISOString(),
  }).returning({ id: jobOutcomes.id }).toSQL();
  const rollups = jobOutcomeRollupRows([{ siteId: job.siteId, jobType, scope, status: input.status, durationMs: input.duration_ms ?? null, at: now }]);
  const [inserted] = await d1.batch<{ id: number }>([
    d1.prepare(insert.sql).bind(...insert.params),
    ...jsonChunks(rollups).map((chunk) => d1.prepare(JOB_OUTCOME_ROLLUP_UPSERT).bind(chunk)),
  ]);
  return { id: inserted.results[0].id, scope };
}
