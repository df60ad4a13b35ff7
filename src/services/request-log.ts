import type { Db, Env } from "../env";
import { apiRequestLogs } from "../db/schema";

export type RequestLogEntry = typeof apiRequestLogs.$inferInsert;

/**
 * Where request-log rows go: D1 locally, Workers Analytics Engine when that binding exists. Every
 * logged request is a row, which in production would spend D1's write budget on bookkeeping; an
 * Analytics Engine dataset takes that volume without touching D1.
 */
export interface RequestLogSink {
  write(entries: RequestLogEntry[]): Promise<void>;
}

class D1Sink implements RequestLogSink {
  constructor(private readonly db: Db) {}
  async write(entries: RequestLogEntry[]) {
    // 12 columns per row keeps each statement under D1's 100 bound parameters.
    const statements = [];
    for (let i = 0; i < entries.length; i += 8) statements.push(this.db.insert(apiRequestLogs).values(entries.slice(i, i + 8)));
    if (statements.length) await this.db.batch(statements as [typeof statements[0], ...typeof statements]);
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
 * arrives. Every request that adds a row hands the shared flush promise to `waitUntil`, so the
 * write completes after the responses are sent and nothing is dropped.
 */
class BufferedRequestLog {
  private buffer: RequestLogEntry[] = [];
  private pending: Promise<void> | undefined;

  constructor(private readonly sink: RequestLogSink) {}

  add(entry: RequestLogEntry): Promise<void> {
    this.buffer.push(entry);
    if (this.buffer.length >= MAX_BATCH) return this.flush();
    this.pending ??= new Promise<void>((resolve) => setTimeout(resolve, FLUSH_DELAY_MS)).then(() => this.flush());
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

export function requestLogFor(env: Env, db: Db): BufferedRequestLog {
  let log = logs.get(env);
  if (!log) {
    log = new BufferedRequestLog(env.REQUEST_LOG_AE ? new AnalyticsEngineSink(env.REQUEST_LOG_AE) : new D1Sink(db));
    logs.set(env, log);
  }
  return log;
}
