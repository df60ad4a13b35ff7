/**
 * Simulated device agents (specification: What the service does 3; Agent; Agent lifecycle; Device
 * health record). Every device registered with `device_source: simulated` has a row here, in its site's
 * SiteHub SQLite, so it survives eviction.
 *
 * The health model is a pure function of the agent's seed (derived from its device_id, so the same
 * device always behaves the same), its boot time, any fault left by a failed update, and the clock:
 * a daily load curve (lunch and evening peaks, busier weekends), smooth noise, and occasional
 * incidents (about one every other day, 2–12 minutes, cleared by a reboot). Nothing ticks while nobody
 * watches: health is computed when read, and telemetry for the time nobody looked is generated on the
 * next read (at the snapshot cadence, at most the last 24 h) and fed through the same metrics path as
 * real devices' telemetry.
 *
 * An update moves idle|ready → downloading → updating → restarting → health_check → ready, each step a
 * few seconds (deterministic per device and update). With probability `failure_rate` (AGENT_FAILURE_RATE,
 * default 0.05) one step fails: the agent goes back to idle with a fault, and reports unhealthy with the
 * error until a restart or a successful update.
 */
import type { Sample, StoreReason } from "./metrics";
import type { Transition } from "./presence";
import type { Category, Severity } from "../src/services/audit";

export const AGENT_STATES = ["idle", "downloading", "updating", "restarting", "health_check", "ready"] as const;
export type AgentState = (typeof AGENT_STATES)[number];
export const TRANSITION_STATES: readonly AgentState[] = ["downloading", "updating", "restarting", "health_check"];
export const isTransitioning = (state: string) => (TRANSITION_STATES as readonly string[]).includes(state);

/** Specification (Limits): simulated agents are health-checked every 2 s — here only while watched or mid-transition. */
export const HEALTH_CHECK_PERIOD_MS = 2_000;
/** Emulator default telemetry period (specification: Limits). */
export const TELEMETRY_PERIOD_MS = 15_000;
/** Telemetry for unwatched time is generated at this cadence when the gap is long. */
export const BACKFILL_COARSE_STEP_MS = 5 * 60_000;
const BACKFILL_FINE_GAP_MS = 10 * 60_000;
export const BACKFILL_MAX_MS = 24 * 3_600_000;
export const DEFAULT_FAILURE_RATE = 0.05;
export const INITIAL_CONFIG_VERSION = "1.0.0";
const EVENT_RETENTION_MS = 90 * 86_400_000;

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

export type ServiceStatus = "running" | "connected" | "online" | "error" | "disconnected" | "offline";

/** The specification's Device health record (every field), plus when it was taken. */
export interface HealthRecord {
  status: "healthy" | "unhealthy";
  config_version: string;
  last_restart: string;
  response_time_ms: number;
  device_info: { model: string; firmware: string; os: string; memory_mb: number; storage_gb: number; uptime_hours: number };
  services: { pos_app: ServiceStatus; payment_gateway: ServiceStatus; database: ServiceStatus; network: ServiceStatus };
  metrics: {
    cpu_usage_percent: number;
    memory_usage_percent: number;
    disk_usage_percent: number;
    transactions_today: number;
    uptime_seconds: number;
    temperature_celsius: number;
    network_latency_ms: number;
    error_rate: number;
  };
  error?: string;
  checked_at: string;
}

// ---- deterministic randomness ----------------------------------------------------------------

const mix = (h: number, v: number) => {
  h = (h ^ (v | 0)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
};

/** A uniform number in [0, 1) determined by the seed and the values. */
export const rand = (seed: number, ...values: number[]) => values.reduce(mix, mix(seed, 0x9e3779b9)) / 4_294_967_296;

/** FNV-1a of a string: the per-device seed. */
export function seedOf(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h >>> 0;
}

/** Smooth value noise in [-1, 1]: random knots every `periodMs`, eased in between. */
function smoothNoise(seed: number, channel: number, t: number, periodMs: number): number {
  const x = t / periodMs;
  const k = Math.floor(x);
  const f = x - k;
  const s = f * f * (3 - 2 * f);
  const a = rand(seed, channel, k) * 2 - 1;
  const b = rand(seed, channel, k + 1) * 2 - 1;
  return a + (b - a) * s;
}

const noise = (seed: number, channel: number, t: number) =>
  0.75 * smoothNoise(seed, channel, t, 10 * 60_000) + 0.25 * smoothNoise(seed, channel + 1000, t, 60_000);

const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));
const round1 = (v: number) => Math.round(v * 10) / 10;
const gauss = (h: number, centre: number, width: number) => Math.exp(-(((h - centre) / width) ** 2));

