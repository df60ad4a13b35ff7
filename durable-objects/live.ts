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
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    type TEXT NOT NULL,
    ts TEXT NOT NULL,
    data TEXT NOT NULL
  );
`;

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
