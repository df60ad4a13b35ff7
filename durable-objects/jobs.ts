import { drizzle } from "drizzle-orm/d1";
import { and, eq, inArray } from "drizzle-orm";
import * as schema from "../src/db/schema";
import type { CommandQueue, CommandRow } from "./commands";
import type { D1Outbox } from "./outbox";
import type { JobSpec } from "../src/shared/hub-contract";
import {
  MAX_COMMAND_TTL_S, SKIPPED_TARGET_STATUS, countTargets, isOpenCommandStatus, type JobCounts, type JobStatus,
} from "../src/shared/vocabulary";
import { iso } from "../src/shared/time";
import { specFromRow } from "../src/shared/job-spec";
import {
  capabilitiesFor, consentRefusal, effectivePermissions, missingPermissions, requiredPermissions, type Permission, type PermissionSet,
} from "../src/shared/consent";

/**
 * Jobs in the site's hub: `queued → sent → completed | failed | cancelled |
 * timeout`. D1 holds the job record; the hub runs it. Within a second or two of creation the alarm
 * starts it: targets resolved (all active devices of the site, the listed ids, or a device type),
 * `started_at`, `segment`, `config_url`, `config_version` filled, one command queued per target
 * (simulated agents run theirs in the hub, real devices through their queue). Each command's
 * transitions move its execution; when every target has a result the job is `completed` (all
 * succeeded) or `failed`, with `{total, succeeded, failed, cancelled, pending}` counted by the one rule
 * in src/shared/vocabulary.ts (`countTargets`); at its deadline it is `timeout`
 * and on cancel `cancelled`, and either way its open commands are cancelled. Every job transition
 * is audited and published as `job.updated`; the job's end and each device execution's end are
 * recorded as job outcomes.
 */
export const JOBS_SCHEMA = `
  CREATE TABLE IF NOT EXISTS job_runs (
    job_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    start_due_ms INTEGER NOT NULL,
    deadline_ms INTEGER NOT NULL,
    started_ms INTEGER,
    finished_ms INTEGER
  );
  CREATE INDEX IF NOT EXISTS job_runs_status ON job_runs (status, start_due_ms);
  CREATE TABLE IF NOT EXISTS job_targets (
    job_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    command_id TEXT,
    status TEXT NOT NULL,
    result TEXT,
    error_message TEXT,
    created_ms INTEGER NOT NULL,
    completed_ms INTEGER,
    PRIMARY KEY (job_id, device_id)
  );
`;

/** Job commands outlive the deadline a little, so the job's own timeout (not their TTL) ends them. */
const COMMAND_GRACE_S = 60;
const FINISHED_RETENTION_MS = 30 * 86_400_000;
const START_RETRY_MS = 5_000;

const FINAL_EVENT: Record<"completed" | "failed" | "cancelled" | "timeout", string> = {
  completed: "job_completed", failed: "job_failed", cancelled: "job_cancelled", timeout: "job_timeout",
};

type RunRow = {
  job_id: string;
  status: JobStatus;
  spec: string;
  start_due_ms: number;
  deadline_ms: number;
  started_ms: number | null;
  finished_ms: number | null;
};

type TargetRow = {
  job_id: string;
  device_id: string;
  command_id: string | null;
  status: string;
  result: string | null;
  error_message: string | null;
  created_ms: number;
  completed_ms: number | null;
};

export interface JobHost {
  siteId(): string;
  now(): number;
  outbox: D1Outbox;
  commands: CommandQueue;
  d1(): D1Database;
  emit(type: string, data: unknown): void;
}

type SiteDevice = {
  device_id: string; device_type: string; device_source: string; lifecycle_state: string;
  os_type: string | null; os_details: string | null; permissions: string | null;
};

