import type { Env } from "../env";
import { systemClock, type Clock } from "../shared/time";
import { Aggregate, REQUEST_ROLLUP_UPSERT, jsonChunks, periodStart, type RequestRollupRow } from "../shared/rollups";

/** Requests that matched no route share one row, so random paths cannot grow the rollups. */
export const UNMATCHED_ROUTE = "(unmatched)";
/** An isolate writes its rollups at most this often. */
export const ROLLUP_FLUSH_INTERVAL_MS = 10_000;

/** One finished API request as the rollups see it. */
export interface RequestSample {
  /** The route template, e.g. `/api/v1/devices/{device_id}` — never the raw path. */
  route: string;
  method: string;
  status: number;
  durationMs: number;
  /** When it finished (epoch ms). */
  at: number;
}

type Key = Pick<RequestRollupRow, "bucket_start" | "route" | "method" | "status_class">;

/**
 * Per-isolate request rollups: every logged request is added in memory to its (hour, route, method,
 * status class) aggregate, and the aggregates are added to D1's `request_rollups` — one hour row
 * and one day row per key — at most every 10 s, in one batch, after the responses went out. So the
 * D1 cost is a few rows per route per isolate per 10 s, whatever the request rate, and the metrics
 * query reads a bounded number of rows. A failed write keeps the aggregates for the next flush.
 */
export class RequestRollups {
  private pending = new Map<string, { key: Key; aggregate: Aggregate }>();
  private lastFlushAt = Number.NEGATIVE_INFINITY;
  /** The next flush, not started yet: requests until it starts share it. */
  private next: Promise<void> | undefined;

  constructor(
    private readonly d1: D1Database,
    private readonly clock: Clock = systemClock,
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  ) {}

  /** The current hour's start as ISO, computed once an hour rather than once a request. */
  private hour = { start: Number.NaN, iso: "" };

  record(sample: RequestSample) {
    const hourStart = periodStart("hour", sample.at);
    if (hourStart !== this.hour.start) this.hour = { start: hourStart, iso: new Date(hourStart).toISOString() };
    const key: Key = {
      bucket_start: this.hour.iso,
      route: sample.route,
      method: sample.method,
      status_class: Math.min(5, Math.max(1, Math.floor(sample.status / 100))),
    };
    this.aggregateFor(key).add(Math.max(0, sample.durationMs));
  }

  /**
   * Schedules the next write: at once when the last flush started 10 s ago or more, otherwise
   * when 10 s will have passed. Returns the write for the request that scheduled it to hand to
   * `waitUntil` (which keeps it alive until done); undefined when one is already scheduled, whose
   * write then includes this request's share.
   */
  flushSoon(): Promise<void> | undefined {
    if (this.next) return undefined;
    const wait = Math.max(0, this.lastFlushAt + ROLLUP_FLUSH_INTERVAL_MS - this.clock.now());
    this.next = this.sleep(wait).then(() => {
      this.next = undefined;
      return this.flush();
    });
    return this.next;
  }

  /** Adds everything recorded so far to D1. */
  async flush() {
    this.lastFlushAt = this.clock.now();
    const batch = this.pending;
    this.pending = new Map();
    if (!batch.size) return;
    try {
      const statements = jsonChunks(rowsOf(batch.values())).map((chunk) => this.d1.prepare(REQUEST_ROLLUP_UPSERT).bind(chunk));
      await this.d1.batch(statements);
    } catch (error) {
      console.error("request rollups: write failed; keeping them for the next flush", error);
      for (const { key, aggregate } of batch.values()) this.aggregateFor(key).merge(aggregate);
    }
  }

  private aggregateFor(key: Key): Aggregate {
    const id = `${key.bucket_start} ${key.method} ${key.status_class} ${key.route}`;
    let entry = this.pending.get(id);
    if (!entry) this.pending.set(id, (entry = { key, aggregate: new Aggregate() }));
    return entry.aggregate;
  }
}

/** The hour rows of the pending aggregates, and the day rows they add up to. */
function rowsOf(entries: Iterable<{ key: Key; aggregate: Aggregate }>): RequestRollupRow[] {
  const rows: RequestRollupRow[] = [];
  const days = new Map<string, { key: Key; aggregate: Aggregate }>();
  const toRow = (period: "hour" | "day", key: Key, a: Aggregate): RequestRollupRow => ({
    period, ...key, count: a.count, sum_ms: a.sum, min_ms: a.min, max_ms: a.max, histogram: a.storedHistogram(),
  });
  for (const { key, aggregate } of entries) {
    rows.push(toRow("hour", key, aggregate));
    const dayKey = { ...key, bucket_start: new Date(periodStart("day", Date.parse(key.bucket_start))).toISOString() };
    const id = `${dayKey.bucket_start} ${key.method} ${key.status_class} ${key.route}`;
    let day = days.get(id);
    if (!day) days.set(id, (day = { key: dayKey, aggregate: new Aggregate() }));
    day.aggregate.merge(aggregate);
  }
  for (const { key, aggregate } of days.values()) rows.push(toRow("day", key, aggregate));
  return rows;
}

const rollups = new WeakMap<Env, RequestRollups>();

/** This isolate's request rollups for these bindings (bindings are fixed for an isolate's life). */
export function requestRollupsFor(env: Env): RequestRollups {
  let found = rollups.get(env);
  if (!found) rollups.set(env, (found = new RequestRollups(env.DB)));
  return found;
}

const templates = new Map<string, string>();

/** Hono's `/devices/:device_id{[0-9]+}` → `/devices/{device_id}`, the form the OpenAPI document uses. */
export function routeTemplate(path: string): string {
  let template = templates.get(path);
  if (template === undefined) {
    template = path.replace(/:(\w+)(\{[^}]*\})?\??/g, "{$1}");
    if (template.length > 1) template = template.replace(/\/+$/, "");
    templates.set(path, template);
  }
  return template;
}
