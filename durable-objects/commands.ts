import type { D1Outbox } from "./outbox";
import {
  ok, refuse, type AckBody, type CommandRecord, type CommandReport, type HubError, type Outcome, type QueueInput,
} from "../src/shared/hub-contract";
import {
  COMMAND_RETENTION_MS, DEFAULT_COMMAND_TTL_S, MAX_COMMAND_TTL_S, OPEN_COMMAND_STATUSES, isOpenCommandStatus, normaliseCommandType,
  type CommandStatus,
} from "../src/shared/vocabulary";
import { canonicalJson, fnv1a } from "../src/shared/ids";
import { isoOrNull } from "../src/shared/time";

/**
 * The site's device command queue, in the hub's SQLite: at-least-once,
 * leased delivery. `pending → delivered → acknowledged → completed | failed`, plus `expired` and
 * `cancelled`. A poll leases what it returns for 60 s; a lease that lapses without an ack puts the
 * command back to `pending` (same command_id, devices dedupe); after 5 deliveries, or past its TTL,
 * it is `expired`. Every transition is audited (through the outbox, never on the poll itself) and
 * published to the live channel as `command.updated`.
 *
 * Simulated devices have no agent outside the hub: their commands are delivered and acknowledged at
 * once and finish after a simulated run time with a plausible result (see `simulatedRun`).
 */
export const COMMANDS_SCHEMA = `
  CREATE TABLE IF NOT EXISTS commands (
    command_id TEXT PRIMARY KEY,
    device_id TEXT NOT NULL,
    command_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    delivered_ms INTEGER,
    acknowledged_ms INTEGER,
    completed_ms INTEGER,
    expires_ms INTEGER NOT NULL,
    lease_until_ms INTEGER,
    result TEXT,
    error_message TEXT,
    created_by TEXT,
    idempotency_key TEXT,
    fingerprint TEXT,
    job_id TEXT,
    simulated INTEGER NOT NULL DEFAULT 0,
    sim_due_ms INTEGER
  );
  CREATE UNIQUE INDEX IF NOT EXISTS commands_idempotency ON commands (device_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
  CREATE INDEX IF NOT EXISTS commands_device ON commands (device_id, status, created_ms);
  CREATE INDEX IF NOT EXISTS commands_expiry ON commands (status, expires_ms);
  CREATE INDEX IF NOT EXISTS commands_lease ON commands (status, lease_until_ms);
  CREATE INDEX IF NOT EXISTS commands_sim_due ON commands (sim_due_ms) WHERE sim_due_ms IS NOT NULL;
  CREATE INDEX IF NOT EXISTS commands_job ON commands (job_id) WHERE job_id IS NOT NULL;
  CREATE INDEX IF NOT EXISTS commands_finished ON commands (completed_ms) WHERE completed_ms IS NOT NULL;
`;

export const LEASE_MS = 60_000;
export const MAX_DELIVERIES = 5;
export const MAX_OPEN_PER_DEVICE = 50;
const PRUNE_EVERY_MS = 6 * 3_600_000;

const isOpen = (s: CommandStatus) => isOpenCommandStatus(s);
const OPEN_SQL = `(${OPEN_COMMAND_STATUSES.map((s) => `'${s}'`).join(", ")})`;

export type CommandRow = {
  command_id: string;
  device_id: string;
  command_type: string;
  payload: string;
  status: CommandStatus;
  attempts: number;
  created_ms: number;
  delivered_ms: number | null;
  acknowledged_ms: number | null;
  completed_ms: number | null;
  expires_ms: number;
  lease_until_ms: number | null;
  result: string | null;
  error_message: string | null;
  created_by: string | null;
  idempotency_key: string | null;
  fingerprint: string | null;
  job_id: string | null;
  simulated: number;
  sim_due_ms: number | null;
};

const fail = <T>(status: HubError["status"], detail: string): Outcome<T> => refuse<T>(status, detail);

export interface CommandHost {
  siteId(): string;
  outbox: D1Outbox;
  emit(type: string, data: unknown): void;
  /** Called after every transition (jobs follow their commands through it). */
  onTransition?(row: CommandRow, now: number): void;
  /**
   * Runs a simulated command on the device's agent when it has one, so a restart reboots it and a
   * config update drives its update lifecycle; undefined falls back to `simulatedRun`'s result.
   */
  runOnAgent?(row: CommandRow, run: SimulatedOutcome, now: number): SimulatedOutcome | undefined;
}

