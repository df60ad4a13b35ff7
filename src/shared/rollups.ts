/**
 * Rollups: additive aggregates the metrics queries read instead of raw rows, shared by the Worker
 * (request rollups, reported job outcomes, errors) and the site hubs (job outcomes they record).
 *
 * Each aggregate keeps count, sum, min, max and a latency histogram with fixed log-scale buckets,
 * so aggregates of any number of rows merge by adding them up, in memory or in D1 (an upsert that
 * adds). Every write goes into an hour row and a day row; a query window is covered by at most
 * ~23 hour rows and 8 day rows per key, whatever the traffic (see `coverWindow`).
 */

/** Bucket i ≥ 1 holds values in (FIRST·G^(i−1), FIRST·G^i]; bucket 0 holds [0, FIRST]. */
export const HISTOGRAM_GROWTH = 1.1;
export const HISTOGRAM_FIRST_BOUND_MS = 0.1;
/** ≈ 10 days in ms; anything longer shares the last bucket (max stays exact). */
export const HISTOGRAM_LAST_BUCKET = 240;
/**
 * A percentile read from the histogram is the geometric middle of its bucket, so it is within
 * √G − 1 (4.9 %) of the exact nearest-rank value, and never outside the exact min and max.
 */
export const HISTOGRAM_RELATIVE_ERROR = Math.sqrt(HISTOGRAM_GROWTH) - 1;

const LOG_GROWTH = Math.log(HISTOGRAM_GROWTH);

export function histogramBucket(ms: number): number {
  if (!(ms > HISTOGRAM_FIRST_BOUND_MS)) return 0;
  return Math.min(HISTOGRAM_LAST_BUCKET, Math.max(1, Math.ceil(Math.log(ms / HISTOGRAM_FIRST_BOUND_MS) / LOG_GROWTH)));
}

const representative = (bucket: number) => (bucket === 0 ? 0 : HISTOGRAM_FIRST_BOUND_MS * HISTOGRAM_GROWTH ** (bucket - 0.5));

/** A histogram as stored: JSON object of bucket index → count. */
export type StoredHistogram = Record<string, number>;

/** count, sum, min, max and histogram of a set of values (durations in ms); merges by adding. */
export class Aggregate {
  /** Rows counted, with or without a value. */
  count = 0;
  /** Rows that carried a value (the others count, but not towards sum, min, max and histogram). */
  valued = 0;
  sum = 0;
  min = Number.POSITIVE_INFINITY;
  max = Number.NEGATIVE_INFINITY;
  readonly histogram = new Map<number, number>();

  add(value: number | null, rows = 1) {
    this.count += rows;
    if (value === null) return;
    this.valued += rows;
    this.sum += value * rows;
    this.min = Math.min(this.min, value);
    this.max = Math.max(this.max, value);
    const bucket = histogramBucket(value);
    this.histogram.set(bucket, (this.histogram.get(bucket) ?? 0) + rows);
  }

  merge(other: { count: number; valued: number; sum: number; min: number | null; max: number | null; histogram: Iterable<[number, number]> }) {
    this.count += other.count;
    this.valued += other.valued;
    this.sum += other.sum;
    if (other.min !== null) this.min = Math.min(this.min, other.min);
    if (other.max !== null) this.max = Math.max(this.max, other.max);
    for (const [bucket, n] of other.histogram) this.histogram.set(bucket, (this.histogram.get(bucket) ?? 0) + n);
  }

  /**
   * Adds stored rows already summed by SQL: their count, valued count, sum, min and max, and their
   * histograms as one JSON array (`'[' || group_concat(histogram) || ']'`), which moves far less
   * than a row per histogram would.
   */
  mergeStored(rows: { count: number; valued: number; sum: number; min: number | null; max: number | null; histograms: string }) {
    this.count += rows.count;
    this.valued += rows.valued;
    this.sum += rows.sum;
    if (rows.min !== null) this.min = Math.min(this.min, rows.min);
    if (rows.max !== null) this.max = Math.max(this.max, rows.max);
    for (const stored of JSON.parse(rows.histograms) as StoredHistogram[]) {
      for (const key in stored) {
        const bucket = Number(key);
        this.histogram.set(bucket, (this.histogram.get(bucket) ?? 0) + stored[key]);
      }
    }
  }