// ---- the health model ------------------------------------------------------------------------

/** Store traffic over the day, 0–1: quiet nights, a lunch peak, an evening peak; weekends busier. */
export function loadAt(seed: number, t: number): number {
  const offsetH = (rand(seed, 7) - 0.5) * 2;
  const hour = (((t / 3_600_000 + offsetH) % 24) + 24) % 24;
  const weekday = (Math.floor(t / 86_400_000) + 4) % 7; // 0 = Sunday
  const weekend = weekday === 0 || weekday === 6 ? 1.15 : 1;
  const curve = 0.05 + 0.1 * gauss(hour, 9, 1.5) + 0.55 * gauss(hour, 12.5, 1.6) + 0.25 * gauss(hour, 15, 3.5) + 0.45 * gauss(hour, 18, 1.8);
  return clamp(curve * weekend, 0, 1);
}

const INCIDENT_KINDS = ["payment_gateway", "network", "database", "cpu", "pos_app"] as const;
export type IncidentKind = (typeof INCIDENT_KINDS)[number];
const INCIDENT_ERRORS: Record<IncidentKind, string> = {
  payment_gateway: "Payment gateway unreachable (TLS handshake timeout)",
  network: "Network connectivity lost: uplink packet loss above 40 %",
  database: "Local database error: disk I/O error on transactions journal",
  cpu: "CPU saturated: pos_app event loop blocked",
  pos_app: "POS application not responding (watchdog timeout)",
};
const INCIDENT_CHANCE_PER_HOUR = 0.02;

export interface Incident {
  kind: IncidentKind;
  start_ms: number;
  end_ms: number;
  error: string;
}

/** The incident in progress at `t`, if any. An incident that began before the last boot was cleared by it. */
export function incidentAt(seed: number, bootMs: number, t: number): Incident | undefined {
  const slot = Math.floor(t / 3_600_000);
  for (const s of [slot - 1, slot]) {
    if (rand(seed, 101, s) >= INCIDENT_CHANCE_PER_HOUR) continue;
    const start = s * 3_600_000 + Math.floor(rand(seed, 102, s) * 50 * 60_000);
    const end = start + Math.floor((2 + rand(seed, 103, s) * 10) * 60_000);
    if (t >= start && t < end && start >= bootMs) {
      const kind = INCIDENT_KINDS[Math.floor(rand(seed, 104, s) * INCIDENT_KINDS.length)];
      return { kind, start_ms: start, end_ms: end, error: INCIDENT_ERRORS[kind] };
    }
  }
  return undefined;
}

/** Incidents that begin in (from, to], for the agent's error log. */
export function incidentsBetween(seed: number, from: number, to: number): Incident[] {
  const found: Incident[] = [];
  for (let s = Math.floor(from / 3_600_000); s <= Math.floor(to / 3_600_000); s++) {
    if (rand(seed, 101, s) >= INCIDENT_CHANCE_PER_HOUR) continue;
    const start = s * 3_600_000 + Math.floor(rand(seed, 102, s) * 50 * 60_000);
    if (start <= from || start > to) continue;
    const end = start + Math.floor((2 + rand(seed, 103, s) * 10) * 60_000);
    const kind = INCIDENT_KINDS[Math.floor(rand(seed, 104, s) * INCIDENT_KINDS.length)];
    found.push({ kind, start_ms: start, end_ms: end, error: INCIDENT_ERRORS[kind] });
  }
  return found;
}

const MODELS: Record<string, string[]> = {
  pos_terminal: ["FE-POS 400", "FE-POS 600", "FE-POS 800 Pro"],
  pos: ["FE-POS 400", "FE-POS 600", "FE-POS 800 Pro"],
  tablet: ["FE-Tab 10", "FE-Tab 12 Rugged"],
  virtual_terminal: ["FE-VT x86 Virtual Appliance"],
  mobile_scanner: ["FE-Scan M3", "FE-Scan M5"],
};
const OSES: Record<string, string[]> = {
  pos_terminal: ["Android 11 (POS build)", "Android 12 (POS build)"],
  pos: ["Android 11 (POS build)", "Windows 10 IoT Enterprise"],
  tablet: ["Android 13", "iPadOS 17"],
  virtual_terminal: ["Ubuntu 22.04 LTS"],
  mobile_scanner: ["Android 12 (enterprise)"],
};

