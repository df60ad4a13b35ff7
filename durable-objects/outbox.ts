import { auditRow, type AuditInput } from "../src/shared/audit-row";
import { iso } from "../src/shared/time";
import type { LiveStatus } from "../src/shared/vocabulary";
import { JOB_OUTCOME_ROLLUP_UPSERT, jobOutcomeRollupRows } from "../src/shared/rollups";

/**
 * The hub's one way to write to D1. Everything a hub changes happens first in its own SQLite; what
 * D1 must learn about it — presence transitions, last_seen, each device's latest sample, health
 * checks, the agents projection, audit rows, job executions and status, job outcomes and their
 * rollups, the command index — is
 * appended here in the same synchronous step and written in coalesced batches: one statement per
 * kind per chunk through `json_each`, all in one atomic `DB.batch`. So a device's poll never waits on
 * D1, a fan-out to a thousand devices is a handful of statements, and a D1 outage loses nothing: a
 * failed batch stays here and the alarm retries it with backoff.
 *
 * Delivery is at-least-once: a batch that succeeded in D1 but whose rows could not be deleted here
 * (the object died in between) is sent again. Status, last_seen, latest sample, projection and
 * execution rows are upserts or last-wins updates, so they land exactly once in effect; audit rows,
 * state-history rows, health checks and job outcomes are inserts (and rollup additions) and may then
 * repeat — the rare price of never losing one. See docs/architecture.md.
 */
export const OUTBOX_SCHEMA = `
  CREATE TABLE IF NOT EXISTS d1_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_ms INTEGER NOT NULL
  );
`;

/** Writes reach D1 at most this long after they were queued (coalescing window). */
export const OUTBOX_FLUSH_MS = 1_000;
const MAX_BACKOFF_MS = 60_000;
const ROWS_PER_FLUSH = 5_000;
/** Kept well under D1's 2 MB value limit. */
const MAX_CHUNK_BYTES = 256 * 1024;

export interface ExecutionRow {
  job_id: string;
  device_id: string;
  command_id: string | null;
  status: string;
  result: unknown;
  error_message: string | null;
  created_at?: string;
  completed_at: string | null;
}

/** A presence transition as D1 records it (the device row, a state-history row, an audit row). */
export interface TransitionRow {
  deviceId: string;
  previous: LiveStatus | null;
  next: LiveStatus;
  reason: string;
  at: number;
}

/** A finished job (`scope` job) or device execution of one (`scope` execution), for job_outcomes and its rollups. */
export interface JobOutcomeRow {
  job_id: string;
  job_type: string;
  scope: "job" | "execution";
  device_id: string | null;
  status: string;
  duration_ms: number | null;
  initiated_by: string | null;
  error_code: string | null;
  retry_count: number;
  metadata: Record<string, unknown>;
  timestamp: string;
}

export interface HealthCheckRow {
  device_id: string;
  status: string;
  response_time_ms: number | null;
  details: unknown;
  created_at: string;
}

export interface AgentProjectionRow {
  device_id: string;
  state: string;
  config_version: string;
  target_version: string | null;
  health_status: string | null;
  last_health_check: string | null;
  last_health_at: string | null;
  booted_at: string;
  state_changed_at: string;
}

type Entry =
  | { kind: "audit"; body: Record<string, unknown> }
  | { kind: "device_status"; body: { device_id: string; status: LiveStatus; last_seen: string | null; at: string } }
  | { kind: "state_history"; body: { device_id: string; previous_state: LiveStatus | null; new_state: LiveStatus; reason: string; timestamp: string } }
  | { kind: "last_seen"; body: { device_id: string; ts: string } }
  | { kind: "latest_sample"; body: Record<string, unknown> & { device_id: string } }
  | { kind: "health_check"; body: HealthCheckRow }
  | { kind: "agent_projection"; body: AgentProjectionRow }
  | { kind: "index_open"; body: { command_id: string; site_id: string; device_id: string; expires_at: string; created_at: string } }
  | { kind: "index_close"; body: { command_id: string; at: string } }
  | { kind: "execution"; body: Record<string, unknown> }
  | { kind: "job_outcome"; body: JobOutcomeRow }
  | { kind: "sql"; body: { sql: string; params: unknown[] } };

