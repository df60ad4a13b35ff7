/**
 * The simulated agents of one site, in its SiteHub's SQLite: every device registered with
 * `device_source: simulated` has a row here, so it survives eviction. This module is the store and the
 * lifecycle; durable-objects/agent-model.ts computes health and telemetry; agent-runtime.ts
 * orchestrates both for the hub.
 *
 * An update moves idle|ready → downloading → updating → restarting → health_check → ready, each step a
 * few seconds (deterministic per device and update). With probability `failure_rate` (AGENT_FAILURE_RATE,
 * default 0.05) one step fails: the agent goes back to idle with a fault, and reports unhealthy with the
 * error until a restart or a successful update.
 */
import type { Sample, StoreReason, PartialHealth } from "../src/shared/hub-contract";
import type { Category, Severity, AgentState } from "../src/shared/vocabulary";
import { TELEMETRY_PERIOD_MS, rand, seedOf, type HealthRecord, type Incident } from "./agent-model";
import type { Transition } from "./presence";

export const INITIAL_CONFIG_VERSION = "1.0.0";
const EVENT_RETENTION_MS = 90 * 86_400_000;
const pick = <T>(list: T[], r: number) => list[Math.floor(r * list.length) % list.length];

export const AGENTS_SCHEMA = `
  CREATE TABLE IF NOT EXISTS agents (
    device_id TEXT PRIMARY KEY,
    device_type TEXT NOT NULL,
    active INTEGER NOT NULL DEFAULT 1,
    seed INTEGER NOT NULL,
    failure_rate REAL NOT NULL,
    state TEXT NOT NULL,
    state_since_ms INTEGER NOT NULL,
    next_at_ms INTEGER,
    plan TEXT,
    config_version TEXT NOT NULL,
    configuration TEXT NOT NULL,
    boot_ms INTEGER NOT NULL,
    boot_count INTEGER NOT NULL DEFAULT 0,
    fault TEXT,
    fault_at_ms INTEGER,
    updates INTEGER NOT NULL DEFAULT 0,
    sim_at_ms INTEGER NOT NULL,
    checked_at_ms INTEGER,
    health_status TEXT,
    last_health TEXT,
    projected INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL
  );
  CREATE INDEX IF NOT EXISTS agents_next_at ON agents (next_at_ms) WHERE next_at_ms IS NOT NULL;
  CREATE TABLE IF NOT EXISTS agent_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    device_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT
  );
  CREATE INDEX IF NOT EXISTS agent_events_device_time ON agent_events (device_id, at_ms);
`;

export type AgentRow = {
  device_id: string;
  device_type: string;
  active: number;
  seed: number;
  failure_rate: number;
  state: AgentState;
  state_since_ms: number;
  next_at_ms: number | null;
  plan: string | null;
  config_version: string;
  configuration: string;
  boot_ms: number;
  boot_count: number;
  fault: string | null;
  fault_at_ms: number | null;
  updates: number;
  sim_at_ms: number;
  checked_at_ms: number | null;
  health_status: string | null;
  last_health: string | null;
  projected: number;
  created_ms: number;
};

export interface UpdatePlan {
  from_version: string;
  target_version: string;
  /** Settings merged into the configuration when the update completes. */
  config: Record<string, unknown> | null;
  durations: Record<"downloading" | "updating" | "restarting" | "health_check", number>;
  fail_at: AgentState | null;
  error: string | null;
  backup: boolean;
  started_ms: number;
  requested_by: string | null;
}

export const DEFAULT_CONFIGURATION = {
  heartbeat_interval_s: 10,
  telemetry_interval_s: 15,
  command_poll_interval_s: 15,
  receipt_printer: "enabled",
  offline_transactions: "enabled",
  log_level: "info",
};

const STEP_ERRORS: Record<string, string[]> = {
  downloading: ["Update download failed: checksum mismatch", "Update download failed: connection reset by peer"],
  updating: ["Installation failed: package script exited with code 1", "Installation failed: not enough free space"],
  health_check: ["Post-update health check failed: pos_app not responding", "Post-update health check failed: payment gateway handshake rejected"],
};

const NEXT: Partial<Record<AgentState, AgentState>> = {
  downloading: "updating",
  updating: "restarting",
  restarting: "health_check",
  health_check: "ready",
};

/** One lifecycle move, for the hub to publish, project and record. */
export interface StepEvent {
  device_id: string;
  previous: AgentState;
  state: AgentState;
  at: number;
  config_version: string;
  target_version: string | null;
  /** Set when the update failed at this step. */
  error?: string;
  /** The agent rebooted at this step (new boot id). */
  rebooted?: boolean;
  /** The update finished successfully. */
  completed?: boolean;
}

