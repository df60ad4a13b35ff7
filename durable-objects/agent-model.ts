/**
 * The health model of simulated agents: a pure function of the agent's seed (derived from its
 * device_id, so the same device always behaves the same), its boot time, any fault left by a failed
 * update, and the clock. A daily load curve (lunch and evening peaks, busier weekends), smooth noise,
 * and occasional incidents (about one every other day, 2–12 minutes, cleared by a reboot). Nothing
 * ticks while nobody watches: health is computed when read, and telemetry for the time nobody looked
 * is generated on the next read (at the snapshot cadence, at most the last 24 h) and fed through the
 * same metrics path as real devices' telemetry.
 */
import { fnv1a, canonicalJson } from "../src/shared/ids";
import type { DiagnosticResult, Sample } from "../src/shared/hub-contract";
import type { AgentState, DiagnosticComponent } from "../src/shared/vocabulary";
import { iso } from "../src/shared/time";

/** Simulated agents are health-checked every 2 s — only while someone watches the site or an update runs. */
export const HEALTH_CHECK_PERIOD_MS = 2_000;
/** How often a simulated agent sends telemetry. */
export const TELEMETRY_PERIOD_MS = 15_000;
/** Telemetry for unwatched time is generated at this cadence when the gap is long. */
export const BACKFILL_COARSE_STEP_MS = 5 * 60_000;
const BACKFILL_FINE_GAP_MS = 10 * 60_000;
export const BACKFILL_MAX_MS = 24 * 3_600_000;

export type ServiceStatus = "running" | "connected" | "online" | "error" | "disconnected" | "offline";

/** A full device health record (every field of the API's DeviceHealthRecord), plus when it was taken. */
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
export const seedOf = fnv1a;

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
    checked_at: iso(t),
  };
}


export const bootIdOf = (row: { device_id: string; boot_count: number }) => `${row.device_id}#boot-${row.boot_count}`;

/** The telemetry sample a simulated agent reports at `t` (the same shape real devices send). */
export function sampleAt(row: ModelInput & { boot_count: number }, t: number): Sample {
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
    timestamp: iso(t),
  };
}


/** A content-derived version for a config pushed without one: the same settings give the same version. */
export function configVersionOf(config: Record<string, unknown>): string {
  const text = canonicalJson(config);
  return `cfg-${fnv1a(text).toString(16).padStart(8, "0")}${(fnv1a(`${text}#2`) & 0xffff).toString(16).padStart(4, "0")}`;
}

/** Sample times for telemetry not yet generated between `from` (exclusive) and `to`. */
export function telemetryTimes(from: number, to: number): number[] {
  const start = Math.max(from, to - BACKFILL_MAX_MS);
  const step = to - start > BACKFILL_FINE_GAP_MS ? BACKFILL_COARSE_STEP_MS : TELEMETRY_PERIOD_MS;
  const times: number[] = [];
  for (let t = start + step; t <= to; t += step) times.push(t);
  return times;
}

/** What a simulated device's component self-tests find, from the same model as its health. */
export function simulatedDiagnostics(row: Pick<ModelInput, "seed" | "state">, health: HealthRecord, components: DiagnosticComponent[], t: number): Record<string, DiagnosticResult> {
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
