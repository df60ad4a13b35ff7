import { drizzle } from "drizzle-orm/d1";
import * as schema from "../src/db/schema";
import { auditValues } from "../src/services/audit";
import { deviceStateHistory, devices } from "../src/db/schema";
import { eq } from "drizzle-orm";

/**
 * Live presence of a site's devices. Heartbeats land here (never in D1); D1 hears only about
 * transitions, at once, and about last_seen in coalesced batches.
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
    flushed_ms INTEGER NOT NULL DEFAULT 0
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

export type LiveStatus = "online" | "offline" | "error";

export type PresenceRow = {
  device_id: string;
  status: LiveStatus;
  last_seen_ms: number;
  interval_s: number;
  boot_id: string | null;
  uptime_s: number | null;
  reported_at: string | null;
  flushed_ms: number;
};

export interface Sighting {
  deviceId: string;
  /** What the device says about itself; absent means "alive and well". */
  reportedStatus?: "online" | "error";
  intervalS?: number;
  bootId?: string;
  uptimeS?: number;
  reportedAt?: string;
}

export interface Transition {
  deviceId: string;
  previous: LiveStatus | null;
  next: LiveStatus;
  reason: string;
  at: number;
}

export class Presence {
  constructor(private readonly sql: SqlStorage) {}

  get(deviceId: string): PresenceRow | undefined {
    return this.sql.exec<PresenceRow>("SELECT * FROM presence WHERE device_id = ?", deviceId).toArray()[0];
  }

  all(): PresenceRow[] {
    return this.sql.exec<PresenceRow>("SELECT * FROM presence").toArray();
  }

  /** Records that the device was heard from at `now` (server time); returns the transition, if any. */
  sighted(s: Sighting, now: number): { row: PresenceRow; transition?: Transition; restarted: boolean } {
    const previous = this.get(s.deviceId);
    const status: LiveStatus = s.reportedStatus === "error" ? "error" : "online";
    const interval = s.intervalS ?? previous?.interval_s ?? DEFAULT_INTERVAL_S;
    const restarted = !!previous && (
      (s.bootId !== undefined && previous.boot_id !== null && s.bootId !== previous.boot_id) ||
      (s.uptimeS !== undefined && previous.uptime_s !== null && s.uptimeS < previous.uptime_s)
    );
    this.sql.exec(
      `INSERT INTO presence (device_id, status, last_seen_ms, interval_s, boot_id, uptime_s, reported_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(device_id) DO UPDATE SET status = excluded.status, last_seen_ms = excluded.last_seen_ms,
         interval_s = excluded.interval_s, boot_id = coalesce(excluded.boot_id, boot_id),
         uptime_s = coalesce(excluded.uptime_s, uptime_s), reported_at = coalesce(excluded.reported_at, reported_at)`,
      s.deviceId, status, now, interval, s.bootId ?? null, s.uptimeS ?? null, s.reportedAt ?? null,
    );
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

  forget(deviceId: string) {
    this.sql.exec("DELETE FROM presence WHERE device_id = ?", deviceId);
  }
}

/** Writes status transitions to D1 in one batch: device status, a state-history row, an audit event. */
export async function recordTransitions(d1: D1Database, siteId: string, transitions: Transition[]) {
  if (!transitions.length) return;
  const db = drizzle(d1, { schema });
  const statements = transitions.flatMap((t) => {
    const at = new Date(t.at).toISOString();
    const eventType = t.next === "offline" ? "device_offline" : t.next === "error" ? "device_error" : "device_online";
    return [
      db.update(devices).set({ status: t.next, lastSeen: t.next === "offline" ? undefined : at, updatedAt: at }).where(eq(devices.deviceId, t.deviceId)),
      db.insert(deviceStateHistory).values({
        deviceId: t.deviceId, siteId, previousState: t.previous, newState: t.next, changedBy: "system", reason: t.reason, timestamp: at,
      }),
      db.insert(schema.auditLogs).values({
        ...auditValues({ eventType, description: `Device ${t.deviceId} is ${t.next}: ${t.reason}`, siteId, deviceId: t.deviceId, metadata: { previous_state: t.previous, new_state: t.next, reason: t.reason } }),
        createdAt: at,
      }),
    ];
  });
  await db.batch(statements as [typeof statements[0], ...typeof statements]);
}

/** One statement for the whole site: last_seen for every device heard from since the last flush. */
export async function flushLastSeen(d1: D1Database, rows: PresenceRow[]) {
  if (!rows.length) return;
  const payload = JSON.stringify(rows.map((r) => ({ id: r.device_id, ts: new Date(r.last_seen_ms).toISOString() })));
  await d1.prepare(
    `UPDATE devices SET last_seen = (SELECT json_extract(value, '$.ts') FROM json_each(?1) WHERE json_extract(value, '$.id') = devices.device_id)
     WHERE device_id IN (SELECT json_extract(value, '$.id') FROM json_each(?1))`,
  ).bind(payload).run();
}
