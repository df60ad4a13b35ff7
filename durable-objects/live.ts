/**
 * The site's live event stream: every change is appended to a bounded ring in the DO's SQLite with a
 * monotonically increasing `seq`, then fanned out to subscribers. `?since=<seq>` / Last-Event-ID
 * replay from the ring.
 */
import type { LiveEvent } from "../src/shared/hub-contract";
import { iso } from "../src/shared/time";

export const RING_SIZE = 2000;

export const LIVE_SCHEMA = `
  CREATE TABLE IF NOT EXISTS live_events (
    seq INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    ts TEXT NOT NULL,
    data TEXT NOT NULL
  );
`;

/**
 * `seq` is the row id without AUTOINCREMENT, whose counter is a second row written per event. The
 * ring only ever trims its oldest rows, so the newest stays and the next id is always larger: seqs
 * still only grow. Hubs made before this have their ring copied once into the new table.
 */
export function migrateLiveEvents(sql: SqlStorage) {
  const ddl = sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'live_events'").toArray()[0]?.sql;
  if (!ddl || !/AUTOINCREMENT/i.test(ddl)) return;
  sql.exec("ALTER TABLE live_events RENAME TO live_events_autoincrement");
  sql.exec(LIVE_SCHEMA);
  sql.exec("INSERT INTO live_events (seq, type, ts, data) SELECT seq, type, ts, data FROM live_events_autoincrement");
  sql.exec("DROP TABLE live_events_autoincrement");
}

export class LiveRing {
  constructor(private readonly sql: SqlStorage, private readonly siteId: () => string) {}

  append(type: string, data: unknown, now: number): LiveEvent {
    const ts = iso(now);
    const row = this.sql
      .exec<{ seq: number }>("INSERT INTO live_events (type, ts, data) VALUES (?, ?, ?) RETURNING seq", type, ts, JSON.stringify(data))
      .one();
    if (row.seq % 100 === 0) this.sql.exec("DELETE FROM live_events WHERE seq <= ?", row.seq - RING_SIZE);
    return { seq: row.seq, type, site_id: this.siteId(), ts, data };
  }

  since(seq: number, limit = RING_SIZE): LiveEvent[] {
    return this.sql
      .exec<{ seq: number; type: string; ts: string; data: string }>(
        "SELECT seq, type, ts, data FROM live_events WHERE seq > ? ORDER BY seq LIMIT ?", seq, limit)
      .toArray()
      .map((r) => ({ seq: r.seq, type: r.type, site_id: this.siteId(), ts: r.ts, data: JSON.parse(r.data) }));
  }

  /** The oldest seq still replayable; a client asking from before it has missed events. */
  oldestSeq(): number {
    return this.sql.exec<{ seq: number | null }>("SELECT min(seq) AS seq FROM live_events").one().seq ?? 0;
  }
}
