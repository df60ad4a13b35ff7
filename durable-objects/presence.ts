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

/** Every column of a presence row, in the order the batched upsert reads them from JSON. */
const COLUMNS = ["device_id", "status", "last_seen_ms", "interval_s", "boot_id", "uptime_s", "reported_at", "flushed_ms", "reported_interval_s"] as const;

/** What a steady sighting changes; everything else is written the moment it changes. */
const STEADY_COLUMNS = ["last_seen_ms", "uptime_s", "reported_at", "flushed_ms"] as const;

/**
 * One statement for any number of rows: they travel as one JSON parameter (the hub's SQL takes few
 * parameters). Only the columns named are updated; leaving `status` out when it cannot have changed
 * spares its index a write per row.
 */
const upsertRows = (columns: readonly string[]) => `
  INSERT INTO presence (${COLUMNS.join(", ")})
  SELECT ${COLUMNS.map((c) => `json_extract(value, '$.${c}')`).join(", ")} FROM json_each(?) WHERE true
  ON CONFLICT(device_id) DO UPDATE SET ${columns.map((c) => `${c} = excluded.${c}`).join(", ")}`;
const UPSERT_ROWS = upsertRows(COLUMNS.filter((c) => c !== "device_id"));
const UPSERT_STEADY_ROWS = upsertRows(STEADY_COLUMNS);

/**
 * Presence lives in memory and is written to the hub's SQLite sparingly: SQLite rows written are
 * billed per row, and a heartbeat every 10 s that upserts a row was the largest cost of a device.
 * What must survive the hub being evicted is written at once: a status transition, a changed
 * interval, a new boot. A steady sighting only moves last_seen (and the reported uptime) in memory;
 * those rows are written together, in one statement, by `persistPending` on the hub's
 * once-a-minute flush. So after an eviction a device's stored last_seen is at most about a minute
 * old — well inside the 3 missed intervals after which the offline sweep acts.
 */
export class Presence {
  private cached: Map<string, PresenceRow> | undefined;
  /** Devices whose row in memory is newer than the one stored. */
  private readonly pending = new Set<string>();
  /**
   * Devices read back from storage and not heard from since: their stored last_seen may be up to a
   * flush old, so the offline sweep gives them that much more before it calls them offline, rather
   * than flapping a device that is still calling in just because the hub restarted.
   */
  private readonly unconfirmed = new Set<string>();

  constructor(private readonly sql: SqlStorage) {}

  private rows(): Map<string, PresenceRow> {
    if (!this.cached) {
      this.cached = new Map(this.sql.exec<PresenceRow>("SELECT * FROM presence").toArray().map((r) => [r.device_id, r]));
      for (const row of this.cached.values()) if (row.status !== "offline") this.unconfirmed.add(row.device_id);
    }
    return this.cached;
  }

  /** When the device goes offline unless it is heard from. */
  private expiresAt(row: PresenceRow): number {
    const lastSeen = this.unconfirmed.has(row.device_id) ? row.last_seen_ms + LAST_SEEN_FLUSH_MS : row.last_seen_ms;
    return lastSeen + offlineAfterMs(row.interval_s);
  }

  private write(rows: PresenceRow[], statement = UPSERT_ROWS) {
    if (!rows.length) return;
    this.sql.exec(statement, JSON.stringify(rows));
    for (const r of rows) this.pending.delete(r.device_id);
  }

  get(deviceId: string): PresenceRow | undefined {
    const row = this.rows().get(deviceId);
    return row && { ...row };
  }

  all(): PresenceRow[] {
    return [...this.rows().values()].map((r) => ({ ...r }));
  }