/** What a drizzle query builder gives: `.toSQL()` with driver-mapped parameters. */
export interface ToSql {
  toSQL(): { sql: string; params: unknown[] };
}

export class D1Outbox {
  private flushing: Promise<void> | undefined;
  private failures = 0;
  private retryAt = 0;
  private oldestMs: number | null | undefined;
  /** Entries added since this object started: callers compare it to know whether a call wrote anything. */
  added = 0;

  constructor(
    private readonly sql: SqlStorage, private readonly d1: () => D1Database, private readonly siteId: () => string, private readonly now: () => number,
    /** Called after a batch that held audit rows reached D1 (the hub nudges the audit stream). */
    private readonly afterAuditWrite: () => void = () => undefined,
  ) {}

  private add(entry: Entry, now: number) {
    this.sql.exec("INSERT INTO d1_outbox (kind, body, created_ms) VALUES (?, ?, ?)", entry.kind, JSON.stringify(entry.body), now);
    this.added++;
    if (this.oldestMs === null) this.oldestMs = now;
  }

  /** An audit row, built by the one builder every producer uses. */
  audit(input: AuditInput, now: number) {
    const row = auditRow({ siteId: this.siteId(), ...input, at: input.at ?? iso(now) });
    this.add({ kind: "audit", body: { ...row, eventMetadata: JSON.stringify(row.eventMetadata ?? {}) } }, now);
  }

  /** A device went online, offline or into error: its D1 status, a state-history row and an audit event. */
  transition(t: TransitionRow, now: number) {
    const at = iso(t.at);
    this.add({ kind: "device_status", body: { device_id: t.deviceId, status: t.next, last_seen: t.next === "offline" ? null : at, at } }, now);
    this.add({ kind: "state_history", body: { device_id: t.deviceId, previous_state: t.previous, new_state: t.next, reason: t.reason, timestamp: at } }, now);
    const eventType = t.next === "offline" ? "device_offline" : t.next === "error" ? "device_error" : "device_online";
    this.audit({
      eventType, deviceId: t.deviceId, at,
      description: `Device ${t.deviceId} is ${t.next}: ${t.reason}`,
      metadata: { previous_state: t.previous, new_state: t.next, reason: t.reason },
    }, now);
  }

  lastSeen(deviceId: string, lastSeenMs: number, now: number) {
    this.add({ kind: "last_seen", body: { device_id: deviceId, ts: iso(lastSeenMs) } }, now);
  }

  /** The device's most recent telemetry sample (as stored in metrics_state.latest). */
  latestSample(deviceId: string, sample: Record<string, unknown>, now: number) {
    this.add({ kind: "latest_sample", body: { ...sample, device_id: deviceId, updated_at: iso(now) } }, now);
  }

  healthCheck(row: HealthCheckRow, now: number) {
    this.add({ kind: "health_check", body: { ...row, details: JSON.stringify(row.details) } }, now);
  }

  agentProjection(row: AgentProjectionRow, now: number) {
    this.add({ kind: "agent_projection", body: row }, now);
  }

  indexOpen(row: { command_id: string; site_id: string; device_id: string; expires_at: string; created_at: string }, now: number) {
    this.add({ kind: "index_open", body: row }, now);
  }

  indexClose(commandId: string, at: string, now: number) {
    this.add({ kind: "index_close", body: { command_id: commandId, at } }, now);
  }

  execution(row: ExecutionRow, now: number) {
    this.add({ kind: "execution", body: { ...row, result: row.result === undefined || row.result === null ? null : JSON.stringify(row.result) } }, now);
  }

