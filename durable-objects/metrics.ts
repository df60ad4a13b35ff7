import type { MetricsPolicy } from "../src/shared/config";
import type { Sample, StoreDecision, StoreReason } from "../src/shared/hub-contract";
import { iso } from "../src/shared/time";
/**
 * Metrics delta storage: per device, a sample is kept only when it says something new —
 * the first after a device restart, a keyframe every few minutes (`snapshotIntervalMs`), or a real
 * change: some metric moved by more than its absolute deadband AND by more than the relative
 * threshold since the last kept sample (docs/device-channel.md, "What a sample costs"). The kept
 * rows are the device's history, in this Durable Object's SQLite; D1 gets the latest sample in the
 * site flush.
 *
 * The per-device decision state and latest sample live in memory and reach SQLite in one statement
 * on the hub's once-a-minute flush (`persistPending`), so a sample that is not kept writes no row.
 * After an eviction the stored state may be a minute old; the worst that does is keep one extra
 * sample. A restart seen by a heartbeat is written at once.
 */
export const METRICS_SCHEMA = `
  CREATE TABLE IF NOT EXISTS metrics_state (
    device_id TEXT PRIMARY KEY,
    stored_at_ms INTEGER NOT NULL,
    cpu REAL, memory REAL, disk REAL, latency REAL, error_rate REAL,
    boot_id TEXT,
    uptime_s INTEGER,
    restart_seen INTEGER NOT NULL DEFAULT 0,
    latest TEXT,
    latest_dirty INTEGER NOT NULL DEFAULT 0
  );
  CREATE TABLE IF NOT EXISTS metrics_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    device_id TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    cpu REAL NOT NULL, memory REAL NOT NULL, disk REAL NOT NULL,
    temperature REAL, latency REAL, transaction_count INTEGER, uptime_s INTEGER, error_rate REAL,
    reason TEXT NOT NULL
  );
  CREATE INDEX IF NOT EXISTS metrics_history_device_time ON metrics_history (device_id, recorded_at);
`;


export type StoredState = {
  stored_at_ms: number;
  cpu: number | null;
  memory: number | null;
  disk: number | null;
  latency: number | null;
  error_rate: number | null;
  boot_id: string | null;
  uptime_s: number | null;
  restart_seen: number;
};

function deviates(previous: number | null, next: number | undefined, deadband: number, policy: MetricsPolicy): boolean {
  if (next === undefined || previous === null) return next !== undefined && previous === null;
  const delta = Math.abs(next - previous);
  if (delta <= deadband) return false;
  if (previous === 0) return delta > policy.zeroBaselineDelta;
  return delta / Math.abs(previous) > policy.changeThreshold;
}

/** The storage decision, as a pure function of the stored state and the new sample. */
export function decide(state: StoredState | undefined, sample: Sample, now: number, policy: MetricsPolicy): StoreReason {
  if (!state) return "first_sample";
  const restarted =
    state.restart_seen === 1 ||
    (sample.boot_id !== undefined && state.boot_id !== null && sample.boot_id !== state.boot_id) ||
    (sample.uptime_seconds !== undefined && state.uptime_s !== null && sample.uptime_seconds < state.uptime_s);
  if (restarted) return "first_sample";
  if (now - state.stored_at_ms >= policy.snapshotIntervalMs) return "snapshot_interval";
  const changed =
    deviates(state.cpu, sample.cpu_usage, policy.deadband.cpu, policy) ||
    deviates(state.memory, sample.memory_usage, policy.deadband.memory, policy) ||
    deviates(state.disk, sample.disk_usage, policy.deadband.disk, policy) ||
    deviates(state.latency, sample.network_latency_ms, policy.deadband.latencyMs, policy) ||
    (sample.error_rate !== undefined &&
      (state.error_rate === null || Math.abs(sample.error_rate - state.error_rate) > policy.errorRateDelta));
  return changed ? "changed" : "unchanged";
}

/** The decision state and latest sample of one device, as held in memory and stored in metrics_state. */
type DeviceState = StoredState & { device_id: string; latest: string | null; latest_dirty: number };

const STATE_COLUMNS = [
  "device_id", "stored_at_ms", "cpu", "memory", "disk", "latency", "error_rate", "boot_id", "uptime_s", "restart_seen", "latest", "latest_dirty",
] as const;

/** One statement for any number of devices: the rows travel as one JSON parameter. */
const UPSERT_STATES = `
  INSERT INTO metrics_state (${STATE_COLUMNS.join(", ")})
  SELECT ${STATE_COLUMNS.map((c) => `json_extract(value, '$.${c}')`).join(", ")} FROM json_each(?) WHERE true
  ON CONFLICT(device_id) DO UPDATE SET ${STATE_COLUMNS.filter((c) => c !== "device_id").map((c) => `${c} = excluded.${c}`).join(", ")}`;

export class MetricsStore {
  private cached: Map<string, DeviceState> | undefined;
  /** Devices whose state in memory is newer than the stored one. */
  private readonly pending = new Set<string>();