  storedHistogram(): StoredHistogram {
    return Object.fromEntries([...this.histogram].sort((a, b) => a[0] - b[0]).map(([bucket, n]) => [String(bucket), n]));
  }

  get mean(): number | null {
    return this.valued ? this.sum / this.valued : null;
  }

  /** Nearest-rank percentile (0 < p ≤ 1) within HISTOGRAM_RELATIVE_ERROR; null without values. */
  percentile(p: number): number | null {
    if (!this.valued) return null;
    const rank = Math.max(1, Math.ceil(p * this.valued));
    let seen = 0;
    for (const [bucket, n] of [...this.histogram].sort((a, b) => a[0] - b[0])) {
      seen += n;
      if (seen >= rank) return Math.min(this.max, Math.max(this.min, representative(bucket)));
    }
    return this.max;
  }
}

// ---- time buckets -------------------------------------------------------------------------------

export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;
export type Period = "hour" | "day";

export const periodStart = (period: Period, ms: number) => {
  const size = period === "hour" ? HOUR_MS : DAY_MS;
  return Math.floor(ms / size) * size;
};

export interface RollupWindow {
  /** The window is [since, until]: `hours` whole hours before the current hour, plus the current hour so far. */
  since: number;
  until: number;
  /** Hour rows with since ≤ bucket_start < hoursTo. */
  hoursTo: number;
  /** Day rows with daysFrom ≤ bucket_start ≤ until, or none when the window is within one day. */
  daysFrom: number | null;
}

/**
 * The rows that cover a window of `hours` back from `now`: hour rows from the window's start to the
 * next midnight, then day rows (today's included, which holds everything flushed so far). A window
 * starts on the hour, because that is the finest row kept; so `hours=1` at 10:20 covers 09:00–10:20.
 */
export function coverWindow(hours: number, now: number): RollupWindow {
  const since = periodStart("hour", now) - hours * HOUR_MS;
  const nextMidnight = Math.ceil(since / DAY_MS) * DAY_MS;
  if (nextMidnight > now) return { since, until: now, hoursTo: now + 1, daysFrom: null };
  return { since, until: now, hoursTo: nextMidnight, daysFrom: nextMidnight };
}

// ---- additive upserts ---------------------------------------------------------------------------

const field = (name: string) => `json_extract(value, '$.${name}')`;

/** The stored histogram plus the incoming one, bucket by bucket. */
const mergedHistogram = (table: string) =>
  `(SELECT json_group_object(k, n) FROM (SELECT key AS k, sum(value) AS n FROM (
     SELECT key, value FROM json_each(${table}.histogram) UNION ALL SELECT key, value FROM json_each(excluded.histogram)
   ) GROUP BY key))`;

/** One request rollup row as written: the JSON objects bound as `?1` to REQUEST_ROLLUP_UPSERT. */
export interface RequestRollupRow {
  period: Period;
  bucket_start: string;
  route: string;
  method: string;
  status_class: number;
  count: number;
  sum_ms: number;
  min_ms: number;
  max_ms: number;
  histogram: StoredHistogram;
}

/** Adds a JSON array of RequestRollupRow (`?1`) to request_rollups. */
export const REQUEST_ROLLUP_UPSERT = `
  INSERT INTO request_rollups (period, bucket_start, route, method, status_class, count, sum_ms, min_ms, max_ms, histogram, flushes)
  SELECT ${field("period")}, ${field("bucket_start")}, ${field("route")}, ${field("method")}, ${field("status_class")}, ${field("count")},
         ${field("sum_ms")}, ${field("min_ms")}, ${field("max_ms")}, ${field("histogram")}, 1
  FROM json_each(?1) WHERE true
  ON CONFLICT (period, bucket_start, route, method, status_class) DO UPDATE SET
    count = count + excluded.count, sum_ms = sum_ms + excluded.sum_ms,
    min_ms = min(min_ms, excluded.min_ms), max_ms = max(max_ms, excluded.max_ms),
    histogram = ${mergedHistogram("request_rollups")}, flushes = flushes + 1`;

