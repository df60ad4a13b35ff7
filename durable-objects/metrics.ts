import type { MetricsPolicy } from "../src/shared/config";
import type { Sample, StoreDecision, StoreReason } from "../src/shared/hub-contract";
import { iso } from "../src/shared/time";
/**
 * Metrics delta storage: per device, a sample is kept only when it says something new —
 * the first after a device restart, a snapshot every few minutes, or a real change. The kept rows are
 * the device's history, in this Durable Object's SQLite; D1 gets the latest sample in the site flush.
 */
const METRICS_HISTORY_TABLE = `
  CREATE TABLE IF NOT EXISTS metrics_history (
    device_id TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    cpu REAL NOT NULL, memory REAL NOT NULL, disk REAL NOT NULL,
    temperature REAL, latency REAL, transaction_count INTEGER, uptime_s INTEGER, error_rate REAL,
    reason TEXT NOT NULL,
    PRIMARY KEY (device_id, recorded_at, seq)
  ) WITHOUT ROWID;
`;

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
${METRICS_HISTORY_TABLE}`;

/**
 * The history is keyed by (device, time) itself rather than by a row id with an index beside it:
 * a stored sample is then one row written instead of three (row, index entry, AUTOINCREMENT
 * counter), and rows written are what storage is billed by. `seq` tells apart samples of one device
 * recorded in the same millisecond (a batch). Hubs made before this keep their rows: they are copied
 * once into the new table, each keeping its old id as its `seq`.
 */
export function migrateMetricsHistory(sql: SqlStorage) {
  const columns = sql.exec<{ name: string }>("PRAGMA table_info(metrics_history)").toArray().map((c) => c.name);
  if (!columns.includes("id")) return;
  const copied = "device_id, recorded_at, cpu, memory, disk, temperature, latency, transaction_count, uptime_s, error_rate, reason";
  sql.exec("ALTER TABLE metrics_history RENAME TO metrics_history_with_ids");
  sql.exec("DROP INDEX IF EXISTS metrics_history_device_time");
  sql.exec(METRICS_HISTORY_TABLE);
  sql.exec(`INSERT INTO metrics_history (seq, ${copied}) SELECT id, ${copied} FROM metrics_history_with_ids`);
  sql.exec("DROP TABLE metrics_history_with_ids");
}


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

function deviates(previous: number | null, next: number | undefined, policy: MetricsPolicy): boolean {
  if (next === undefined || previous === null) return next !== undefined && previous === null;
  if (previous === 0) return Math.abs(next) > policy.zeroBaselineDelta;
  return Math.abs(next - previous) / Math.abs(previous) > policy.changeThreshold;
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
    deviates(state.cpu, sample.cpu_usage, policy) ||
    deviates(state.memory, sample.memory_usage, policy) ||
    deviates(state.disk, sample.disk_usage, policy) ||
    deviates(state.latency, sample.network_latency_ms, policy) ||
    (sample.error_rate !== undefined &&
      (state.error_rate === null || Math.abs(sample.error_rate - state.error_rate) > policy.errorRateDelta));
  return changed ? "changed" : "unchanged";
}

export class MetricsStore {
  constructor(private readonly sql: SqlStorage, private readonly policy: MetricsPolicy) {}

  /** A device restart seen by a heartbeat makes the next sample a first sample. */
  noteRestart(deviceId: string) {
    this.sql.exec("UPDATE metrics_state SET restart_seen = 1 WHERE device_id = ?", deviceId);
  }

  ingest(deviceId: string, sample: Sample, now: number): StoreDecision {
    const state = this.sql.exec<StoredState>("SELECT * FROM metrics_state WHERE device_id = ?", deviceId).toArray()[0];
    const reason = decide(state, sample, now, this.policy);
    const recordedAt = iso(now);
    const latest = JSON.stringify({ ...sample, recorded_at: recordedAt, device_timestamp: sample.timestamp ?? null });
    if (reason === "unchanged") {
      this.sql.exec(
        "UPDATE metrics_state SET uptime_s = coalesce(?, uptime_s), boot_id = coalesce(?, boot_id), latest = ?, latest_dirty = 1 WHERE device_id = ?",
        sample.uptime_seconds ?? null, sample.boot_id ?? null, latest, deviceId,
      );
      return { stored: false, reason };
    }
    this.sql.exec(
      `INSERT INTO metrics_history (device_id, recorded_at, seq, cpu, memory, disk, temperature, latency, transaction_count, uptime_s, error_rate, reason)
       VALUES (?1, ?2, (SELECT count(*) FROM metrics_history WHERE device_id = ?1 AND recorded_at = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)`,
      deviceId, recordedAt, sample.cpu_usage, sample.memory_usage, sample.disk_usage, sample.temperature ?? null,
      sample.network_latency_ms ?? null, sample.transaction_count ?? null, sample.uptime_seconds ?? null, sample.error_rate ?? null, reason,
    );
    this.sql.exec(
      `INSERT INTO metrics_state (device_id, stored_at_ms, cpu, memory, disk, latency, error_rate, boot_id, uptime_s, restart_seen, latest, latest_dirty)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 1)
       ON CONFLICT(device_id) DO UPDATE SET stored_at_ms = excluded.stored_at_ms, cpu = excluded.cpu, memory = excluded.memory,
         disk = excluded.disk, latency = excluded.latency, error_rate = excluded.error_rate,
         boot_id = coalesce(excluded.boot_id, boot_id), uptime_s = coalesce(excluded.uptime_s, uptime_s),
         restart_seen = 0, latest = excluded.latest, latest_dirty = 1`,
      deviceId, now, sample.cpu_usage, sample.memory_usage, sample.disk_usage, sample.network_latency_ms ?? null,
      sample.error_rate ?? null, sample.boot_id ?? null, sample.uptime_seconds ?? null, latest,
    );
    return { stored: true, reason };
  }

  history(deviceId: string, sinceIso: string, limit = 5000) {
    return this.sql.exec<{
      recorded_at: string; cpu: number; memory: number; disk: number; temperature: number | null; latency: number | null;
      transaction_count: number | null; uptime_s: number | null; error_rate: number | null; reason: string;
    }>("SELECT recorded_at, cpu, memory, disk, temperature, latency, transaction_count, uptime_s, error_rate, reason FROM metrics_history WHERE device_id = ? AND recorded_at >= ? ORDER BY recorded_at, seq LIMIT ?",
      deviceId, sinceIso, limit).toArray();
  }

  storedCount(deviceId: string): number {
    return this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM metrics_history WHERE device_id = ?", deviceId).one().n;
  }

  /** The device's most recent sample, stored or not (with when it arrived). */
  latest(deviceId: string): (Sample & { recorded_at: string }) | null {
    const text = this.sql.exec<{ latest: string | null }>("SELECT latest FROM metrics_state WHERE device_id = ?", deviceId).toArray()[0]?.latest;
    return text ? JSON.parse(text) : null;
  }

  dirtyLatest(): { device_id: string; latest: string }[] {
    return this.sql.exec<{ device_id: string; latest: string }>("SELECT device_id, latest FROM metrics_state WHERE latest_dirty = 1 AND latest IS NOT NULL").toArray();
  }

  markLatestClean(deviceIds: string[]) {
    for (const id of deviceIds) this.sql.exec("UPDATE metrics_state SET latest_dirty = 0 WHERE device_id = ?", id);
  }

  prune(now: number) {
    const cutoff = new Date(now - this.policy.retentionDays * 86_400_000).toISOString();
    this.sql.exec("DELETE FROM metrics_history WHERE recorded_at < ?", cutoff);
  }
}