  /** A job outcome row, and what it adds to the job-outcome rollups (in the same batch). */
  jobOutcome(row: JobOutcomeRow, now: number) {
    this.add({ kind: "job_outcome", body: row }, now);
  }

  /** Any single statement (built with drizzle), run after the bulk kinds of the same batch. */
  statement(query: ToSql, now: number) {
    const { sql, params } = query.toSQL();
    this.add({ kind: "sql", body: { sql, params } }, now);
  }

  /** When the outbox next needs the alarm; undefined when empty. */
  nextWake(now: number): number | undefined {
    if (this.oldestMs === undefined) {
      this.oldestMs = this.sql.exec<{ t: number | null }>("SELECT min(created_ms) AS t FROM d1_outbox").one().t;
    }
    if (this.oldestMs === null) return undefined;
    return Math.max(this.oldestMs + OUTBOX_FLUSH_MS, this.retryAt, now);
  }

  /** Writes everything queued so far; one flush at a time, a second caller waits and flushes again. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    this.flushing = this.flushAll().finally(() => { this.flushing = undefined; });
    return this.flushing;
  }

  /** Flush that never throws: a failure backs off and the alarm retries. */
  async flushQuietly(): Promise<boolean> {
    try {
      await this.flush();
      return true;
    } catch (error) {
      console.error("SiteHub outbox flush failed; will retry", error);
      return false;
    }
  }

  private async flushAll() {
    try {
      for (;;) {
        const rows = this.sql.exec<{ id: number; kind: Entry["kind"]; body: string }>(
          "SELECT id, kind, body FROM d1_outbox ORDER BY id LIMIT ?", ROWS_PER_FLUSH).toArray();
        if (!rows.length) break;
        const statements = this.build(rows);
        if (statements.length) await this.d1().batch(statements);
        this.sql.exec("DELETE FROM d1_outbox WHERE id <= ?", rows[rows.length - 1].id);
        if (rows.some((r) => r.kind === "audit")) this.afterAuditWrite();
        if (rows.length < ROWS_PER_FLUSH) break;
      }
      this.failures = 0;
      this.retryAt = 0;
    } catch (error) {
      this.failures++;
      this.retryAt = this.now() + Math.min(MAX_BACKOFF_MS, 1_000 * 2 ** this.failures);
      throw error;
    } finally {
      this.oldestMs = undefined;
    }
  }