export interface AgentIdentity {
  deviceId: string;
  deviceType: string;
  createdMs: number;
}

export class Agents {
  constructor(private readonly sql: SqlStorage, private readonly defaultFailureRate: number) {}

  get(deviceId: string): AgentRow | undefined {
    return this.sql.exec<AgentRow>("SELECT * FROM agents WHERE device_id = ?", deviceId).toArray()[0];
  }

  active(): AgentRow[] {
    return this.sql.exec<AgentRow>("SELECT * FROM agents WHERE active = 1 ORDER BY device_id").toArray();
  }

  activeIds(): Set<string> {
    return new Set(this.sql.exec<{ device_id: string }>("SELECT device_id FROM agents WHERE active = 1").toArray().map((r) => r.device_id));
  }

  /** Creates the agent on first sight (idle, config 1.0.0, booted when the device was registered); reactivates a resumed one. */
  ensure(identity: AgentIdentity, now: number): { row: AgentRow; created: boolean } {
    const existing = this.get(identity.deviceId);
    if (existing) {
      if (!existing.active || existing.device_type !== identity.deviceType) {
        this.sql.exec("UPDATE agents SET active = 1, device_type = ?, projected = 0 WHERE device_id = ?", identity.deviceType, identity.deviceId);
        return { row: this.get(identity.deviceId)!, created: false };
      }
      return { row: existing, created: false };
    }
    const bootMs = Math.min(now, identity.createdMs || now);
    this.sql.exec(
      `INSERT INTO agents (device_id, device_type, seed, failure_rate, state, state_since_ms, config_version, configuration, boot_ms, sim_at_ms, created_ms)
       VALUES (?, ?, ?, ?, 'idle', ?, ?, ?, ?, ?, ?)`,
      identity.deviceId, identity.deviceType, seedOf(identity.deviceId), this.defaultFailureRate, now, INITIAL_CONFIG_VERSION,
      JSON.stringify(DEFAULT_CONFIGURATION), bootMs, now - TELEMETRY_PERIOD_MS, identity.createdMs || now,
    );
    return { row: this.get(identity.deviceId)!, created: true };
  }

  deactivate(deviceId: string) {
    this.sql.exec("UPDATE agents SET active = 0, state = CASE WHEN state IN ('idle','ready') THEN state ELSE 'idle' END, next_at_ms = NULL, plan = NULL, projected = 0 WHERE device_id = ?", deviceId);
  }

  /** The earliest due lifecycle step of an active agent. */
  nextStepAt(): number | undefined {
    return this.sql.exec<{ at: number | null }>("SELECT min(next_at_ms) AS at FROM agents WHERE active = 1 AND next_at_ms IS NOT NULL").one().at ?? undefined;
  }

  due(now: number): AgentRow[] {
    return this.sql.exec<AgentRow>("SELECT * FROM agents WHERE active = 1 AND next_at_ms IS NOT NULL AND next_at_ms <= ? ORDER BY next_at_ms", now).toArray();
  }

  unprojected(): AgentRow[] {
    return this.sql.exec<AgentRow>("SELECT * FROM agents WHERE projected = 0").toArray();
  }

  markProjected(deviceIds: string[]) {
    for (const id of deviceIds) this.sql.exec("UPDATE agents SET projected = 1 WHERE device_id = ?", id);
  }

  setTelemetryAt(deviceId: string, t: number) {
    this.sql.exec("UPDATE agents SET sim_at_ms = ? WHERE device_id = ?", t, deviceId);
  }

  /**
   * Remembers the agent's latest health check. Stored when the status or config version changed, or at
   * most once a minute otherwise (the 2 s checks of a watched site would else rewrite every agent's row each tick).
   */
  noteHealth(deviceId: string, record: HealthRecord, t: number): { changed: boolean; previous: string | null } {
    const row = this.get(deviceId);
    const previous = row?.health_status ?? null;
    const sameVersion = !!row?.last_health && (JSON.parse(row.last_health) as HealthRecord).config_version === record.config_version;
    if (previous === record.status && sameVersion && row?.checked_at_ms != null && t >= row.checked_at_ms && t - row.checked_at_ms < 60_000) {
      return { changed: false, previous };
    }
    this.sql.exec("UPDATE agents SET checked_at_ms = ?, health_status = ?, last_health = ? WHERE device_id = ?", t, record.status, JSON.stringify(record), deviceId);
    const changed = previous !== record.status;
    if (changed) this.sql.exec("UPDATE agents SET projected = 0 WHERE device_id = ?", deviceId);
    return { changed, previous };
  }

