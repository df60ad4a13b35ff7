import { and, asc, desc, eq, lt, or, sql, type SQL } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditLogs, devices, jobExecutions, jobs } from "../db/schema";
import { isUniqueViolation, notFound, unprocessable } from "../lib/errors";
import { canonicalJson, newJobId, sha256Hex } from "../shared/ids";
import { DEFAULT_JOB_DEADLINE_S, countTargets, type JobStatus } from "../shared/vocabulary";
import { specFromRow } from "../shared/job-spec";
import { accessibleSiteIds } from "./access";
import { auditRow } from "../shared/audit-row";
import { siteHub } from "../hub/client";
import { currentDate } from "../lib/clock";

export type JobRow = typeof jobs.$inferSelect;
export type ExecutionRow = typeof jobExecutions.$inferSelect;

export interface CreateJobInput {
  action: string;
  description?: string;
  priority: "high" | "medium" | "low";
  target_device_ids?: string[];
  device_type?: string;
  config_url?: string;
  config_version?: string;
  deadline_s?: number;
}

/** The job an Idempotency-Key already created on this site, if any; the same key with another request is 422. */
async function jobOfIdempotencyKey(db: Db, siteId: string, key: string, fingerprint: string): Promise<JobRow | undefined> {
  const existing = await db.select().from(jobs).where(and(eq(jobs.siteId, siteId), eq(jobs.idempotencyKey, key))).get();
  if (existing && existing.requestFingerprint !== fingerprint) {
    throw unprocessable([{ loc: ["header", "idempotency-key"], msg: "This Idempotency-Key was already used on this site with a different request body", type: "idempotency_mismatch" }]);
  }
  return existing;
}

/**
 * Stores the job (queued) with its job_created audit row in one batch, then hands it to the site's
 * hub, which starts it within a second or two. If the hand-off fails the job stays queued in D1 and
 * the minute cron re-drives it. With an Idempotency-Key already used on the site for the same
 * request, nothing happens and the job it created is answered (`created: false`), so a client that
 * retries after a lost response does not start the work twice.
 */
export async function createJob(env: Env, db: Db, user: AuthUser, siteId: string, input: CreateJobInput, idempotencyKey?: string, request?: Request): Promise<{ job: JobRow; created: boolean }> {
  const fingerprint = idempotencyKey ? await sha256Hex(canonicalJson(input)) : null;
  if (idempotencyKey && fingerprint) {
    const existing = await jobOfIdempotencyKey(db, siteId, idempotencyKey, fingerprint);
    if (existing) return { job: existing, created: false };
  }
  const targets = input.target_device_ids ? [...new Set(input.target_device_ids)] : null;
  if (targets) {
    const found = await db.select({ deviceId: devices.deviceId }).from(devices)
      .where(and(eq(devices.siteId, siteId), sql`${devices.deviceId} IN (SELECT value FROM json_each(${JSON.stringify(targets)}))`)).all();
    const known = new Set(found.map((d) => d.deviceId));
    const missing = targets.filter((id) => !known.has(id));
    if (missing.length) {
      throw unprocessable([{ loc: ["body", "target_device_ids"], msg: `Not devices of site ${siteId}: ${missing.slice(0, 10).join(", ")}${missing.length > 10 ? ", …" : ""}`, type: "value_error" }]);
    }
  }
  const jobId = newJobId();
  const created = currentDate();
  const createdAt = created.toISOString();
  const deadlineAt = new Date(created.getTime() + (input.deadline_s ?? DEFAULT_JOB_DEADLINE_S) * 1000).toISOString();
  let row: JobRow;
  try {
    [[row]] = await db.batch([
      db.insert(jobs).values({
        jobId, siteId, action: input.action, description: input.description ?? null, priority: input.priority, status: "queued",
        configUrl: input.config_url ?? null, configVersion: input.config_version ?? null, targetDeviceIds: targets,
        deviceType: input.device_type ?? null, deadlineAt, createdBy: user.email, createdAt, updatedAt: createdAt,
        idempotencyKey: idempotencyKey ?? null, requestFingerprint: fingerprint,
      }).returning(),
      db.insert(auditLogs).values({
        ...auditRow({
          eventType: "job_created", description: `Job ${jobId} (${input.action}) created for site ${siteId}`,
          userId: user.id, siteId, jobId, metadata: { action: input.action, priority: input.priority }, request,
        }),
        createdAt,
      }),
    ]);
  } catch (error) {
    // A concurrent create with the same key won the unique index: answer as a repeat.
    if (idempotencyKey && fingerprint && isUniqueViolation(error, "jobs.idempotency_key")) {
      const existing = await jobOfIdempotencyKey(db, siteId, idempotencyKey, fingerprint);
      if (existing) return { job: existing, created: false };
    }
    throw error;
  }
  try {
    await siteHub(env, siteId).scheduleJob(specFromRow(row));
  } catch (error) {
    console.error(`job ${jobId}: hand-off to the site hub failed; the cron re-drives it`, error);
  }
  return { job: row, created: true };
}