  private build(rows: { kind: Entry["kind"]; body: string }[]): D1PreparedStatement[] {
    const d1 = this.d1();
    const siteId = this.siteId();
    const of = (kind: Entry["kind"]) => rows.filter((r) => r.kind === kind).map((r) => JSON.parse(r.body) as Record<string, unknown>);
    /** Several states of the same record in one flush: the latest wins (they are upserts). */
    const latest = (kind: Entry["kind"], key: (e: Record<string, unknown>) => string) => {
      const byKey = new Map<string, Record<string, unknown>>();
      for (const e of of(kind)) {
        const k = key(e);
        byKey.delete(k);
        byKey.set(k, e);
      }
      return [...byKey.values()];
    };
    const statements: D1PreparedStatement[] = [];
    /** One statement per chunk; `?1` is the chunk as JSON, `?2` (where the SQL uses it) this hub's site. */
    const bulk = (sql: string, items: unknown[]) => {
      const usesSite = sql.includes("?2");
      for (const chunk of chunks(items)) {
        const statement = d1.prepare(sql);
        statements.push(usesSite ? statement.bind(JSON.stringify(chunk), siteId) : statement.bind(JSON.stringify(chunk)));
      }
    };
    const field = (name: string) => `json_extract(value, '$.${name}')`;

    bulk(
      `INSERT INTO command_index (command_id, site_id, device_id, expires_at, created_at)
       SELECT ${field("command_id")}, ${field("site_id")}, ${field("device_id")}, ${field("expires_at")}, ${field("created_at")}
       FROM json_each(?1) WHERE true ON CONFLICT(command_id) DO NOTHING`,
      of("index_open"),
    );
    bulk(
      `INSERT INTO audit_logs (event_type, category, severity, description, user_id, job_id, device_id, site_id, event_metadata, ip_address, user_agent, session_id, created_at)
       SELECT ${field("eventType")}, ${field("category")}, ${field("severity")}, ${field("description")}, ${field("userId")}, ${field("jobId")},
              ${field("deviceId")}, ${field("siteId")}, ${field("eventMetadata")}, ${field("ipAddress")}, ${field("userAgent")}, ${field("sessionId")}, ${field("createdAt")}
       FROM json_each(?1)`,
      of("audit"),
    );
    bulk(
      `UPDATE devices SET status = (SELECT ${field("status")} FROM json_each(?1) WHERE ${field("device_id")} = devices.device_id),
         last_seen = coalesce((SELECT ${field("last_seen")} FROM json_each(?1) WHERE ${field("device_id")} = devices.device_id), last_seen),
         updated_at = (SELECT ${field("at")} FROM json_each(?1) WHERE ${field("device_id")} = devices.device_id)
       WHERE device_id IN (SELECT ${field("device_id")} FROM json_each(?1)) AND site_id = ?2`,
      latest("device_status", (e) => String(e.device_id)),
    );
    bulk(
      `INSERT INTO device_state_history (device_id, site_id, previous_state, new_state, changed_by, reason, created_at)
       SELECT ${field("device_id")}, ?2, ${field("previous_state")}, ${field("new_state")}, 'system', ${field("reason")}, ${field("timestamp")}
       FROM json_each(?1)`,
      of("state_history"),
    );
    bulk(
      `UPDATE devices SET last_seen = (SELECT max(${field("ts")}) FROM json_each(?1) WHERE ${field("device_id")} = devices.device_id)
       WHERE device_id IN (SELECT ${field("device_id")} FROM json_each(?1)) AND site_id = ?2`,
      latest("last_seen", (e) => String(e.device_id)),
    );
    bulk(
      `INSERT INTO device_metrics (device_id, site_id, cpu_usage, memory_usage, disk_usage, temperature, network_latency_ms, transaction_count, uptime_seconds, error_rate, recorded_at, updated_at)
       SELECT ${field("device_id")}, ?2, ${field("cpu_usage")}, ${field("memory_usage")}, ${field("disk_usage")}, ${field("temperature")},
              ${field("network_latency_ms")}, ${field("transaction_count")}, ${field("uptime_seconds")}, ${field("error_rate")},
              ${field("recorded_at")}, ${field("updated_at")}
       FROM json_each(?1) WHERE true
       ON CONFLICT(device_id) DO UPDATE SET cpu_usage = excluded.cpu_usage, memory_usage = excluded.memory_usage,
         disk_usage = excluded.disk_usage, temperature = excluded.temperature, network_latency_ms = excluded.network_latency_ms,
         transaction_count = excluded.transaction_count, uptime_seconds = excluded.uptime_seconds, error_rate = excluded.error_rate,
         recorded_at = excluded.recorded_at, updated_at = excluded.updated_at`,
      latest("latest_sample", (e) => String(e.device_id)),
    );
    bulk(
      `INSERT INTO health_checks (device_id, site_id, status, response_time_ms, details, created_at)
       SELECT ${field("device_id")}, ?2, ${field("status")}, ${field("response_time_ms")}, ${field("details")}, ${field("created_at")}
       FROM json_each(?1)`,
      of("health_check"),
    );
    bulk(
      `INSERT INTO agents (device_id, site_id, source, state, config_version, target_version, health_status, last_health_check, last_health_at, booted_at, state_changed_at, updated_at)
       SELECT ${field("device_id")}, ?2, 'simulated', ${field("state")}, ${field("config_version")}, ${field("target_version")}, ${field("health_status")},
              ${field("last_health_check")}, ${field("last_health_at")}, ${field("booted_at")}, ${field("state_changed_at")}, strftime('%Y-%m-%dT%H:%M:%fZ','now')
       FROM json_each(?1) WHERE true
       ON CONFLICT(device_id) DO UPDATE SET site_id = excluded.site_id, state = excluded.state, config_version = excluded.config_version,
         target_version = excluded.target_version, health_status = excluded.health_status, last_health_check = excluded.last_health_check,
         last_health_at = excluded.last_health_at, booted_at = excluded.booted_at, state_changed_at = excluded.state_changed_at,
         updated_at = excluded.updated_at`,
      latest("agent_projection", (e) => String(e.device_id)),
    );
    // The latest state of each (job, device) wins; an earlier one's created_at is kept.
    const executions = new Map<string, Record<string, unknown>>();
    for (const e of of("execution")) {
      const key = `${e.job_id}\u0000${e.device_id}`;
      const previous = executions.get(key);
      executions.delete(key);
      executions.set(key, { ...e, created_at: e.created_at ?? previous?.created_at ?? null });
    }
    bulk(
      `INSERT INTO job_executions (job_id, device_id, command_id, status, result, error_message, created_at, completed_at)
       SELECT ${field("job_id")}, ${field("device_id")}, ${field("command_id")}, ${field("status")}, ${field("result")}, ${field("error_message")},
              coalesce(${field("created_at")}, strftime('%Y-%m-%dT%H:%M:%fZ','now')), ${field("completed_at")}
       FROM json_each(?1) WHERE true
       ON CONFLICT(job_id, device_id) DO UPDATE SET command_id = coalesce(excluded.command_id, command_id), status = excluded.status,
         result = excluded.result, error_message = excluded.error_message, completed_at = excluded.completed_at`,
      [...executions.values()],
    );
    const outcomes = of("job_outcome");
    bulk(
      `INSERT INTO job_outcomes (job_id, site_id, scope, job_type, device_id, status, duration_ms, initiated_by, error_code, retry_count, metadata, created_at)
       SELECT ${field("job_id")}, ?2, ${field("scope")}, ${field("job_type")}, ${field("device_id")}, ${field("status")}, ${field("duration_ms")},
              ${field("initiated_by")}, ${field("error_code")}, ${field("retry_count")}, json(${field("metadata")}), ${field("timestamp")}
       FROM json_each(?1)`,
      outcomes,
    );
    bulk(JOB_OUTCOME_ROLLUP_UPSERT, jobOutcomeRollupRows(outcomes.map((o) => ({
      siteId, jobType: String(o.job_type), scope: o.scope === "job" ? "job" : "execution", status: String(o.status),
      durationMs: typeof o.duration_ms === "number" ? o.duration_ms : null, at: Date.parse(String(o.timestamp)),
    }))));
    for (const r of rows) {
      if (r.kind !== "sql") continue;
      const { sql, params } = JSON.parse(r.body) as { sql: string; params: unknown[] };
      statements.push(d1.prepare(sql).bind(...params));
    }
    bulk(
      `UPDATE command_index SET closed_at = (SELECT ${field("at")} FROM json_each(?1) WHERE ${field("command_id")} = command_index.command_id)
       WHERE command_id IN (SELECT ${field("command_id")} FROM json_each(?1))`,
      of("index_close"),
    );
    return statements;
  }
}

function chunks<T>(items: T[]): T[][] {
  const out: T[][] = [];
  let current: T[] = [];
  let size = 0;
  for (const item of items) {
    const bytes = JSON.stringify(item).length;
    if (current.length && size + bytes > MAX_CHUNK_BYTES) {
      out.push(current);
      current = [];
      size = 0;
    }
    current.push(item);
    size += bytes;
  }
  if (current.length) out.push(current);
  return out;
}