  constructor(private readonly sql: SqlStorage, private readonly policy: MetricsPolicy) {}

  private states(): Map<string, DeviceState> {
    this.cached ??= new Map(this.sql.exec<DeviceState>(`SELECT ${STATE_COLUMNS.join(", ")} FROM metrics_state`).toArray().map((r) => [r.device_id, r]));
    return this.cached;
  }

  /** A device restart seen by a heartbeat makes the next sample a first sample. */
  noteRestart(deviceId: string) {
    const state = this.states().get(deviceId);
    if (!state) return;
    state.restart_seen = 1;
    this.sql.exec("UPDATE metrics_state SET restart_seen = 1 WHERE device_id = ?", deviceId);
  }

  ingest(deviceId: string, sample: Sample, now: number): StoreDecision {
    const state = this.states().get(deviceId);
    const reason = decide(state, sample, now, this.policy);
    const recordedAt = iso(now);
    const latest = JSON.stringify({ ...sample, recorded_at: recordedAt, device_timestamp: sample.timestamp ?? null });
    this.pending.add(deviceId);
    if (state && reason === "unchanged") {
      state.uptime_s = sample.uptime_seconds ?? state.uptime_s;
      state.boot_id = sample.boot_id ?? state.boot_id;
      state.latest = latest;
      state.latest_dirty = 1;
      return { stored: false, reason };
    }
    this.sql.exec(
      `INSERT INTO metrics_history (device_id, recorded_at, cpu, memory, disk, temperature, latency, transaction_count, uptime_s, error_rate, reason)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      deviceId, recordedAt, sample.cpu_usage, sample.memory_usage, sample.disk_usage, sample.temperature ?? null,
      sample.network_latency_ms ?? null, sample.transaction_count ?? null, sample.uptime_seconds ?? null, sample.error_rate ?? null, reason,
    );
    this.states().set(deviceId, {
      device_id: deviceId, stored_at_ms: now, cpu: sample.cpu_usage, memory: sample.memory_usage, disk: sample.disk_usage,
      latency: sample.network_latency_ms ?? null, error_rate: sample.error_rate ?? null,
      boot_id: sample.boot_id ?? state?.boot_id ?? null, uptime_s: sample.uptime_seconds ?? state?.uptime_s ?? null,
      restart_seen: 0, latest, latest_dirty: 1,
    });
    return { stored: true, reason };
  }

  /** Whether some device's state in memory is newer than the stored one. */
  hasPending(): boolean {
    return this.pending.size > 0;
  }

  /** Writes every device state newer in memory than in storage, in one statement; answers how many. */
  persistPending(): number {
    const rows = [...this.pending].flatMap((id) => this.states().get(id) ?? []);
    this.pending.clear();
    if (rows.length) this.sql.exec(UPSERT_STATES, JSON.stringify(rows));
    return rows.length;
  }

  /** Devices that have sent telemetry here, in id order. */
  deviceIds(): string[] {
    return [...this.states().keys()].sort();
  }

  history(deviceId: string, sinceIso: string, limit = 5000) {
    return this.sql.exec<{
      recorded_at: string; cpu: number; memory: number; disk: number; temperature: number | null; latency: number | null;
      transaction_count: number | null; uptime_s: number | null; error_rate: number | null; reason: string;
    }>("SELECT recorded_at, cpu, memory, disk, temperature, latency, transaction_count, uptime_s, error_rate, reason FROM metrics_history WHERE device_id = ? AND recorded_at >= ? ORDER BY recorded_at LIMIT ?",
      deviceId, sinceIso, limit).toArray();
  }

  storedCount(deviceId: string): number {
    return this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM metrics_history WHERE device_id = ?", deviceId).one().n;
  }

  /** The device's most recent sample, stored or not (with when it arrived). */
  latest(deviceId: string): (Sample & { recorded_at: string }) | null {
    const text = this.states().get(deviceId)?.latest;
    return text ? JSON.parse(text) : null;
  }

  dirtyLatest(): { device_id: string; latest: string }[] {
    return [...this.states().values()].flatMap((s) => (s.latest_dirty === 1 && s.latest !== null ? [{ device_id: s.device_id, latest: s.latest }] : []));
  }

  /**
   * D1 now has these latest samples; stored with the next `persistPending`. A device whose sample
   * changed again while they were on their way stays dirty.
   */
  markLatestClean(sent: { device_id: string; latest: string }[]) {
    for (const { device_id, latest } of sent) {
      const state = this.states().get(device_id);
      if (!state || state.latest !== latest) continue;
      state.latest_dirty = 0;
      this.pending.add(device_id);
    }
  }

  prune(now: number) {
    const cutoff = new Date(now - this.policy.retentionDays * 86_400_000).toISOString();
    this.sql.exec("DELETE FROM metrics_history WHERE recorded_at < ?", cutoff);
  }
}
