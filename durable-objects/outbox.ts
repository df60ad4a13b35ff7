import { auditValues, type AuditInput } from "../src/services/audit";

/**
 * The hub's D1 outbox. Device calls (poll, ack, result) and alarm work change state in the hub's own
 * SQLite at once; what D1 must learn about it (audit rows, job executions, the command index, job
 * status) is appended here in the same synchronous step and written later in coalesced batches — one
 * statement per kind per chunk through `json_each`, all in one atomic `DB.batch`. So a device's poll
 * never waits on D1, and a fan-out to a thousand devices is a handful of statements, not thousands.
 *
 * Delivery is at-least-once: a batch that succeeded in D1 but whose rows could not be deleted here
 * (the object died in between) is sent again. Every kind is an upsert or a conditional update except
 * audit rows, which may then repeat — the rare price of never losing one.
 */
export const OUTBOX_SCHEMA = `
  CREATE TABLE IF NOT EXISTS d1_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_ms INTEGER NOT NULL
  );
`;

/** Writes reach D1 at most this long after they were queued (coalescing window). */
export const OUTBOX_FLUSH_MS = 1_000;
const MAX_BACKOFF_MS = 60_000;
const ROWS_PER_FLUSH = 5_000;
/** Kept well under D1's 2 MB value limit. */
const MAX_CHUNK_BYTES = 256 * 1024;

export interface ExecutionRow {
  job_id: string;
  device_id: string;
  command_id: string | null;
  status: string;
  result: unknown;
  error_message: string | null;
  created_at?: string;
  completed_at: string | null;
}

type Entry =
  | { kind: "audit"; body: Record<string, unknown> }
  | { kind: "index_open"; body: { command_id: string; site_id: string; device_id: string; expires_at: string; created_at: string } }
  | { kind: "index_close"; body: { command_id: string; at: string } }
  | { kind: "execution"; body: Record<string, unknown> }
  | { kind: "sql"; body: { sql: string; params: unknown[] } };

/** What a drizzle query builder gives: `.toSQL()` with driver-mapped parameters. */
export interface ToSql {
  toSQL(): { sql: string; params: unknown[] };
}

export class D1Outbox {
  private flushing: Promise<void> | undefined;
  private failures = 0;
  private retryAt = 0;
  private oldestMs: number | null | undefined;
  /** Entries added since this object started: callers compare it to know whether a call wrote anything. */
  added = 0;

  constructor(private readonly sql: SqlStorage, private readonly d1: () => D1Database) {}

  private add(entry: Entry, now: number) {
    this.sql.exec("INSERT INTO d1_outbox (kind, body, created_ms) VALUES (?, ?, ?)", entry.kind, JSON.stringify(entry.body), now);
    this.added++;
    if (this.oldestMs === null) this.oldestMs = now;
  }

  audit(input: AuditInput & { at: string }, now: number) {
    const v = auditValues(input);
    this.add({
      kind: "audit",
      body: {
        event_type: v.eventType, category: v.category, severity: v.severity, description: v.description,
        user_id: v.userId, job_id: v.jobId, device_id: v.deviceId, site_id: v.siteId,
        event_metadata: JSON.stringify(v.eventMetadata ?? {}), created_at: input.at,
      },
    }, now);
  }

  indexOpen(row: { command_id: string; site_id: string; device_id: string; expires_at: string; created_at: string }, now: number) {
    this.add({ kind: "index_open", body: row }, now);
  }

  indexClose(commandId: string, at: string, now: number) {
    this.add({ kind: "index_close", body: { command_id: commandId, at } }, now);
  }

  execution(row: ExecutionRow, now: number) {
    this.add({ kind: "execution", body: { ...row, result: row.result === undefined || row.result === null ? null : JSON.stringify(row.result) } }, now);
  }

  /** Any single statement (built with drizzle), run after the bulk kinds of the same batch. */
  statement(query: ToSql, now: number) {
    const { sql, params } = query.toSQL();
    this.add({ kind: "sql", body: { sql, params } }, now);
  }

  /** When the outbox next needs the alarm; undefined when empty. */
  nextWake(now: number): number | undefined {
    if (this.oldestMs === undefined) {
      this.oldestMs = this.sql.exec<{ t: number | null }>("SELECT min(created_ms) AS t FROM d1_outbox").one().t;
    }
    if (this.oldestMs === null) return undefined;
    return Math.max(this.oldestMs + OUTBOX_FLUSH_MS, this.retryAt, now);
  }

  /** Writes everything queued so far; one flush at a time, a second caller waits and flushes again. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    this.flushing = this.flushAll().finally(() => { this.flushing = undefined; });
    return this.flushing;
  }

  /** Flush that never throws: a failure backs off and the alarm retries. */
  async flushQuietly(): Promise<boolean> {
    try {
      await this.flush();
      return true;
    } catch (error) {
      console.error("SiteHub outbox flush failed; will retry", error);
      return false;
    }
  }