/** The permissions a job's command needs that this device's owner has not granted (simulated devices have no owner to ask). */
function refusedPermissions(device: SiteDevice, required: readonly Permission[]): Permission[] {
  if (device.device_source === "simulated" || !required.length) return [];
  const capabilities = capabilitiesFor([device.os_type, device.os_details].filter(Boolean).join(" "));
  const stored = device.permissions === null ? null : JSON.parse(device.permissions) as Partial<PermissionSet>;
  return missingPermissions(required, effectivePermissions(stored, capabilities));
}


/** The command a job's action becomes: REBOOT → restart and so on; free text becomes an identifier. */
export function commandTypeForAction(action: string): string {
  const lower = action.trim().toLowerCase();
  if (lower === "reboot") return "restart";
  const slug = lower.replace(/[^a-z0-9]+/g, "_").replace(/^_+|_+$/g, "").slice(0, 64);
  return /^[a-z]/.test(slug) ? slug : `job_${slug}`.replace(/_+$/, "") || "job";
}

/** e.g. `pos_terminal` → `pos-terminals`, `POS` → `pos-devices`. */
function plural(deviceType: string): string {
  const slug = deviceType.trim().toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "device";
  if (slug.length <= 3) return `${slug}-devices`;
  return slug.endsWith("s") ? slug : `${slug}s`;
}

/** The segment a job addresses, from what it targets: a device type's plural, or all/selected devices. */
function segmentFor(spec: JobSpec, targets: SiteDevice[]): string {
  if (spec.deviceType) return plural(spec.deviceType);
  const types = new Set(targets.map((t) => t.device_type.toLowerCase()));
  if (types.size === 1) return plural(targets[0].device_type);
  return spec.targetDeviceIds ? "selected-devices" : "all-devices";
}

/** A configuration version from the start time, e.g. `2026.11.22-1720`. */
function versionAt(ms: number): string {
  const d = new Date(ms).toISOString();
  return `${d.slice(0, 4)}.${d.slice(5, 7)}.${d.slice(8, 10)}-${d.slice(11, 13)}${d.slice(14, 16)}${d.slice(17, 19)}`;
}

export class JobRunner {
  private readonly starting = new Set<string>();

  constructor(private readonly sql: SqlStorage, private readonly host: JobHost) {}

  private db() {
    return drizzle(this.host.d1(), { schema });
  }

  run(jobId: string): RunRow | undefined {
    return this.sql.exec<RunRow>("SELECT * FROM job_runs WHERE job_id = ?", jobId).toArray()[0];
  }

  /** A new job from the Worker: starts at the next alarm (at once). Repeating it changes nothing. */
  schedule(spec: JobSpec, now: number) {
    if (this.run(spec.jobId)) return;
    this.sql.exec(
      "INSERT INTO job_runs (job_id, status, spec, start_due_ms, deadline_ms) VALUES (?, 'queued', ?, ?, ?)",
      spec.jobId, JSON.stringify(spec), now, Date.parse(spec.deadlineAt),
    );
    this.publish(spec, "queued", {});
  }

