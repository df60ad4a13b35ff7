import type { Sighting } from "../src/shared/hub-contract";
import type { LiveStatus } from "../src/shared/vocabulary";
import type { TransitionRow } from "./outbox";

/**
 * Live presence of a site's devices. Heartbeats land here (never in D1); D1 hears, through the
 * hub's outbox, about transitions at once and about last_seen in coalesced batches.
 *
 * A device is offline after 3 missed heartbeat intervals. The interval is the one the device reports
 * in its heartbeats when it reports one (it knows when it will next call), else the one an operator
 * configured on the device (`heartbeat_interval_s`, changed with PATCH), else 10 s.
 */
export const PRESENCE_SCHEMA = `
  CREATE TABLE IF NOT EXISTS presence (
    device_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    interval_s INTEGER NOT NULL,
    boot_id TEXT,
    uptime_s INTEGER,
    reported_at TEXT,
    flushed_ms INTEGER NOT NULL DEFAULT 0,
    reported_interval_s INTEGER
  );
  CREATE INDEX IF NOT EXISTS presence_status ON presence (status);
`;

export const DEFAULT_INTERVAL_S = 10;
export const MISSED_HEARTBEATS = 3;
const MIN_OFFLINE_AFTER_MS = 30_000;
const MAX_OFFLINE_AFTER_MS = 600_000;
export const LAST_SEEN_FLUSH_MS = 60_000;

export const offlineAfterMs = (intervalS: number) =>
  Math.min(MAX_OFFLINE_AFTER_MS, Math.max(MIN_OFFLINE_AFTER_MS, intervalS * 1000 * MISSED_HEARTBEATS));


export type PresenceRow = {
  device_id: string;
  status: LiveStatus;
  last_seen_ms: number;
  interval_s: number;
  boot_id: string | null;
  uptime_s: number | null;
  reported_at: string | null;
  flushed_ms: number;
  reported_interval_s: number | null;
};

export type Transition = TransitionRow;

/** Hubs created before the device's own interval was kept apart from the configured one. */
export function migratePresence(sql: SqlStorage) {
  const columns = sql.exec<{ name: string }>("PRAGMA table_info(presence)").toArray().map((c) => c.name);
  if (!columns.includes("reported_interval_s")) sql.exec("ALTER TABLE presence ADD COLUMN reported_interval_s INTEGER");
}

export class Presence {
  constructor(private readonly sql: SqlStorage) {}

  get(deviceId: string): PresenceRow | undefined {
    return this.sql.exec<PresenceRow>("SELECT * FROM presence WHERE device_id = ?", deviceId).toArray()[0];
  }

  all(): PresenceRow[] {
    return this.sql.exec<PresenceRow>("SELECT * FROM presence").toArray();
  }

  /**
   * Records that the device was heard from at `now` (server time); returns the transition, if any.
   * `configuredIntervalS`: the operator's interval for the device, used unless it reports its own.
   */
  sighted(s: Sighting, now: number, configuredIntervalS?: number): { row: PresenceRow; transition?: Transition; restarted: boolean } {
    const previous = this.get(s.deviceId);
    const status: LiveStatus = s.reportedStatus === "error" ? "error" : "online";
    const reported = s.intervalS ?? previous?.reported_interval_s ?? null;
    const interval = reported ?? configuredIntervalS ?? previous?.interval_s ?? DEFAULT_INTERVAL_S;
    const restarted = !!previous && (
      (s.bootId !== undefined && previous.boot_id !== null && s.bootId !== previous.boot_id) ||
      (s.uptimeS !== undefined && previous.uptime_s !== null && s.uptimeS < previous.uptime_s)
    );
    if (previous?.status === status) {
      // The common case, a device still in the same state: status is left out of the SET, because
      // naming it rewrites its index entry, and every row written is billed.
      this.sql.exec(
        `UPDATE presence SET last_seen_ms = ?, interval_s = ?, reported_interval_s = ?, boot_id = coalesce(?, boot_id),
           uptime_s = coalesce(?, uptime_s), reported_at = coalesce(?, reported_at) WHERE device_id = ?`,
        now, interval, reported, s.bootId ?? null, s.uptimeS ?? null, s.reportedAt ?? null, s.deviceId,
      );
    } else {
      this.sql.exec(
        `INSERT INTO presence (device_id, status, last_seen_ms, interval_s, reported_interval_s, boot_id, uptime_s, reported_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(device_id) DO UPDATE SET status = excluded.status, last_seen_ms = excluded.last_seen_ms,
           interval_s = excluded.interval_s, reported_interval_s = excluded.reported_interval_s, boot_id = coalesce(excluded.boot_id, boot_id),
           uptime_s = coalesce(excluded.uptime_s, uptime_s), reported_at = coalesce(excluded.reported_at, reported_at)`,
        s.deviceId, status, now, interval, reported, s.bootId ?? null, s.uptimeS ?? null, s.reportedAt ?? null,
      );
    }
    const row = this.get(s.deviceId)!;
    if (previous?.status === status) return { row, restarted };
    const reason = status === "error" ? "device reported error" : previous ? `heartbeat received after ${previous.status}` : "first heartbeat";
    return { row, restarted, transition: { deviceId: s.deviceId, previous: previous?.status ?? null, next: status, reason, at: now } };
  }

  /**
   * Devices whose heartbeats stopped: marked offline here; the caller records the transitions. `skip`:
   * devices whose liveness is not heartbeat-driven (simulated agents live in the hub itself).
   */
  expire(now: number, skip?: ReadonlySet<string>): Transition[] {
    const transitions: Transition[] = [];
    for (const row of this.sql.exec<PresenceRow>("SELECT * FROM presence WHERE status != 'offline'").toArray()) {
      if (skip?.has(row.device_id)) continue;
      const limit = offlineAfterMs(row.interval_s);
      if (now - row.last_seen_ms >= limit) {
        this.sql.exec("UPDATE presence SET status = 'offline' WHERE device_id = ?", row.device_id);
        transitions.push({
          deviceId: row.device_id,
          previous: row.status,
          next: "offline",
          reason: `no heartbeat for ${Math.round(limit / 1000)} s (${MISSED_HEARTBEATS} missed intervals of ${row.interval_s} s)`,
          at: now,
        });
      }
    }
    return transitions;
  }

  /** The next moment a device could go offline; undefined when none is online. */
  nextExpiry(skip?: ReadonlySet<string>): number | undefined {
    let next: number | undefined;
    for (const row of this.sql.exec<PresenceRow>("SELECT * FROM presence WHERE status != 'offline'").toArray()) {
      if (skip?.has(row.device_id)) continue;
      const at = row.last_seen_ms + offlineAfterMs(row.interval_s);
      next = next === undefined ? at : Math.min(next, at);
    }
    return next;
  }

  unflushed(): PresenceRow[] {
    return this.sql.exec<PresenceRow>("SELECT * FROM presence WHERE last_seen_ms > flushed_ms").toArray();
  }

  markFlushed(rows: PresenceRow[]) {
    for (const r of rows) this.sql.exec("UPDATE presence SET flushed_ms = ? WHERE device_id = ?", r.last_seen_ms, r.device_id);
  }

  /** An operator changed the device's interval: it applies at once unless the device reports its own. */
  configure(deviceId: string, configuredIntervalS: number) {
    this.sql.exec("UPDATE presence SET interval_s = ? WHERE device_id = ? AND reported_interval_s IS NULL", configuredIntervalS, deviceId);
  }

  forget(deviceId: string) {
    this.sql.exec("DELETE FROM presence WHERE device_id = ?", deviceId);
  }
}