export interface SimulatedOutcome {
  status: "completed" | "failed";
  result?: unknown;
  error?: string;
}

const iso = isoOrNull;

const EVENT: Partial<Record<CommandStatus, string>> = {
  delivered: "command_delivered",
  acknowledged: "command_acknowledged",
  completed: "command_completed",
  failed: "command_failed",
  expired: "command_expired",
  cancelled: "command_cancelled",
};

export class CommandQueue {
  private readonly waiters = new Map<string, Set<() => void>>();
  private prunedAt = 0;

  constructor(private readonly sql: SqlStorage, private readonly host: CommandHost) {}

  // ---- reads --------------------------------------------------------------------------------

  row(commandId: string): CommandRow | undefined {
    return this.sql.exec<CommandRow>("SELECT * FROM commands WHERE command_id = ?", commandId).toArray()[0];
  }

  toRecord(row: CommandRow): CommandRecord {
    return {
      command_id: row.command_id,
      device_id: row.device_id,
      site_id: this.host.siteId(),
      command_type: row.command_type,
      payload: JSON.parse(row.payload),
      status: row.status,
      attempts: row.attempts,
      created_at: iso(row.created_ms)!,
      delivered_at: iso(row.delivered_ms),
      acknowledged_at: iso(row.acknowledged_ms),
      completed_at: iso(row.completed_ms),
      expires_at: iso(row.expires_ms)!,
      result: row.result === null ? null : JSON.parse(row.result),
      error_message: row.error_message,
      created_by: row.created_by,
    };
  }

  get(commandId: string, now: number): CommandRecord | undefined {
    const row = this.row(commandId);
    return row ? this.toRecord(this.settle(row, now)) : undefined;
  }