  /**
   * Makes sure the hub knows a job D1 has (the cron's re-drive after an eviction or a lost hand-off).
   * Returns the job's status, or undefined when D1 has no such job in this site.
   */
  async adopt(jobId: string): Promise<JobStatus | undefined> {
    const known = this.run(jobId);
    if (known) return known.status;
    const job = await this.db().select().from(schema.jobs)
      .where(and(eq(schema.jobs.jobId, jobId), eq(schema.jobs.siteId, this.host.siteId()))).get();
    if (!job) return undefined;
    if (this.run(jobId)) return this.run(jobId)!.status;
    if (job.status !== "queued" && job.status !== "sent") return job.status;
    const spec = specFromRow(job);
    const now = this.host.now();
    this.sql.exec(
      "INSERT INTO job_runs (job_id, status, spec, start_due_ms, deadline_ms, started_ms) VALUES (?, ?, ?, ?, ?, ?)",
      jobId, job.status, JSON.stringify(spec), now, Date.parse(spec.deadlineAt), job.startedAt ? Date.parse(job.startedAt) : null,
    );
    if (job.status === "sent") {
      // Executions D1 knows, matched to the commands this hub still holds.
      const executions = await this.db().select().from(schema.jobExecutions).where(eq(schema.jobExecutions.jobId, jobId)).all();
      for (const e of executions) {
        const command = e.commandId ? this.host.commands.row(e.commandId) : undefined;
        const status = command?.status ?? (isOpenCommandStatus(e.status) ? "failed" : e.status);
        const error = command ? command.error_message : isOpenCommandStatus(e.status) ? "The command was lost by the site hub" : e.errorMessage;
        this.sql.exec(
          `INSERT OR IGNORE INTO job_targets (job_id, device_id, command_id, status, result, error_message, created_ms, completed_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
          jobId, e.deviceId, e.commandId, status, command?.result ?? (e.result === null ? null : JSON.stringify(e.result)), error,
          Date.parse(e.createdAt), isOpenCommandStatus(status) ? null : now,
        );
      }
      this.maybeFinish(jobId, now);
    }
    return this.run(jobId)!.status;
  }

  // ---- starting -----------------------------------------------------------------------------

  async start(jobId: string) {
    if (this.starting.has(jobId)) return;
    this.starting.add(jobId);
    try {
      const { results } = await this.host.d1().prepare(
        "SELECT device_id, device_type, device_source, lifecycle_state, os_type, os_details, permissions FROM devices WHERE site_id = ? ORDER BY created_at, id",
      ).bind(this.host.siteId()).all<SiteDevice>();
      const run = this.run(jobId);
      if (!run || run.status !== "queued") return;
      this.fanOut(run, results, this.host.now());
    } finally {
      this.starting.delete(jobId);
    }
  }

  private fanOut(run: RunRow, devices: SiteDevice[], now: number) {
    const spec = JSON.parse(run.spec) as JobSpec;
    const active = devices.filter((d) => d.lifecycle_state === "active");
    const typeMatches = (d: SiteDevice) => !spec.deviceType || d.device_type.toLowerCase() === spec.deviceType.toLowerCase();
    let targets: SiteDevice[];
    const missing: string[] = [];
    if (spec.targetDeviceIds) {
      const byId = new Map(active.map((d) => [d.device_id, d]));
      targets = [];
      for (const id of spec.targetDeviceIds) {
        const d = byId.get(id);
        if (d && typeMatches(d)) targets.push(d);
        else if (!d) missing.push(id);
      }
    } else {
      targets = active.filter(typeMatches);
    }

    const segment = segmentFor(spec, targets);
    const configUrl = spec.configUrl ?? `/api/v1/jobs/${spec.jobId}`;
    const configVersion = spec.configVersion ?? versionAt(now);
    const started: JobSpec = { ...spec, segment, configUrl, configVersion, startedAt: iso(now) };
    this.sql.exec("UPDATE job_runs SET status = 'sent', started_ms = ?, spec = ? WHERE job_id = ?", now, JSON.stringify(started), run.job_id);
    const db = this.db();
    this.host.outbox.statement(db.update(schema.jobs).set({
      status: "sent", startedAt: iso(now), segment, configUrl, configVersion, updatedAt: iso(now),
    }).where(and(eq(schema.jobs.jobId, run.job_id), eq(schema.jobs.status, "queued"))), now);
    this.host.outbox.audit({
      eventType: "job_started", siteId: this.host.siteId(), jobId: run.job_id, at: iso(now),
      description: `Job ${run.job_id} (${spec.action}) sent to ${targets.length + missing.length} device(s) of segment ${segment}`,
      metadata: { action: spec.action, priority: spec.priority, segment, config_url: configUrl, config_version: configVersion, targets: targets.length + missing.length },
    }, now);
    this.publish(started, "sent", { started_at: iso(now), segment, config_url: configUrl, config_version: configVersion });

    const commandType = commandTypeForAction(spec.action);
    const ttlS = Math.min(MAX_COMMAND_TTL_S, Math.max(1, Math.ceil((run.deadline_ms - now) / 1000) + COMMAND_GRACE_S));
    const payload = {
      ...(spec.payload ?? {}),
      job_id: spec.jobId, action: spec.action, description: spec.description, priority: spec.priority,
      segment, config_url: configUrl, config_version: configVersion,
    };
    for (const id of missing) this.addTarget(run.job_id, id, now, "failed", "Device not found in this site or not active");
    const required = requiredPermissions(commandType, payload);
    for (const d of targets) {
      const refused = refusedPermissions(d, required);
      if (refused.length) {
        // The owner's refusal is an answer, not a failure: the job goes on without this device.
        this.addTarget(run.job_id, d.device_id, now, SKIPPED_TARGET_STATUS, consentRefusal(refused));
        continue;
      }
      this.addTarget(run.job_id, d.device_id, now, "pending", null);
      const queued = this.host.commands.queue({
        deviceId: d.device_id, commandType, payload, ttlSeconds: ttlS, createdBy: spec.createdBy, jobId: spec.jobId,
        simulated: d.device_source === "simulated", reason: `job ${spec.jobId}`,
      }, now);
      if (!queued.ok) this.setTarget(run.job_id, d.device_id, null, "failed", null, queued.error.detail, now);
    }
    this.maybeFinish(run.job_id, now);
  }

  private addTarget(jobId: string, deviceId: string, now: number, status: string, error: string | null) {
    this.sql.exec(
      `INSERT INTO job_targets (job_id, device_id, status, error_message, created_ms, completed_ms) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT(job_id, device_id) DO NOTHING`,
      jobId, deviceId, status, error, now, status === "pending" ? null : now,
    );
    this.host.outbox.execution({
      job_id: jobId, device_id: deviceId, command_id: null, status, result: null, error_message: error,
      created_at: iso(now), completed_at: status === "pending" ? null : iso(now),
    }, now);
    if (status !== "pending") this.recordExecutionOutcome(jobId, deviceId, null, status, error, 0, 0, now);
  }

  private setTarget(jobId: string, deviceId: string, commandId: string | null, status: string, result: string | null, error: string | null, now: number, attempts = 0) {
    const done = !isOpenCommandStatus(status);
    const wasDone = this.sql.exec<{ status: string }>("SELECT status FROM job_targets WHERE job_id = ? AND device_id = ?", jobId, deviceId)
      .toArray().some((t) => !isOpenCommandStatus(t.status));
    this.sql.exec(
      `UPDATE job_targets SET command_id = coalesce(?, command_id), status = ?, result = ?, error_message = ?, completed_ms = ?
       WHERE job_id = ? AND device_id = ?`,
      commandId, status, result, error, done ? now : null, jobId, deviceId,
    );
    const row = this.sql.exec<TargetRow>("SELECT * FROM job_targets WHERE job_id = ? AND device_id = ?", jobId, deviceId).one();
    this.host.outbox.execution({
      job_id: jobId, device_id: deviceId, command_id: row.command_id, status, result: result === null ? null : JSON.parse(result),
      error_message: error, completed_at: done ? iso(now) : null,
    }, now);
    if (done && !wasDone) this.recordExecutionOutcome(jobId, deviceId, row.command_id, status, error, now - row.created_ms, Math.max(0, attempts - 1), now);
  }

  /** One job_outcomes row per device execution, when it finishes (the job's own row comes with `finish`). */
  private recordExecutionOutcome(jobId: string, deviceId: string, commandId: string | null, status: string, error: string | null, durationMs: number, retries: number, now: number) {
    const run = this.run(jobId);
    if (!run) return;
    const spec = JSON.parse(run.spec) as JobSpec;
    this.host.outbox.jobOutcome({
      job_id: jobId, job_type: spec.action, scope: "execution", device_id: deviceId, status, duration_ms: Math.max(0, durationMs),
      initiated_by: spec.createdBy, error_code: status === "completed" ? null : status.toUpperCase(), retry_count: retries,
      metadata: { command_id: commandId, error_message: error }, timestamp: iso(now),
    }, now);
  }

  /** Every transition of a job's command moves its execution; the last result finishes the job. */
  onCommandTransition(command: CommandRow, now: number) {
    if (!command.job_id) return;
    const target = this.sql.exec<TargetRow>("SELECT * FROM job_targets WHERE job_id = ? AND device_id = ?", command.job_id, command.device_id).toArray()[0];
    if (!target || (target.command_id && target.command_id !== command.command_id)) return;
    this.setTarget(command.job_id, command.device_id, command.command_id, command.status, command.result, command.error_message, now, command.attempts);
    if (!isOpenCommandStatus(command.status)) this.maybeFinish(command.job_id, now);
  }

  /** Each target of a job with its execution status (a rollout reads these on its alarm). */
  targetsOf(jobId: string): { device_id: string; status: string; error_message: string | null }[] {
    return this.sql.exec<{ device_id: string; status: string; error_message: string | null }>(
      "SELECT device_id, status, error_message FROM job_targets WHERE job_id = ?", jobId).toArray();
  }

  counts(jobId: string): JobCounts {
    return countTargets(this.sql.exec<{ status: string; n: number }>("SELECT status, count(*) AS n FROM job_targets WHERE job_id = ? GROUP BY status", jobId).toArray());
  }

  private maybeFinish(jobId: string, now: number) {
    const run = this.run(jobId);
    if (!run || run.status !== "sent") return;
    const counts = this.counts(jobId);
    if (counts.pending > 0) return;
    if (counts.total === 0) {
      this.finish(run, "completed", now, { ...counts, message: "No devices matched the job's targets" }, null);
      return;
    }
    // A target cancelled on its own (its command cancelled by an operator) did not succeed either.
    const unsuccessful = counts.failed + counts.cancelled;
    if (unsuccessful === 0) {
      this.finish(run, "completed", now, counts, null);
      return;
    }
    const failures = this.sql.exec<{ device_id: string; status: string; error_message: string | null }>(
      "SELECT device_id, status, error_message FROM job_targets WHERE job_id = ? AND status NOT IN ('completed', 'skipped') ORDER BY device_id LIMIT 4", jobId).toArray();
    const listed = failures.slice(0, 3).map((f) => `${f.device_id}: ${f.error_message ?? f.status}`).join("; ");
    const more = unsuccessful > 3 ? `; and ${unsuccessful - 3} more` : "";
    this.finish(run, "failed", now, counts, `${unsuccessful} of ${counts.total} devices failed: ${listed}${more}`);
  }

  /** The job's end: D1 record, job_outcome, audit and live event, all through the outbox in one batch. */
  private finish(run: RunRow, status: "completed" | "failed" | "cancelled" | "timeout", now: number, result: Record<string, unknown>, errorMessage: string | null, userId?: number | null) {
    const spec = JSON.parse(run.spec) as JobSpec;
    this.sql.exec("UPDATE job_runs SET status = ?, finished_ms = ? WHERE job_id = ?", status, now, run.job_id);
    const db = this.db();
    this.host.outbox.statement(db.update(schema.jobs).set({
      status, completedAt: iso(now), result, errorMessage, updatedAt: iso(now),
    }).where(and(eq(schema.jobs.jobId, run.job_id), inArray(schema.jobs.status, ["queued", "sent"]))), now);
    const startedMs = run.started_ms ?? Date.parse(spec.createdAt);
    this.host.outbox.jobOutcome({
      job_id: run.job_id, job_type: spec.action, scope: "job", device_id: null, status, duration_ms: Math.max(0, now - startedMs),
      initiated_by: spec.createdBy, error_code: status === "completed" ? null : status === "failed" ? "DEVICE_FAILURES" : status.toUpperCase(),
      retry_count: 0, metadata: { site_id: this.host.siteId(), priority: spec.priority, segment: spec.segment ?? null, ...result }, timestamp: iso(now),
    }, now);
    this.host.outbox.audit({
      eventType: FINAL_EVENT[status], siteId: this.host.siteId(), jobId: run.job_id, userId: userId ?? null, at: iso(now),
      description: `Job ${run.job_id} (${spec.action}) ${status}${errorMessage ? `: ${errorMessage}` : ""}`,
      metadata: { action: spec.action, priority: spec.priority, result },
    }, now);
    this.publish(spec, status, { completed_at: iso(now), result, error_message: errorMessage });
  }

  private publish(spec: JobSpec, status: JobStatus, extra: Record<string, unknown>) {
    this.host.emit("job.updated", { job_id: spec.jobId, action: spec.action, priority: spec.priority, status, ...extra });
  }

  // ---- cancel and time ----------------------------------------------------------------------

  /** Cancels a queued or sent job and its open commands; cancelling again answers the same. */
  cancel(jobId: string, now: number, userId: number | null, by: string): { ok: true; status: JobStatus } | { ok: false; status: JobStatus } {
    const run = this.run(jobId);
    if (!run) throw new Error(`job ${jobId} is not known to this hub`);
    if (run.status === "cancelled") return { ok: true, status: run.status };
    if (run.status !== "queued" && run.status !== "sent") return { ok: false, status: run.status };
    this.stop(run, "cancelled", now, `Cancelled by ${by}`, userId);
    return { ok: true, status: "cancelled" };
  }

  private stop(run: RunRow, status: "cancelled" | "timeout", now: number, message: string, userId?: number | null) {
    const counts = this.counts(run.job_id);
    this.finish(run, status, now, counts, status === "timeout" ? `${message}: ${counts.pending} of ${counts.total} devices had not reported` : message, userId);
    for (const commandId of this.host.commands.openOfJob(run.job_id)) {
      this.host.commands.cancel(commandId, now, { userId, reason: status === "timeout" ? "Job timed out" : "Job cancelled", force: true });
    }
  }

  nextWake(): number | undefined {
    const t = this.sql.exec<{ a: number | null; b: number | null }>(
      `SELECT (SELECT min(start_due_ms) FROM job_runs WHERE status = 'queued') AS a,
              (SELECT min(deadline_ms) FROM job_runs WHERE status IN ('queued', 'sent')) AS b`).one();
    const wakes = [t.a, t.b].filter((x): x is number => x !== null);
    return wakes.length ? Math.min(...wakes) : undefined;
  }

  async onAlarm(now: number) {
    const late = this.sql.exec<RunRow>("SELECT * FROM job_runs WHERE status IN ('queued', 'sent') AND deadline_ms <= ?", now).toArray();
    for (const run of late) {
      const spec = JSON.parse(run.spec) as JobSpec;
      const deadlineS = Math.round((Date.parse(spec.deadlineAt) - Date.parse(spec.createdAt)) / 1000);
      this.stop(run, "timeout", now, `Timed out after ${deadlineS} s`);
    }
    const due = this.sql.exec<{ job_id: string }>("SELECT job_id FROM job_runs WHERE status = 'queued' AND start_due_ms <= ?", now).toArray();
    for (const { job_id } of due) {
      try {
        await this.start(job_id);
      } catch (error) {
        // Backs off instead of spinning on the alarm; the cron re-drives it as well.
        this.sql.exec("UPDATE job_runs SET start_due_ms = ? WHERE job_id = ? AND status = 'queued'", this.host.now() + START_RETRY_MS, job_id);
        console.error(`job ${job_id} could not start; retrying`, error);
      }
    }
    this.sql.exec("DELETE FROM job_targets WHERE job_id IN (SELECT job_id FROM job_runs WHERE finished_ms < ?)", now - FINISHED_RETENTION_MS);
    this.sql.exec("DELETE FROM job_runs WHERE finished_ms < ?", now - FINISHED_RETENTION_MS);
  }
}