  private async flushAll() {
    try {
      for (;;) {
        const rows = this.sql.exec<{ id: number; kind: Entry["kind"]; body: string }>(
          "SELECT id, kind, body FROM d1_outbox ORDER BY id LIMIT ?", ROWS_PER_FLUSH).toArray();
        if (!rows.length) break;
        const statements = this.build(rows);
        if (statements.length) await this.d1().batch(statements);
        this.sql.exec("DELETE FROM d1_outbox WHERE id <= ?", rows[rows.length - 1].id);
        if (rows.length < ROWS_PER_FLUSH) break;
      }
      this.failures = 0;
      this.retryAt = 0;
    } catch (error) {
      this.failures++;
      this.retryAt = Date.now() + Math.min(MAX_BACKOFF_MS, 1_000 * 2 ** this.failures);
      throw error;
    } finally {
      this.oldestMs = undefined;
    }
  }

  private build(rows: { kind: Entry["kind"]; body: string }[]): D1PreparedStatement[] {
    const d1 = this.d1();
    const of = (kind: Entry["kind"]) => rows.filter((r) => r.kind === kind).map((r) => JSON.parse(r.body));
    const statements: D1PreparedStatement[] = [];
    const bulk = (sql: string, items: unknown[]) => {
      for (const chunk of chunks(items)) statements.push(d1.prepare(sql).bind(JSON.stringify(chunk)));
    };

    bulk(
      `INSERT INTO command_index (command_id, site_id, device_id, expires_at, created_at)
       SELECT json_extract(value, '$.command_id'), json_extract(value, '$.site_id'), json_extract(value, '$.device_id'),
              json_extract(value, '$.expires_at'), json_extract(value, '$.created_at')
       FROM json_each(?1) WHERE true ON CONFLICT(command_id) DO NOTHING`,
      of("index_open"),
    );
    bulk(
      `INSERT INTO audit_logs (event_type, category, severity, description, user_id, job_id, device_id, site_id, event_metadata, created_at)
       SELECT json_extract(value, '$.event_type'), json_extract(value, '$.category'), json_extract(value, '$.severity'),
              json_extract(value, '$.description'), json_extract(value, '$.user_id'), json_extract(value, '$.job_id'),
              json_extract(value, '$.device_id'), json_extract(value, '$.site_id'), json_extract(value, '$.event_metadata'),
              json_extract(value, '$.created_at')
       FROM json_each(?1)`,
      of("audit"),
    );
    // The latest state of each (job, device) wins; earlier ones in the same flush are superseded.
    const executions = new Map<string, Record<string, unknown>>();
    for (const e of of("execution")) {
      const key = `${e.job_id}\u0000${e.device_id}`;
      const previous = executions.get(key);
      executions.delete(key);
      executions.set(key, { ...e, created_at: e.created_at ?? previous?.created_at ?? null });
    }
    bulk(
      `INSERT INTO job_executions (job_id, device_id, command_id, status, result, error_message, created_at, completed_at)
       SELECT json_extract(value, '$.job_id'), json_extract(value, '$.device_id'), json_extract(value, '$.command_id'),
              json_extract(value, '$.status'), json_extract(value, '$.result'), json_extract(value, '$.error_message'),
              coalesce(json_extract(value, '$.created_at'), strftime('%Y-%m-%dT%H:%M:%fZ','now')), json_extract(value, '$.completed_at')
       FROM json_each(?1) WHERE true
       ON CONFLICT(job_id, device_id) DO UPDATE SET command_id = coalesce(excluded.command_id, command_id), status = excluded.status,
         result = excluded.result, error_message = excluded.error_message, completed_at = excluded.completed_at`,
      [...executions.values()],
    );
    for (const r of rows) {
      if (r.kind !== "sql") continue;
      const { sql, params } = JSON.parse(r.body) as { sql: string; params: unknown[] };
      statements.push(d1.prepare(sql).bind(...params));
    }
    bulk(
      `UPDATE command_index SET closed_at = (SELECT json_extract(value, '$.at') FROM json_each(?1) WHERE json_extract(value, '$.command_id') = command_index.command_id)
       WHERE command_id IN (SELECT json_extract(value, '$.command_id') FROM json_each(?1))`,
      of("index_close"),
    );
    return statements;
  }
}

function chunks<T>(items: T[]): T[][] {
  const out: T[][] = [];
  let current: T[] = [];
  let size = 0;
  for (const item of items) {
    const bytes = JSON.stringify(item).length;
    if (current.length && size + bytes > MAX_CHUNK_BYTES) {
      out.push(current);
      current = [];
      size = 0;
    }
    current.push(item);
    size += bytes;
  }
  if (current.length) out.push(current);
  return out;
}