export interface JobOutcomeRollupRow {
  period: Period;
  bucket_start: string;
  site_id: string;
  job_type: string;
  scope: "job" | "execution";
  status: string;
  count: number;
  timed_count: number;
  sum_duration_ms: number;
  min_duration_ms: number | null;
  max_duration_ms: number | null;
  histogram: StoredHistogram;
}

/** Adds a JSON array of JobOutcomeRollupRow (`?1`) to job_outcome_rollups. */
export const JOB_OUTCOME_ROLLUP_UPSERT = `
  INSERT INTO job_outcome_rollups (period, bucket_start, site_id, job_type, scope, status, count, timed_count, sum_duration_ms,
                                   min_duration_ms, max_duration_ms, histogram)
  SELECT ${field("period")}, ${field("bucket_start")}, ${field("site_id")}, ${field("job_type")}, ${field("scope")}, ${field("status")},
         ${field("count")}, ${field("timed_count")}, ${field("sum_duration_ms")}, ${field("min_duration_ms")}, ${field("max_duration_ms")},
         ${field("histogram")}
  FROM json_each(?1) WHERE true
  ON CONFLICT (period, bucket_start, site_id, job_type, scope, status) DO UPDATE SET
    count = count + excluded.count, timed_count = timed_count + excluded.timed_count,
    sum_duration_ms = sum_duration_ms + excluded.sum_duration_ms,
    min_duration_ms = min(coalesce(min_duration_ms, excluded.min_duration_ms), coalesce(excluded.min_duration_ms, min_duration_ms)),
    max_duration_ms = max(coalesce(max_duration_ms, excluded.max_duration_ms), coalesce(excluded.max_duration_ms, max_duration_ms)),
    histogram = ${mergedHistogram("job_outcome_rollups")}`;

/** A finished job or execution, as the rollups count it. */
export interface JobOutcomeFact {
  siteId: string;
  jobType: string;
  scope: "job" | "execution";
  status: string;
  durationMs: number | null;
  at: number;
}

/** The hour and day rows a set of job outcomes adds, merged per key. */
export function jobOutcomeRollupRows(facts: JobOutcomeFact[]): JobOutcomeRollupRow[] {
  const byKey = new Map<string, { key: Omit<JobOutcomeRollupRow, "count" | "timed_count" | "sum_duration_ms" | "min_duration_ms" | "max_duration_ms" | "histogram">; aggregate: Aggregate }>();
  for (const fact of facts) {
    for (const period of ["hour", "day"] as const) {
      const bucketStart = new Date(periodStart(period, fact.at)).toISOString();
      const id = JSON.stringify([period, bucketStart, fact.siteId, fact.jobType, fact.scope, fact.status]);
      let entry = byKey.get(id);
      if (!entry) {
        entry = { key: { period, bucket_start: bucketStart, site_id: fact.siteId, job_type: fact.jobType, scope: fact.scope, status: fact.status }, aggregate: new Aggregate() };
        byKey.set(id, entry);
      }
      entry.aggregate.add(fact.durationMs);
    }
  }
  return [...byKey.values()].map(({ key, aggregate: a }) => ({
    ...key,
    count: a.count,
    timed_count: a.valued,
    sum_duration_ms: a.sum,
    min_duration_ms: a.valued ? a.min : null,
    max_duration_ms: a.valued ? a.max : null,
    histogram: a.storedHistogram(),
  }));
}

/** Splits rows into JSON chunks of at most `maxBytes` each (one statement per chunk). */
export function jsonChunks(items: unknown[], maxBytes = 256 * 1024): string[] {
  const out: string[] = [];
  let current: string[] = [];
  let size = 0;
  for (const item of items) {
    const text = JSON.stringify(item);
    if (current.length && size + text.length > maxBytes) {
      out.push(`[${current.join(",")}]`);
      current = [];
      size = 0;
    }
    current.push(text);
    size += text.length + 1;
  }
  if (current.length) out.push(`[${current.join(",")}]`);
  return out;
}