  /**
   * Records that the device was heard from at `now` (server time); returns the transition, if any.
   * `configuredIntervalS`: the operator's interval for the device, used unless it reports its own.
   */
  sighted(s: Sighting, now: number, configuredIntervalS?: number): { row: PresenceRow; transition?: Transition; restarted: boolean } {
    const previous = this.rows().get(s.deviceId);
    const status: LiveStatus = s.reportedStatus === "error" ? "error" : "online";
    const reported = s.intervalS ?? previous?.reported_interval_s ?? null;
    const interval = reported ?? configuredIntervalS ?? previous?.interval_s ?? DEFAULT_INTERVAL_S;
    const restarted = !!previous && (
      (s.bootId !== undefined && previous.boot_id !== null && s.bootId !== previous.boot_id) ||
      (s.uptimeS !== undefined && previous.uptime_s !== null && s.uptimeS < previous.uptime_s)
    );
    const row: PresenceRow = {
      device_id: s.deviceId,
      status,
      last_seen_ms: now,
      interval_s: interval,
      reported_interval_s: reported,
      boot_id: s.bootId ?? previous?.boot_id ?? null,
      uptime_s: s.uptimeS ?? previous?.uptime_s ?? null,
      reported_at: s.reportedAt ?? previous?.reported_at ?? null,
      flushed_ms: previous?.flushed_ms ?? 0,
    };
    this.rows().set(s.deviceId, row);
    this.unconfirmed.delete(s.deviceId);
    const mustSurviveEviction = !previous || previous.status !== status || previous.interval_s !== interval ||
      previous.reported_interval_s !== reported || previous.boot_id !== row.boot_id || restarted;
    if (mustSurviveEviction) this.write([row]);
    else this.pending.add(s.deviceId);
    if (previous?.status === status) return { row: { ...row }, restarted };
    const reason = status === "error" ? "device reported error" : previous ? `heartbeat received after ${previous.status}` : "first heartbeat";
    return { row: { ...row }, restarted, transition: { deviceId: s.deviceId, previous: previous?.status ?? null, next: status, reason, at: now } };
  }

  /**
   * Devices whose heartbeats stopped: marked offline here; the caller records the transitions. `skip`:
   * devices whose liveness is not heartbeat-driven (simulated agents live in the hub itself).
   */
  expire(now: number, skip?: ReadonlySet<string>): Transition[] {
    const transitions: Transition[] = [];
    const changed: PresenceRow[] = [];
    for (const row of this.rows().values()) {
      if (row.status === "offline" || skip?.has(row.device_id)) continue;
      const limit = offlineAfterMs(row.interval_s);
      if (now >= this.expiresAt(row)) {
        transitions.push({
          deviceId: row.device_id,
          previous: row.status,
          next: "offline",
          reason: `no heartbeat for ${Math.round(limit / 1000)} s (${MISSED_HEARTBEATS} missed intervals of ${row.interval_s} s)`,
          at: now,
        });
        row.status = "offline";
        changed.push(row);
      }
    }
    this.write(changed);
    return transitions;
  }

  /** The next moment a device could go offline; undefined when none is online. */
  nextExpiry(skip?: ReadonlySet<string>): number | undefined {
    let next: number | undefined;
    for (const row of this.rows().values()) {
      if (row.status === "offline" || skip?.has(row.device_id)) continue;
      const at = this.expiresAt(row);
      next = next === undefined ? at : Math.min(next, at);
    }
    return next;
  }

  /** Devices whose last_seen D1 has not heard yet. */
  unflushed(): PresenceRow[] {
    return [...this.rows().values()].filter((r) => r.last_seen_ms > r.flushed_ms).map((r) => ({ ...r }));
  }

  /** D1 now has these rows' last_seen; stored with the next `persistPending`. */
  markFlushed(rows: PresenceRow[]) {
    for (const r of rows) {
      const row = this.rows().get(r.device_id);
      if (!row) continue;
      row.flushed_ms = r.last_seen_ms;
      this.pending.add(r.device_id);
    }
  }

  /** Whether some row in memory is newer than the stored one. */
  hasPending(): boolean {
    return this.pending.size > 0;
  }

  /**
   * Writes every row newer in memory than in storage, in one statement; answers how many. Only the
   * steady columns can be behind: status, intervals and boot were written when they changed.
   */
  persistPending(): number {
    const rows = [...this.pending].flatMap((id) => this.rows().get(id) ?? []);
    this.pending.clear();
    this.write(rows, UPSERT_STEADY_ROWS);
    return rows.length;
  }

  /** An operator changed the device's interval: it applies at once unless the device reports its own. */
  configure(deviceId: string, configuredIntervalS: number) {
    const row = this.rows().get(deviceId);
    if (!row || row.reported_interval_s !== null || row.interval_s === configuredIntervalS) return;
    row.interval_s = configuredIntervalS;
    this.write([row]);
  }

  forget(deviceId: string) {
    this.rows().delete(deviceId);
    this.unconfirmed.delete(deviceId);
    this.pending.delete(deviceId);
    this.sql.exec("DELETE FROM presence WHERE device_id = ?", deviceId);
  }
}