  list(deviceId: string, q: { status?: CommandStatus; limit: number; offset: number }, now: number) {
    this.expireDue(now, deviceId);
    const where = q.status ? "device_id = ? AND status = ?" : "device_id = ?";
    const args = q.status ? [deviceId, q.status] : [deviceId];
    const total = this.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM commands WHERE ${where}`, ...args).one().n;
    const rows = this.sql.exec<CommandRow>(
      `SELECT * FROM commands WHERE ${where} ORDER BY created_ms DESC, rowid DESC LIMIT ? OFFSET ?`, ...args, q.limit, q.offset).toArray();
    return { commands: rows.map((r) => this.toRecord(r)), total };
  }

  /** Devices with at least one command waiting for delivery. */
  devicesWithPending(): string[] {
    return this.sql.exec<{ device_id: string }>("SELECT DISTINCT device_id FROM commands WHERE status = 'pending' AND simulated = 0").toArray().map((r) => r.device_id);
  }

  openCount(deviceId: string): number {
    return this.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM commands WHERE device_id = ? AND status IN ${OPEN_SQL}`, deviceId).one().n;
  }

  // ---- transitions --------------------------------------------------------------------------

  private transition(row: CommandRow, status: CommandStatus, now: number, set: Partial<CommandRow>, audit: { description: string; userId?: number | null; eventType?: string; metadata?: Record<string, unknown> }): CommandRow {
    const next: CommandRow = { ...row, ...set, status };
    this.sql.exec(
      `UPDATE commands SET status = ?, attempts = ?, delivered_ms = ?, acknowledged_ms = ?, completed_ms = ?, lease_until_ms = ?,
         result = ?, error_message = ?, sim_due_ms = ? WHERE command_id = ?`,
      next.status, next.attempts, next.delivered_ms, next.acknowledged_ms, next.completed_ms, next.lease_until_ms,
      next.result, next.error_message, next.sim_due_ms, next.command_id,
    );
    this.record(next, now, audit.eventType ?? EVENT[status]!, audit.description, audit.userId, { previous_status: row.status, ...audit.metadata });
    if (!isOpen(status)) this.host.outbox.indexClose(next.command_id, iso(now)!, now);
    this.host.onTransition?.(next, now);
    return next;
  }

  private record(row: CommandRow, now: number, eventType: string, description: string, userId: number | null | undefined, metadata: Record<string, unknown>) {
    const severity = eventType === "command_failed" ? "warning" : undefined;
    this.host.outbox.audit({
      eventType, description, severity, userId: userId ?? null, siteId: this.host.siteId(), deviceId: row.device_id, jobId: row.job_id,
      metadata: { command_id: row.command_id, command_type: row.command_type, status: row.status, attempts: row.attempts, ...metadata },
      at: iso(now)!,
    }, now);
    this.host.emit("command.updated", this.toRecord(row));
  }

  /** Queues a command; with an Idempotency-Key seen before, answers the command it created. */
  queue(input: QueueInput, now: number, commandId = crypto.randomUUID()): Outcome<{ command: CommandRecord; created: boolean }> {
    const commandType = normaliseCommandType(input.commandType);
    if (!commandType) return fail(422, `Invalid command type '${input.commandType}'`);
    const ttlS = input.ttlSeconds ?? DEFAULT_COMMAND_TTL_S;
    if (!Number.isInteger(ttlS) || ttlS < 1 || ttlS > MAX_COMMAND_TTL_S) return fail(422, `ttl_seconds must be between 1 and ${MAX_COMMAND_TTL_S}`);
    const payload = input.payload ?? {};
    const fingerprint = canonicalJson([commandType, payload, ttlS]);
    if (input.idempotencyKey) {
      const seen = this.sql.exec<CommandRow>("SELECT * FROM commands WHERE device_id = ? AND idempotency_key = ?", input.deviceId, input.idempotencyKey).toArray()[0];
      if (seen) {
        if (seen.fingerprint !== fingerprint) return fail(422, "This Idempotency-Key was already used with a different command");
        return ok({ command: this.toRecord(this.settle(seen, now)), created: false });
      }
    }
    this.expireDue(now, input.deviceId);
    if (this.openCount(input.deviceId) >= MAX_OPEN_PER_DEVICE) {
      return fail(429, `Device ${input.deviceId} already has ${MAX_OPEN_PER_DEVICE} open commands`);
    }
    let row: CommandRow = {
      command_id: commandId, device_id: input.deviceId, command_type: commandType, payload: JSON.stringify(payload), status: "pending",
      attempts: 0, created_ms: now, delivered_ms: null, acknowledged_ms: null, completed_ms: null, expires_ms: now + ttlS * 1000,
      lease_until_ms: null, result: null, error_message: null, created_by: input.createdBy ?? null, idempotency_key: input.idempotencyKey ?? null,
      fingerprint, job_id: input.jobId ?? null, simulated: input.simulated ? 1 : 0, sim_due_ms: null,
    };
    this.sql.exec(
      `INSERT INTO commands (command_id, device_id, command_type, payload, status, attempts, created_ms, expires_ms, created_by,
         idempotency_key, fingerprint, job_id, simulated) VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?, ?)`,
      row.command_id, row.device_id, row.command_type, row.payload, row.created_ms, row.expires_ms, row.created_by,
      row.idempotency_key, row.fingerprint, row.job_id, row.simulated,
    );
    this.host.outbox.indexOpen({
      command_id: row.command_id, site_id: this.host.siteId(), device_id: row.device_id, expires_at: iso(row.expires_ms)!, created_at: iso(now)!,
    }, now);
    this.record(row, now, "command_queued", `Command ${commandType} queued for device ${row.device_id}${input.reason ? ` (${input.reason})` : ""}`,
      input.userId, { ttl_seconds: ttlS, created_by: row.created_by });
    this.host.onTransition?.(row, now);
    if (row.simulated) row = this.simulateStart(row, now);
    else this.notify(row.device_id);
    return ok({ command: this.toRecord(row), created: true });
  }

  /** The device's pending commands, oldest first, each leased to it for LEASE_MS. */
  poll(deviceId: string, now: number): CommandRecord[] {
    this.expireDue(now, deviceId);
    const pending = this.sql.exec<CommandRow>(
      "SELECT * FROM commands WHERE device_id = ? AND status = 'pending' ORDER BY created_ms, rowid LIMIT ?", deviceId, MAX_OPEN_PER_DEVICE).toArray();
    return pending.map((row) => this.toRecord(this.transition(row, "delivered", now,
      { attempts: row.attempts + 1, delivered_ms: now, lease_until_ms: now + LEASE_MS },
      { description: `Command ${row.command_type} delivered to device ${row.device_id} (delivery ${row.attempts + 1} of ${MAX_DELIVERIES})` })));
  }

  ack(deviceId: string, commandId: string, now: number): Outcome<AckBody> {
    const found = this.own(deviceId, commandId, now);
    if (!found.ok) return found;
    let row = found.value;
    if (row.status === "expired" || row.status === "cancelled") return fail(409, `Command ${commandId} is ${row.status}${row.error_message ? `: ${row.error_message}` : ""}`);
    if (row.status === "pending" || row.status === "delivered") {
      row = this.transition(row, "acknowledged", now, { acknowledged_ms: now, lease_until_ms: null },
        { description: `Command ${row.command_type} acknowledged by device ${deviceId}` });
    }
    return ok({ message: "Command acknowledged", command_id: commandId, acknowledged_at: iso(row.acknowledged_ms) });
  }

  report(deviceId: string, commandId: string, report: CommandReport, now: number): Outcome<CommandRecord> {
    const found = this.own(deviceId, commandId, now);
    if (!found.ok) return found;
    const row = found.value;
    const result = report.result === undefined ? null : JSON.stringify(report.result);
    const errorMessage = report.errorMessage ?? null;
    if (row.status === "completed" || row.status === "failed") {
      const same = row.status === report.status && canonicalJson(row.result === null ? null : JSON.parse(row.result)) === canonicalJson(report.result ?? null)
        && row.error_message === errorMessage;
      return same ? ok(this.toRecord(row)) : fail(409, `Command ${commandId} already finished as ${row.status} with a different result`);
    }
    if (row.status === "expired" || row.status === "cancelled") return fail(409, `Command ${commandId} is ${row.status}${row.error_message ? `: ${row.error_message}` : ""}`);
    const done = this.transition(row, report.status, now, { completed_ms: now, lease_until_ms: null, result, error_message: errorMessage, sim_due_ms: null },
      { description: `Command ${row.command_type} ${report.status} on device ${deviceId}${errorMessage ? `: ${errorMessage}` : ""}` });
    return ok(this.toRecord(done));
  }

  /**
   * An operator's cancel: only while nobody has started it (pending or delivered); cancelling again
   * answers the cancelled command. `force` (jobs cancelled or timed out) also stops acknowledged ones.
   */
  cancel(commandId: string, now: number, by: { userId?: number | null; reason: string; force?: boolean }): Outcome<CommandRecord> {
    const found = this.row(commandId);
    if (!found) return fail(404, "Command not found");
    const row = this.settle(found, now);
    if (row.status === "cancelled") return ok(this.toRecord(row));
    const cancellable = row.status === "pending" || row.status === "delivered" || (by.force && row.status === "acknowledged");
    if (!cancellable) return fail(409, `Only pending or delivered commands can be cancelled; this one is ${row.status}`);
    const done = this.transition(row, "cancelled", now, { completed_ms: now, lease_until_ms: null, sim_due_ms: null, error_message: by.reason },
      { description: `Command ${row.command_type} for device ${row.device_id} cancelled: ${by.reason}`, userId: by.userId });
    return ok(this.toRecord(done));
  }

  /** Open commands of a device (for a device that leaves the site). */
  openOfDevice(deviceId: string): string[] {
    return this.sql.exec<{ command_id: string }>(`SELECT command_id FROM commands WHERE device_id = ? AND status IN ${OPEN_SQL}`, deviceId)
      .toArray().map((r) => r.command_id);
  }

  /** Open commands of a job (for cancel and timeout). */
  openOfJob(jobId: string): string[] {
    return this.sql.exec<{ command_id: string }>(`SELECT command_id FROM commands WHERE job_id = ? AND status IN ${OPEN_SQL}`, jobId)
      .toArray().map((r) => r.command_id);
  }

  private own(deviceId: string, commandId: string, now: number): Outcome<CommandRow> {
    const row = this.row(commandId);
    // Another device's command is indistinguishable from one that does not exist.
    if (!row || row.device_id !== deviceId) return fail(404, "Command not found");
    return ok(this.settle(row, now));
  }

  /** Applies whatever time has done to this one command (a lapsed lease, its TTL) before it is used. */
  private settle(row: CommandRow, now: number): CommandRow {
    if (isOpen(row.status) && row.expires_ms <= now) return this.expire(row, now, "ttl");
    if (row.status === "delivered" && row.lease_until_ms !== null && row.lease_until_ms <= now) return this.lapse(row, now);
    return row;
  }

  private expire(row: CommandRow, now: number, why: "ttl" | "deliveries"): CommandRow {
    const reason = why === "ttl"
      ? `Expired: its time to live ran out at ${iso(row.expires_ms)}`
      : `Expired: not acknowledged after ${MAX_DELIVERIES} deliveries`;
    return this.transition(row, "expired", now, { completed_ms: now, lease_until_ms: null, sim_due_ms: null, error_message: reason },
      { description: `Command ${row.command_type} for device ${row.device_id} ${reason.toLowerCase()}`, metadata: { reason: why } });
  }

  /** A delivery the device never acknowledged: back to pending, or expired after the last one. */
  private lapse(row: CommandRow, now: number): CommandRow {
    if (row.attempts >= MAX_DELIVERIES) return this.expire(row, now, "deliveries");
    return this.transition(row, "pending", now, { lease_until_ms: null }, {
      eventType: "command_lease_expired",
      description: `Command ${row.command_type} for device ${row.device_id} was not acknowledged within ${LEASE_MS / 1000} s; it will be delivered again`,
    });
  }

  /** Lapsed leases and passed TTLs, for one device or the whole site. */
  expireDue(now: number, deviceId?: string): number {
    const device = deviceId === undefined ? "" : " AND device_id = ?";
    const args = deviceId === undefined ? [] : [deviceId];
    const due = [
      ...this.sql.exec<CommandRow>(`SELECT * FROM commands WHERE status IN ${OPEN_SQL} AND expires_ms <= ?${device}`, now, ...args).toArray(),
      ...this.sql.exec<CommandRow>(`SELECT * FROM commands WHERE status = 'delivered' AND lease_until_ms <= ?${device}`, now, ...args).toArray(),
    ];
    const seen = new Set<string>();
    for (const row of due) {
      if (seen.has(row.command_id)) continue;
      seen.add(row.command_id);
      const current = this.row(row.command_id);
      if (current) this.settle(current, now);
    }
    return seen.size;
  }

  // ---- simulated agents ---------------------------------------------------------------------

  private simulateStart(row: CommandRow, now: number): CommandRow {
    row = this.transition(row, "delivered", now, { attempts: 1, delivered_ms: now },
      { description: `Command ${row.command_type} delivered to the simulated agent of ${row.device_id}` });
    row = this.transition(row, "acknowledged", now, { acknowledged_ms: now },
      { description: `Command ${row.command_type} acknowledged by the simulated agent of ${row.device_id}` });
    const dueMs = now + simulatedRun(row).durationMs;
    this.sql.exec("UPDATE commands SET sim_due_ms = ? WHERE command_id = ?", dueMs, row.command_id);
    return { ...row, sim_due_ms: dueMs };
  }

  private finishSimulated(now: number) {
    const due = this.sql.exec<CommandRow>("SELECT * FROM commands WHERE sim_due_ms IS NOT NULL AND sim_due_ms <= ? ORDER BY sim_due_ms", now).toArray();
    for (const row of due) {
      if (row.status !== "acknowledged") {
        this.sql.exec("UPDATE commands SET sim_due_ms = NULL WHERE command_id = ?", row.command_id);
        continue;
      }
      const planned = simulatedRun(row);
      const run = this.host.runOnAgent?.(row, planned, now) ?? planned;
      this.transition(row, run.status, now, {
        completed_ms: now, sim_due_ms: null, result: run.result === undefined ? null : JSON.stringify(run.result), error_message: run.error ?? null,
      }, { description: `Command ${row.command_type} ${run.status} on the simulated agent of ${row.device_id}${run.error ? `: ${run.error}` : ""}` });
    }
  }

  // ---- long poll ----------------------------------------------------------------------------

  /** Resolves when a command is queued for the device, or after `ms`. */
  waitFor(deviceId: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      let set = this.waiters.get(deviceId);
      if (!set) this.waiters.set(deviceId, (set = new Set()));
      const waiters = set;
      const done = () => {
        clearTimeout(timer);
        waiters.delete(done);
        if (!waiters.size && this.waiters.get(deviceId) === waiters) this.waiters.delete(deviceId);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      waiters.add(done);
    });
  }

  private notify(deviceId: string) {
    for (const wake of [...(this.waiters.get(deviceId) ?? [])]) wake();
  }

  // ---- time ---------------------------------------------------------------------------------

  nextWake(): number | undefined {
    const t = this.sql.exec<{ a: number | null; b: number | null; c: number | null }>(
      `SELECT (SELECT min(expires_ms) FROM commands WHERE status IN ${OPEN_SQL}) AS a,
              (SELECT min(lease_until_ms) FROM commands WHERE status = 'delivered') AS b,
              (SELECT min(sim_due_ms) FROM commands WHERE sim_due_ms IS NOT NULL) AS c`).one();
    const wakes = [t.a, t.b, t.c].filter((x): x is number => x !== null);
    return wakes.length ? Math.min(...wakes) : undefined;
  }

  onAlarm(now: number) {
    this.finishSimulated(now);
    this.expireDue(now);
    if (now - this.prunedAt >= PRUNE_EVERY_MS) {
      this.prunedAt = now;
      this.sql.exec(`DELETE FROM commands WHERE completed_ms IS NOT NULL AND completed_ms < ? AND status NOT IN ${OPEN_SQL}`, now - COMMAND_RETENTION_MS);
    }
  }
}