  /**
   * Plans an update to `targetVersion` and moves the agent to downloading. The durations and whether
   * (and where) it fails are drawn from the agent's seed and update count, so a replay is identical.
   */
  startUpdate(row: AgentRow, input: { targetVersion: string; config: Record<string, unknown> | null; backup: boolean; requestedBy: string | null }, now: number): StepEvent {
    const n = row.updates + 1;
    const r = (k: number) => rand(row.seed, 500 + k, n);
    const durations = {
      downloading: Math.round((3 + 5 * r(1)) * 1000 + (input.backup ? 2000 + 2000 * r(2) : 0)),
      updating: Math.round((4 + 6 * r(3)) * 1000),
      restarting: Math.round((5 + 10 * r(4)) * 1000),
      health_check: Math.round((2 + 2 * r(5)) * 1000),
    };
    const fails = r(6) < row.failure_rate;
    const failAt = fails ? pick(["downloading", "updating", "health_check"] as AgentState[], r(7)) : null;
    const plan: UpdatePlan = {
      from_version: row.config_version,
      target_version: input.targetVersion,
      config: input.config,
      durations,
      fail_at: failAt,
      error: failAt ? pick(STEP_ERRORS[failAt], r(8)) : null,
      backup: input.backup,
      started_ms: now,
      requested_by: input.requestedBy,
    };
    this.sql.exec(
      "UPDATE agents SET state = 'downloading', state_since_ms = ?, next_at_ms = ?, plan = ?, updates = ?, projected = 0 WHERE device_id = ?",
      now, now + durations.downloading, JSON.stringify(plan), n, row.device_id,
    );
    this.log(row.device_id, now, "update_started", "info", `Update ${row.config_version} → ${input.targetVersion} started${input.backup ? " (with data backup)" : ""}`, { target_version: input.targetVersion, backup: input.backup });
    return { device_id: row.device_id, previous: row.state, state: "downloading", at: now, config_version: row.config_version, target_version: input.targetVersion };
  }

  /** Abandons an in-flight update (superseded or interrupted); the agent keeps its current version. */
  abandon(row: AgentRow, reason: string, now: number) {
    if (!row.plan) return;
    const plan = JSON.parse(row.plan) as UpdatePlan;
    this.sql.exec("UPDATE agents SET next_at_ms = NULL, plan = NULL, projected = 0 WHERE device_id = ?", row.device_id);
    this.log(row.device_id, now, "update_abandoned", "warning", `Update to ${plan.target_version} abandoned: ${reason}`, { target_version: plan.target_version });
  }

  /** Runs the agent's due step (the one ending at next_at_ms). */
  step(row: AgentRow): StepEvent {
    const at = row.next_at_ms!;
    const plan = JSON.parse(row.plan!) as UpdatePlan;
    const previous = row.state;
    if (plan.fail_at === previous) {
      this.sql.exec(
        "UPDATE agents SET state = 'idle', state_since_ms = ?, next_at_ms = NULL, plan = NULL, fault = ?, fault_at_ms = ?, projected = 0 WHERE device_id = ?",
        at, plan.error, at, row.device_id,
      );
      this.log(row.device_id, at, "update_failed", "error", plan.error!, { target_version: plan.target_version, failed_in: previous, config_version: row.config_version });
      return { device_id: row.device_id, previous, state: "idle", at, config_version: row.config_version, target_version: plan.target_version, error: plan.error! };
    }
    const next = NEXT[previous]!;
    if (next === "ready") {
      const configuration = { ...JSON.parse(row.configuration), ...(plan.config ?? {}) };
      this.sql.exec(
        "UPDATE agents SET state = 'ready', state_since_ms = ?, next_at_ms = NULL, plan = NULL, config_version = ?, configuration = ?, fault = NULL, fault_at_ms = NULL, projected = 0 WHERE device_id = ?",
        at, plan.target_version, JSON.stringify(configuration), row.device_id,
      );
      this.log(row.device_id, at, "update_completed", "info", `Update to ${plan.target_version} completed in ${Math.round((at - plan.started_ms) / 1000)} s`, { from_version: plan.from_version, target_version: plan.target_version });
      return { device_id: row.device_id, previous, state: "ready", at, config_version: plan.target_version, target_version: plan.target_version, completed: true };
    }
    const nextAt = at + plan.durations[next as keyof UpdatePlan["durations"]];
    if (next === "health_check") {
      // Leaving `restarting`: the device has rebooted.
      this.sql.exec(
        "UPDATE agents SET state = ?, state_since_ms = ?, next_at_ms = ?, boot_ms = ?, boot_count = boot_count + 1, projected = 0 WHERE device_id = ?",
        next, at, nextAt, at, row.device_id,
      );
    } else {
      this.sql.exec("UPDATE agents SET state = ?, state_since_ms = ?, next_at_ms = ?, projected = 0 WHERE device_id = ?", next, at, nextAt, row.device_id);
    }
    return { device_id: row.device_id, previous, state: next, at, config_version: row.config_version, target_version: plan.target_version, rebooted: next === "health_check" };
  }