const pick = <T>(list: T[], r: number) => list[Math.floor(r * list.length) % list.length];

export function deviceProfile(seed: number, deviceType: string) {
  const type = deviceType.toLowerCase();
  return {
    model: pick(MODELS[type] ?? MODELS.pos_terminal, rand(seed, 1)),
    os: pick(OSES[type] ?? OSES.pos_terminal, rand(seed, 2)),
    firmware: `4.${2 + Math.floor(rand(seed, 3) * 3)}.${Math.floor(rand(seed, 4) * 20)}`,
    memory_mb: pick([2048, 3072, 4096, 8192], rand(seed, 5)),
    storage_gb: pick([16, 32, 64, 128], rand(seed, 6)),
    cpuBase: 6 + 8 * rand(seed, 11),
    cpuScale: 40 + 25 * rand(seed, 12),
    memBase: 30 + 15 * rand(seed, 13),
    diskBase: 28 + 35 * rand(seed, 14),
    txPerHourAtPeak: 30 + 90 * rand(seed, 15),
    latencyBase: 12 + 20 * rand(seed, 16),
    tempBase: 33 + 6 * rand(seed, 17),
  };
}

/** Transactions since UTC midnight: the load curve integrated in 15-minute steps. */
function transactionsToday(seed: number, peakPerHour: number, t: number): number {
  const midnight = Math.floor(t / 86_400_000) * 86_400_000;
  const step = 15 * 60_000;
  let total = 0;
  for (let at = midnight; at < t; at += step) {
    const span = Math.min(step, t - at);
    total += peakPerHour * loadAt(seed, at + span / 2) * (span / 3_600_000);
  }
  return Math.floor(total);
}

export interface ModelInput {
  device_id: string;
  device_type: string;
  seed: number;
  boot_ms: number;
  created_ms: number;
  config_version: string;
  state: AgentState;
  fault: string | null;
}

/** The agent's health at `t`: a pure function of the inputs. */
export function healthAt(agent: ModelInput, t: number): HealthRecord {
  const seed = agent.seed;
  const p = deviceProfile(seed, agent.device_type);
  const load = loadAt(seed, t);
  const uptimeS = Math.max(0, Math.floor((t - agent.boot_ms) / 1000));
  const incident = incidentAt(seed, agent.boot_ms, t);
  const restarting = agent.state === "restarting";

  let cpu = clamp(p.cpuBase + p.cpuScale * load + 4 * noise(seed, 21, t), 1, 99.5);
  if (incident?.kind === "cpu") cpu = 92 + 7 * rand(seed, 22, Math.floor(t / 60_000));
  const leak = Math.min(15, (uptimeS / 86_400) * 0.8);
  const memory = clamp(p.memBase + 20 * load + leak + 2 * noise(seed, 23, t), 5, 99);
  const ageDays = Math.max(0, (t - agent.created_ms) / 86_400_000);
  const disk = clamp(p.diskBase + Math.min(20, ageDays * 0.15) + 0.3 * noise(seed, 25, t), 1, 99.9);
  const temperature = p.tempBase + 14 * load + 1.5 * noise(seed, 27, t) + (cpu > 90 ? 9 : 0);
  let latency = p.latencyBase * (1 + 0.5 * load) + 4 * Math.abs(noise(seed, 29, t));
  if (incident?.kind === "network") latency = 600 + 900 * rand(seed, 30, Math.floor(t / 60_000));
  const errorRate = incident ? 0.08 + 0.17 * rand(seed, 31, Math.floor(t / 60_000)) : 0.001 + 0.004 * load * (1 + noise(seed, 33, t)) / 2;
  let responseTime = 20 + 90 * load + 8 * Math.abs(noise(seed, 35, t)) + (cpu > 90 ? 400 : 0) + (incident?.kind === "network" ? latency : 0);

  const services: HealthRecord["services"] = { pos_app: "running", payment_gateway: "connected", database: "online", network: "connected" };
  if (incident?.kind === "payment_gateway") services.payment_gateway = "disconnected";
  if (incident?.kind === "network") services.network = "disconnected";
  if (incident?.kind === "database") services.database = "error";
  if (incident?.kind === "pos_app") services.pos_app = "error";

  let error: string | undefined = incident?.error;
  if (agent.fault) {
    services.pos_app = "error";
    error = agent.fault;
  }
  if (restarting) {
    services.pos_app = "offline";
    services.payment_gateway = "offline";
    services.database = "offline";
    services.network = "offline";
    responseTime = 5000;
    error = "Device is restarting";
  }
  if (!error && disk > 97) error = `Disk almost full (${round1(disk)} %)`;

  return {
    status: error ? "unhealthy" : "healthy",
    config_version: agent.config_version,
    last_restart: new Date(agent.boot_ms).toISOString(),
    response_time_ms: Math.round(responseTime),
    device_info: {
      model: p.model,
      firmware: p.firmware,
      os: p.os,
      memory_mb: p.memory_mb,
      storage_gb: p.storage_gb,
      uptime_hours: round1(uptimeS / 3600),
    },
    services,
    metrics: {
      cpu_usage_percent: round1(restarting ? 0 : cpu),
      memory_usage_percent: round1(restarting ? 0 : memory),
      disk_usage_percent: round1(disk),
      transactions_today: transactionsToday(seed, p.txPerHourAtPeak, t),
      uptime_seconds: restarting ? 0 : uptimeS,
      temperature_celsius: round1(temperature),
      network_latency_ms: round1(latency),
      error_rate: Math.round(errorRate * 10_000) / 10_000,
    },
    ...(error ? { error } : {}),
    checked_at: new Date(t).toISOString(),
  };
}