// ---- simulated execution (deterministic per command id) ---------------------------------------

/** A small seeded generator, so a command's simulated figures are the same every time they are computed. */
function seeded(seed: string): () => number {
  let h = fnv1a(seed);
  return () => {
    h = Math.imul(h ^ (h >>> 15), 2246822507);
    h = Math.imul(h ^ (h >>> 13), 3266489909);
    return ((h ^= h >>> 16) >>> 0) / 4294967296;
  };
}

const JOB_KEYS = new Set(["job_id", "action", "description", "priority", "segment"]);

function settingsOf(payload: Record<string, unknown>): Record<string, unknown> {
  for (const key of ["settings", "config"]) {
    const v = payload[key];
    if (v && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
  }
  return Object.fromEntries(Object.entries(payload).filter(([k]) => !JOB_KEYS.has(k)));
}

/**
 * What a simulated agent does with a command: restart reboots in 2–6 s (`reboot_time_seconds`),
 * update_config applies its settings in 0.5 s (`applied_settings`), ping answers in 5–50 ms
 * (`latency_ms`), shutdown powers off in 1 s. Any other type fails at once: a simulated agent does
 * not know it.
 */
export function simulatedRun(row: Pick<CommandRow, "command_id" | "command_type" | "payload">): SimulatedOutcome & { durationMs: number } {
  const random = seeded(row.command_id);
  switch (row.command_type) {
    case "restart": {
      const seconds = 2 + Math.floor(random() * 5);
      return { durationMs: seconds * 1000, status: "completed", result: { reboot_time_seconds: seconds, simulated: true } };
    }
    case "update_config":
      return { durationMs: 500, status: "completed", result: { applied_settings: settingsOf(JSON.parse(row.payload)), simulated: true } };
    case "ping": {
      const latency = 5 + Math.floor(random() * 46);
      return { durationMs: latency, status: "completed", result: { latency_ms: latency, simulated: true } };
    }
    case "shutdown":
      return { durationMs: 1000, status: "completed", result: { powered_off: true, simulated: true } };
    case "notify":
      // A simulated terminal has no screen to keep: showing the notification is all there is to do.
      return { durationMs: 0, status: "completed", result: { displayed: true, simulated: true } };
    default:
      return { durationMs: 0, status: "failed", error: `Simulated agents do not support the command type '${row.command_type}'` };
  }
}