export const jobNotFound = (jobId: string) => notFound(`Job with ID '${jobId}' not found`);

export async function findJob(db: Db, jobId: string) {
  const row = await db.select().from(jobs).where(eq(jobs.jobId, jobId)).get();
  if (!row) throw jobNotFound(jobId);
  return row;
}

export async function executionsOf(db: Db, jobId: string) {
  return db.select().from(jobExecutions).where(eq(jobExecutions.jobId, jobId)).orderBy(asc(jobExecutions.deviceId)).all();
}

/** Execution counts, by the same rule the hub uses when it finishes a job. */
export const countExecutions = (rows: Pick<ExecutionRow, "status">[]) => countTargets(rows);

export async function readJob(db: Db, job: JobRow) {
  return { job, executions: await executionsOf(db, job.jobId) };
}

/** Jobs of one site (already checked by the route), or of every site the user can read. */
export async function listJobs(db: Db, user: AuthUser, q: { siteId?: string; status?: JobStatus; limit: number; offset: number }) {
  let siteFilter: SQL | undefined;
  if (q.siteId) {
    siteFilter = eq(jobs.siteId, q.siteId);
  } else {
    const visible = await accessibleSiteIds(db, user);
    if (visible && !visible.length) return { rows: [], total: 0 };
    if (visible) siteFilter = sql`${jobs.siteId} IN (SELECT value FROM json_each(${JSON.stringify(visible)}))`;
  }
  const where = and(siteFilter, q.status ? eq(jobs.status, q.status) : undefined);
  const [rows, count] = await Promise.all([
    db.select().from(jobs).where(where).orderBy(desc(jobs.createdAt), desc(jobs.id)).limit(q.limit).offset(q.offset).all(),
    db.select({ n: sql<number>`count(*)` }).from(jobs).where(where).get(),
  ]);
  return { rows, total: count?.n ?? 0 };
}

/** Cancels a queued or sent job through its hub (which cancels its open commands); 409 once finished. */

export async function cancelJob(env: Env, db: Db, user: AuthUser, job: JobRow) {
  await siteHub(env, job.siteId).cancelJob(job.jobId, { userId: user.id, name: user.email });
  return { job: await findJob(db, job.jobId), executions: await executionsOf(db, job.jobId) };
}

// ---- cron -----------------------------------------------------------------------------------

/** A hub starts a job within a second or two; one still queued after this was never handed over. */
const QUEUED_STUCK_MS = 30_000;
/** A sent job its hub has not touched for this long is poked (adopted again if the hub lost it). */
const SENT_IDLE_MS = 5 * 60_000;
const REDRIVE_PER_RUN = 100;

/**
 * The minute cron's job sweep: jobs still `queued` after 30 s, and `sent` jobs past their deadline
 * or untouched for 5 minutes, are re-driven through their site's hub (which starts, completes or
 * times them out). Idempotent: a job the hub already handled is only looked at.
 */
export async function runJobMaintenance(env: Env, db: Db, now: Date) {
  const t = now.getTime();
  const stuck = await db.select({ jobId: jobs.jobId, siteId: jobs.siteId }).from(jobs).where(or(
    and(eq(jobs.status, "queued"), lt(jobs.createdAt, new Date(t - QUEUED_STUCK_MS).toISOString())),
    and(eq(jobs.status, "sent"), or(lt(jobs.deadlineAt, now.toISOString()), lt(jobs.updatedAt, new Date(t - SENT_IDLE_MS).toISOString()))),
  )).orderBy(asc(jobs.createdAt)).limit(REDRIVE_PER_RUN).all();
  const results: Record<string, JobStatus | null> = {};
  for (const { jobId, siteId } of stuck) {
    try {
      results[jobId] = await siteHub(env, siteId).driveJob(jobId);
    } catch (error) {
      console.error(`re-drive of job ${jobId} failed`, error);
    }
  }
  return results;
}