  /**
   * A reboot on request (POST restart, push action restart): completes at once in simulated time —
   * the response carries the reboot time — and clears any fault and incident in progress. An update in
   * flight is abandoned. Returns the states passed through.
   */
  restart(row: AgentRow, now: number, reason: string | null): { events: StepEvent[]; rebootSeconds: number } {
    if (row.plan) this.abandon(row, "interrupted by a restart", now);
    const rebootSeconds = Math.round((4 + 8 * rand(row.seed, 700, row.boot_count + 1)) * 10) / 10;
    this.sql.exec(
      "UPDATE agents SET state = 'ready', state_since_ms = ?, next_at_ms = NULL, plan = NULL, boot_ms = ?, boot_count = boot_count + 1, fault = NULL, fault_at_ms = NULL, projected = 0 WHERE device_id = ?",
      now, now, row.device_id,
    );
    this.log(row.device_id, now, "restart", "info", `Restarted in ${rebootSeconds} s${reason ? `: ${reason}` : ""}`, { reason, reboot_time_seconds: rebootSeconds, previous_fault: row.fault });
    const base = { device_id: row.device_id, at: now, config_version: row.config_version, target_version: null };
    return {
      rebootSeconds,
      events: [
        { ...base, previous: row.state, state: "restarting" },
        { ...base, previous: "restarting", state: "health_check", rebooted: true },
        { ...base, previous: "health_check", state: "ready" },
      ],
    };
  }

  /** Records an incident once (keyed by its start), so the agent's error log shows it. */
  logIncident(deviceId: string, incident: Incident) {
    const seen = this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM agent_events WHERE device_id = ? AND at_ms = ? AND kind = 'incident'", deviceId, incident.start_ms).one().n;
    if (seen) return;
    this.log(deviceId, incident.start_ms, "incident", "error", incident.error, { kind: incident.kind, until: new Date(incident.end_ms).toISOString() });
  }

  activeCount(): number {
    return this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM agents WHERE active = 1").one().n;
  }

  hasUnprojected(): boolean {
    return this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM agents WHERE projected = 0").one().n > 0;
  }

  log(deviceId: string, at: number, kind: string, level: "info" | "warning" | "error", message: string, data?: unknown) {
    this.sql.exec("INSERT INTO agent_events (device_id, at_ms, kind, level, message, data) VALUES (?, ?, ?, ?, ?, ?)",
      deviceId, at, kind, level, message, data === undefined ? null : JSON.stringify(data));
  }

  events(deviceId: string, sinceMs: number, opts: { levels?: string[]; limit?: number } = {}) {
    const levels = opts.levels ?? ["info", "warning", "error"];
    return this.sql.exec<{ at_ms: number; kind: string; level: string; message: string; data: string | null }>(
      `SELECT at_ms, kind, level, message, data FROM agent_events WHERE device_id = ? AND at_ms >= ?
       AND level IN (SELECT value FROM json_each(?)) ORDER BY at_ms DESC, id DESC LIMIT ?`,
      deviceId, sinceMs, JSON.stringify(levels), opts.limit ?? 100,
    ).toArray().map((e) => ({ timestamp: new Date(e.at_ms).toISOString(), kind: e.kind, level: e.level, message: e.message, data: e.data ? JSON.parse(e.data) : null }));
  }

  /** Error events bucketed by time (for the errors series). */
  errorBuckets(deviceId: string, sinceMs: number, bucketMs: number) {
    return this.sql.exec<{ bucket: number; n: number }>(
      "SELECT (at_ms / CAST(? AS INTEGER)) * CAST(? AS INTEGER) AS bucket, count(*) AS n FROM agent_events WHERE device_id = ? AND at_ms >= ? AND level = 'error' GROUP BY bucket ORDER BY bucket",
      bucketMs, bucketMs, deviceId, sinceMs,
    ).toArray();
  }

  prune(now: number) {
    this.sql.exec("DELETE FROM agent_events WHERE at_ms < ?", now - EVENT_RETENTION_MS);
  }
}


/** What one piece of agent work changed, for the hub to publish and write to D1 in one go. */
export interface AgentWork {
  steps: StepEvent[];
  transitions: Transition[];
  health: { deviceId: string; record: PartialHealth | HealthRecord; at: number; reason: string }[];
  audits: { eventType: string; category?: Category; severity?: Severity; deviceId: string; description: string; metadata: Record<string, unknown>; at: number }[];
  metrics: { deviceId: string; samples: Sample[]; reasons: StoreReason[] }[];
  pushes?: Record<string, unknown>[];
}
