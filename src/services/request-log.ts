import type { Env } from "../env";
import type { apiRequestLogs } from "../db/schema";
import { jsonChunks } from "../shared/rollups";

export type RequestLogEntry = typeof apiRequestLogs.$inferInsert;

/**
 * Where request-log rows go: D1 locally, Workers Analytics Engine when that binding exists. Every
 * logged request is a row, which in production would spend D1's write budget on bookkeeping; an
 * Analytics Engine dataset takes that volume without touching D1.
 */
export interface RequestLogSink {
  write(entries: RequestLogEntry[]): Promise<void>;
}

const field = (name: string) => `json_extract(value, '$.${name}')`;

/** A batch of entries (`?1`, JSON) in one statement, however many there are. */
const INSERT_ENTRIES = `
  INSERT INTO api_request_logs (request_id, endpoint, method, status_code, response_time_ms, user_id, device_id, ip_address,
                                request_size, response_size, error_message, created_at)
  SELECT ${field("requestId")}, ${field("endpoint")}, ${field("method")}, ${field("statusCode")}, ${field("responseTimeMs")}, ${field("userId")},
         ${field("deviceId")}, ${field("ipAddress")}, ${field("requestSize")}, ${field("responseSize")}, ${field("errorMessage")},
         coalesce(${field("createdAt")}, strftime('%Y-%m-%dT%H:%M:%fZ','now'))
  FROM json_each(?1)`;

class D1Sink implements RequestLogSink {
  constructor(private readonly d1: D1Database) {}
  async write(entries: RequestLogEntry[]) {
    const statements = jsonChunks(entries).map((chunk) => this.d1.prepare(INSERT_ENTRIES).bind(chunk));
    if (statements.length) await this.d1.batch(statements);
  }
}

class AnalyticsEngineSink implements RequestLogSink {
  constructor(private readonly dataset: AnalyticsEngineDataset) {}
  async write(entries: RequestLogEntry[]) {
    for (const e of entries) {
      this.dataset.writeDataPoint({
        indexes: [e.endpoint.slice(0, 96)],
        blobs: [e.method, e.endpoint, e.ipAddress ?? "", e.errorMessage ?? "", e.deviceId ?? "", e.requestId ?? ""],
        doubles: [e.statusCode, e.responseTimeMs, e.userId ?? 0, e.requestSize ?? 0, e.responseSize ?? 0],
      });
    }
  }
}

const FLUSH_DELAY_MS = 200;
const MAX_BATCH = 200;

/**
 * Collects request-log rows per isolate and writes them in one batch shortly after the first one
 * arrives. The request whose row starts a batch gets the batch's write to hand to `waitUntil`,
 * which keeps it alive until it completed, after the responses are sent; the rows that join the
 * batch go with that write, so nothing is dropped and the others have nothing to hold.
 */
class BufferedRequestLog {
  private buffer: RequestLogEntry[] = [];
  private pending: Promise<void> | undefined;

  constructor(private readonly sink: RequestLogSink) {}

  /** Returns the write to hold with `waitUntil`, or undefined when the entry joined a scheduled one. */
  add(entry: RequestLogEntry): Promise<void> | undefined {
    this.buffer.push(entry);
    if (this.buffer.length >= MAX_BATCH) return this.flush();
    if (this.pending) return undefined;
    this.pending = new Promise<void>((resolve) => setTimeout(resolve, FLUSH_DELAY_MS)).then(() => this.flush());
    return this.pending;
  }

  private async flush() {
    this.pending = undefined;
    const batch = this.buffer;
    this.buffer = [];
    if (batch.length) await this.sink.write(batch).catch((error) => console.error("request log write failed", error));
  }
}

const logs = new WeakMap<Env, BufferedRequestLog>();

export function requestLogFor(env: Env): BufferedRequestLog {
  let log = logs.get(env);
  if (!log) {
    log = new BufferedRequestLog(env.REQUEST_LOG_AE ? new AnalyticsEngineSink(env.REQUEST_LOG_AE) : new D1Sink(env.DB));
    logs.set(env, log);
  }
  return log;
}
