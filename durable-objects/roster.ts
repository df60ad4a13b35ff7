import type { RosterDevice } from "../src/shared/hub-contract";
import type { LiveStatus } from "../src/shared/vocabulary";
import type { TimedPart } from "./timed-part";

/**
 * The hub's own copy of its site's rows in D1's `devices` table (the columns a device list shows),
 * so the site's health and device list are answered without reading D1. It is kept current by:
 *
 * - the Worker telling the hub after every change it makes to a device row (registration, lifecycle,
 *   key rotation, settings, DNA): the hub re-reads that one row (`refreshDevice`);
 * - the hub's own writes to D1 (presence transitions and last_seen, through the outbox), applied here
 *   with the same values at the moment they are queued;
 * - a full re-read from D1 by the alarm every `ROSTER_RESYNC_MS` while someone reads the roster, as a
 *   safety net for a change whose notification was lost.
 *
 * Re-reads of D1 run one at a time in the order they were asked for, so a slow full re-read cannot
 * overwrite a newer single-row read with an older snapshot.
 */
export const ROSTER_SCHEMA = `
  CREATE TABLE IF NOT EXISTS roster (
    device_id TEXT PRIMARY KEY,
    row_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    device_type TEXT NOT NULL,
    status TEXT NOT NULL,
    ip_address TEXT,
    device_source TEXT NOT NULL,
    enrollment_method TEXT NOT NULL,
    lifecycle_state TEXT NOT NULL,
    last_seen TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
  CREATE INDEX IF NOT EXISTS roster_order ON roster (created_at DESC, row_id DESC);
`;

/** How often the alarm re-reads the whole roster from D1 while the site is being read. */
export const ROSTER_RESYNC_MS = 5 * 60_000;
/** After the last read, how long the roster keeps waking the hub for its re-sync. */
export const ROSTER_READ_KEEPS_SYNCING_MS = 15 * 60_000;

const DEVICE_COLUMNS =
  "id AS row_id, device_id, name, device_type, status, ip_address, device_source, enrollment_method, lifecycle_state, last_seen, created_at, updated_at";

type RosterRow = Omit<RosterDevice, "site_id"> & { row_id: number };

interface RosterHost {
  sql: SqlStorage;
  d1: () => D1Database;
  siteId: () => string;
  meta: (key: string) => string | undefined;
  setMeta: (key: string, value: string) => void;
}

export class Roster {
  private queue: Promise<unknown> = Promise.resolve();
  private lastReadMs: number | undefined;

  constructor(private readonly host: RosterHost) {}

  /** The site's devices, newest first, as D1 holds them; loaded from D1 once if never loaded. */
  async devices(now: number): Promise<RosterDevice[]> {
    this.lastReadMs = now;
    if (this.syncedAt() === undefined) await this.resync(now);
    const siteId = this.host.siteId();
    return this.host.sql.exec<RosterRow>("SELECT * FROM roster ORDER BY created_at DESC, row_id DESC").toArray()
      .map(({ row_id: _r, ...row }) => ({ ...row, site_id: siteId }));
  }

  /** A read answered from a device list worked out earlier: it keeps the re-sync going as devices() does. */
  noteRead(now: number) {
    this.lastReadMs = now;
  }

  /** Re-reads one device's row from D1: added, changed, or gone from this site. */
  refreshDevice(deviceId: string): Promise<void> {
    return this.serially(async () => {
      // Never loaded: the first read loads everything, this device included.
      if (this.syncedAt() === undefined) return;
      const row = await this.host.d1().prepare(`SELECT ${DEVICE_COLUMNS} FROM devices WHERE device_id = ? AND site_id = ?`)
        .bind(deviceId, this.host.siteId()).first<RosterRow>();
      if (row) this.upsert(row);
      else this.host.sql.exec("DELETE FROM roster WHERE device_id = ?", deviceId);
    });
  }

  /** Drops one device at once, for a removal D1 will only see after the caller's next write. */
  forget(deviceId: string): Promise<void> {
    return this.serially(async () => {
      this.host.sql.exec("DELETE FROM roster WHERE device_id = ?", deviceId);
    });
  }

  /** Replaces the roster with D1's rows for the site. */
  resync(now: number): Promise<void> {
    return this.serially(async () => {
      const { results } = await this.host.d1().prepare(`SELECT ${DEVICE_COLUMNS} FROM devices WHERE site_id = ?`)
        .bind(this.host.siteId()).all<RosterRow>();
      this.host.sql.exec("DELETE FROM roster");
      for (const row of results) this.upsert(row);
      this.host.setMeta("roster_synced_at", String(now));
    });
  }

  /** The hub queued a status change for D1 (outbox `device_status`): the same values here. */
  noteStatus(deviceId: string, status: LiveStatus, at: string) {
    this.host.sql.exec(
      "UPDATE roster SET status = ?, last_seen = CASE WHEN ? = 'offline' THEN last_seen ELSE ? END, updated_at = ? WHERE device_id = ?",
      status, status, at, at, deviceId,
    );
  }

  /** The hub queued a coalesced last_seen for D1 (outbox `last_seen`). */
  noteLastSeen(deviceId: string, lastSeen: string) {
    this.host.sql.exec("UPDATE roster SET last_seen = ? WHERE device_id = ?", lastSeen, deviceId);
  }

  /** When the next full re-read from D1 is due. */
  nextResync(): number {
    return (this.syncedAt() ?? 0) + ROSTER_RESYNC_MS;
  }

  /** The alarm's safety net: a full re-read every ROSTER_RESYNC_MS while the roster is being read. */
  timedPart(): TimedPart {
    return {
      nextWake: (now) => {
        const syncedAt = this.syncedAt();
        if (syncedAt === undefined || this.lastReadMs === undefined || now - this.lastReadMs > ROSTER_READ_KEEPS_SYNCING_MS) return undefined;
        return this.nextResync();
      },
      onAlarm: async (now) => {
        const syncedAt = this.syncedAt();
        if (syncedAt === undefined || now - syncedAt < ROSTER_RESYNC_MS) return;
        try {
          await this.resync(now);
        } catch (error) {
          // D1 unavailable: the roster keeps what it has and tries again one period later.
          this.host.setMeta("roster_synced_at", String(now));
          console.warn(JSON.stringify({ message: "roster re-sync failed", site_id: this.host.siteId(), error: String(error) }));
        }
      },
    };
  }

  private syncedAt(): number | undefined {
    const value = this.host.meta("roster_synced_at");
    return value === undefined ? undefined : Number(value);
  }

  private upsert(row: RosterRow) {
    this.host.sql.exec(
      `INSERT INTO roster (device_id, row_id, name, device_type, status, ip_address, device_source, enrollment_method, lifecycle_state, last_seen, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(device_id) DO UPDATE SET row_id = excluded.row_id, name = excluded.name, device_type = excluded.device_type,
         status = excluded.status, ip_address = excluded.ip_address, device_source = excluded.device_source,
         enrollment_method = excluded.enrollment_method, lifecycle_state = excluded.lifecycle_state, last_seen = excluded.last_seen,
         created_at = excluded.created_at, updated_at = excluded.updated_at`,
      row.device_id, row.row_id, row.name, row.device_type, row.status, row.ip_address, row.device_source, row.enrollment_method,
      row.lifecycle_state, row.last_seen, row.created_at, row.updated_at,
    );
  }

  private serially<T>(work: () => Promise<T>): Promise<T> {
    const run = this.queue.then(work, work);
    this.queue = run.catch(() => undefined);
    return run;
  }
}