export const bootIdOf = (row: Pick<AgentRow, "device_id" | "boot_count">) => `${row.device_id}#boot-${row.boot_count}`;

/** The telemetry sample a simulated agent reports at `t` (the same shape real devices send). */
export function sampleAt(row: AgentRow, t: number): Sample {
  const h = healthAt(row, t);
  return {
    cpu_usage: h.metrics.cpu_usage_percent,
    memory_usage: h.metrics.memory_usage_percent,
    disk_usage: h.metrics.disk_usage_percent,
    temperature: h.metrics.temperature_celsius,
    network_latency_ms: h.metrics.network_latency_ms,
    transaction_count: h.metrics.transactions_today,
    uptime_seconds: h.metrics.uptime_seconds,
    error_rate: h.metrics.error_rate,
    boot_id: bootIdOf(row),
    timestamp: new Date(t).toISOString(),
  };
}

/** "3d 4h 12m" */
export function formatUptime(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s % 60}s`;
}

/** A content-derived version for a config pushed without one: the same settings give the same version. */
export function configVersionOf(config: Record<string, unknown>): string {
  const canonical = (v: unknown): unknown =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v as object).sort().map((k) => [k, canonical((v as Record<string, unknown>)[k])]))
      : Array.isArray(v) ? v.map(canonical) : v;
  const text = JSON.stringify(canonical(config));
  return `cfg-${seedOf(text).toString(16).padStart(8, "0")}${(seedOf(`${text}#2`) & 0xffff).toString(16).padStart(4, "0")}`;
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

  transitioning(): boolean {
    return this.nextStepAt() !== undefined;
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

/** Sample times for telemetry not yet generated between `from` (exclusive) and `to`. */
export function telemetryTimes(from: number, to: number): number[] {
  const start = Math.max(from, to - BACKFILL_MAX_MS);
  const step = to - start > BACKFILL_FINE_GAP_MS ? BACKFILL_COARSE_STEP_MS : TELEMETRY_PERIOD_MS;
  const times: number[] = [];
  for (let t = start + step; t <= to; t += step) times.push(t);
  return times;
}

// ---- what the Worker and the hub exchange --------------------------------------------------

/** Device facts the Worker already holds (it has authorised the caller on the device). */
export interface AgentDevice {
  deviceId: string;
  name: string;
  deviceType: string;
  source: "real" | "simulated";
  lifecycleState: string;
  createdAt: string;
  firmware: string | null;
  osType: string | null;
  osVersion: string | null;
  osDetails: string | null;
  hostname: string | null;
  dna: Record<string, unknown> | null;
}

/** Every body form of `POST /agents/{device_id}/push` (already validated). */
export interface PushInput {
  title?: string;
  body?: string;
  data?: Record<string, unknown>;
  message?: string;
  priority?: string;
  action?: string;
  config_version?: string;
  config?: Record<string, unknown>;
  force?: boolean;
  backup_data?: boolean;
}

export const PUSH_ACTIONS = ["update", "update_config", "restart", "reboot", "health_check", "diagnostics", "backup", "ping", "clear_cache", "notify"] as const;
export type PushAction = (typeof PUSH_ACTIONS)[number];

export interface PushResult {
  status: "delivered" | "accepted" | "in_progress" | "up_to_date" | "completed";
  message: string;
  timestamp: string;
  state: AgentState;
  config_version: string;
  target_version?: string;
  health_check?: HealthRecord;
  result?: Record<string, unknown>;
}

export type HubOutcome<T> = { ok: true; value: T } | { ok: false; error: { status: 404 | 409 | 422; detail: string } };

/** A health record that may be partial (real devices report only what they report). */
export type PartialHealth = Partial<Omit<HealthRecord, "device_info" | "services" | "metrics">> & {
  status: "healthy" | "unhealthy";
  device_info?: Partial<HealthRecord["device_info"]>;
  services?: Partial<HealthRecord["services"]>;
  metrics?: Partial<HealthRecord["metrics"]>;
  checked_at: string;
};

export interface AgentSnapshot {
  device_id: string;
  source: "real" | "simulated";
  state: AgentState;
  state_since: string | null;
  config_version: string | null;
  target_version: string | null;
  next_transition_at: string | null;
  status: string;
  last_heartbeat: string | null;
  health: PartialHealth;
  uptime_seconds: number | null;
  configuration: Record<string, unknown> | null;
  simulation: { seed: number; failure_rate: number; updates: number; boot_count: number } | null;
  live_metrics: Record<string, number | null> | null;
}

export type DiagnosticComponent = "payment" | "printer" | "display" | "network";
export const DIAGNOSTIC_COMPONENTS: DiagnosticComponent[] = ["payment", "printer", "display", "network"];

export interface DiagnosticResult {
  status: "pass" | "warn" | "fail" | "unknown";
  detail: string;
  duration_ms?: number;
}

/** What a simulated device's component self-tests find, from the same model as its health. */
export function simulatedDiagnostics(row: AgentRow, health: HealthRecord, components: DiagnosticComponent[], t: number): Record<string, DiagnosticResult> {
  const out: Record<string, DiagnosticResult> = {};
  const r = (k: number) => rand(row.seed, 800 + k, Math.floor(t / 60_000));
  for (const c of components) {
    const duration_ms = Math.round(120 + 900 * r(c.length));
    if (row.state === "restarting") {
      out[c] = { status: "fail", detail: "Device is restarting", duration_ms };
      continue;
    }
    switch (c) {
      case "payment": {
        const s = health.services.payment_gateway;
        out[c] = s === "connected"
          ? { status: "pass", detail: `Payment gateway connected; test authorisation approved in ${Math.round(80 + 200 * r(1))} ms`, duration_ms }
          : { status: "fail", detail: `Payment gateway ${s}`, duration_ms };
        break;
      }
      case "printer": {
        const paper = Math.round(100 * rand(row.seed, 810, Math.floor(t / 3_600_000)));
        out[c] = paper < 10
          ? { status: "warn", detail: `Receipt printer online; paper low (${paper} %)`, duration_ms }
          : { status: "pass", detail: `Receipt printer online; test page printed; paper ${paper} %`, duration_ms };
        break;
      }
      case "display": {
        out[c] = health.services.pos_app === "running"
          ? { status: "pass", detail: "Display and touch panel respond; no dead zones", duration_ms }
          : { status: "fail", detail: "Display shows the POS application frozen", duration_ms };
        break;
      }
      case "network": {
        const latency = health.metrics.network_latency_ms;
        out[c] = health.services.network !== "connected"
          ? { status: "fail", detail: `Network ${health.services.network}; latency ${latency} ms`, duration_ms }
          : latency > 250
            ? { status: "warn", detail: `Network connected; latency high (${latency} ms)`, duration_ms }
            : { status: "pass", detail: `Network connected; latency ${latency} ms`, duration_ms };
        break;
      }
    }
  }
  return out;
}

export interface SeriesRequest {
  kind: "metrics" | "transactions" | "errors";
  fromMs: number;
  bucketMs: number;
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
