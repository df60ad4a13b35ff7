import { and, desc, eq, gte, sql } from "drizzle-orm";
import type { Db } from "../env";
import { deviceStateHistory } from "../db/schema";
import { Aggregate, HOUR_MS, coverWindow, type RollupWindow } from "../shared/rollups";
import { ERROR_CATEGORIES, ERROR_SEVERITIES } from "./analytics-errors";
import { JOB_OUTCOME_STATUSES } from "./analytics";
import type { DeviceRow } from "./devices";

const iso = (ms: number) => new Date(ms).toISOString();
const round = (value: number | null, digits = 2) => (value === null ? null : Math.round(value * 10 ** digits) / 10 ** digits);
const rate = (part: number, whole: number) => (whole ? Math.round((part / whole) * 10_000) / 10_000 : 0);

/** The WHERE clause selecting a window's hour and day rows (`bucket_start` of a period-keyed rollup). */
function windowRows(window: RollupWindow): { sql: string; params: string[] } {
  const hours = "(period = 'hour' AND bucket_start >= ? AND bucket_start < ?)";
  if (window.daysFrom === null) return { sql: hours, params: [iso(window.since), iso(window.hoursTo)] };
  return {
    sql: `(${hours} OR (period = 'day' AND bucket_start >= ? AND bucket_start <= ?))`,
    params: [iso(window.since), iso(window.hoursTo), iso(window.daysFrom), iso(window.until)],
  };
}

/** The window's histograms of one group as a single JSON array: one string to move, not one per row. */
const HISTOGRAMS = "'[' || group_concat(histogram) || ']' AS histograms";

const windowFields = (hours: number, window: RollupWindow) => ({ hours, since: iso(window.since), until: iso(window.until) });

// ---- api-performance ----------------------------------------------------------------------------

type RequestStats = ReturnType<typeof requestStats>;

class RequestAggregate extends Aggregate {
  clientErrors = 0;
  serverErrors = 0;
}

function requestStats(a: RequestAggregate) {
  const errors = a.clientErrors + a.serverErrors;
  return {
    request_count: a.count,
    error_count: errors,
    client_error_count: a.clientErrors,
    server_error_count: a.serverErrors,
    error_rate: rate(errors, a.count),
    client_error_rate: rate(a.clientErrors, a.count),
    server_error_rate: rate(a.serverErrors, a.count),
    avg_response_time_ms: round(a.mean),
    min_response_time_ms: a.count ? round(a.min) : null,
    max_response_time_ms: a.count ? round(a.max) : null,
    p50_response_time_ms: round(a.percentile(0.5)),
    p95_response_time_ms: round(a.percentile(0.95)),
    p99_response_time_ms: round(a.percentile(0.99)),
  };
}

/**
 * Per route template and method over the window: request and error counts (4xx and 5xx apart),
 * average, min, max and p50/p95/p99 response time, and the same over everything. Reads the hour and
 * day request rollups only: at most ~31 rows per route, method and status class, whatever the traffic.
 */
export async function apiPerformance(d1: D1Database, q: { hours: number; endpoint?: string; now: number }) {
  const window = coverWindow(q.hours, q.now);
  const rows = windowRows(window);
  const filter = q.endpoint ? " AND route = ?" : "";
  const { results } = await d1.prepare(
    `SELECT route, method, status_class, sum(count) AS count, sum(sum_ms) AS sum_ms, min(min_ms) AS min_ms, max(max_ms) AS max_ms, ${HISTOGRAMS}
     FROM request_rollups WHERE ${rows.sql}${filter} GROUP BY route, method, status_class`,
  ).bind(...rows.params, ...(q.endpoint ? [q.endpoint] : [])).all<{
    route: string; method: string; status_class: number; count: number; sum_ms: number; min_ms: number; max_ms: number; histograms: string;
  }>();
  const total = new RequestAggregate();
  const byEndpoint = new Map<string, { endpoint: string; method: string; aggregate: RequestAggregate }>();
  for (const row of results) {
    const id = `${row.method} ${row.route}`;
    let entry = byEndpoint.get(id);
    if (!entry) byEndpoint.set(id, (entry = { endpoint: row.route, method: row.method, aggregate: new RequestAggregate() }));
    for (const a of [entry.aggregate, total]) {
      a.mergeStored({ count: row.count, valued: row.count, sum: row.sum_ms, min: row.min_ms, max: row.max_ms, histograms: row.histograms });
      if (row.status_class === 4) a.clientErrors += row.count;
      if (row.status_class === 5) a.serverErrors += row.count;
    }
  }
  const endpoints: (RequestStats & { endpoint: string; method: string })[] = [...byEndpoint.values()]
    .map(({ endpoint, method, aggregate }) => ({ endpoint, method, ...requestStats(aggregate) }))
    .sort((a, b) => b.request_count - a.request_count || a.endpoint.localeCompare(b.endpoint) || a.method.localeCompare(b.method));
  return { ...windowFields(q.hours, window), endpoint: q.endpoint ?? null, totals: requestStats(total), endpoints };
}

// ---- job-outcomes -------------------------------------------------------------------------------

type Scope = "job" | "execution";

class OutcomeAggregate extends Aggregate {
  readonly byStatus = Object.fromEntries(JOB_OUTCOME_STATUSES.map((s) => [s, 0])) as Record<(typeof JOB_OUTCOME_STATUSES)[number], number>;
}

function outcomeStats(a: OutcomeAggregate) {
  return {
    total: a.count,
    by_status: { ...a.byStatus },
    success_rate: a.count ? rate(a.byStatus.completed, a.count) : null,
    avg_duration_ms: round(a.mean),
    p95_duration_ms: round(a.percentile(0.95)),
  };
}

const isOutcomeStatus = (status: string): status is (typeof JOB_OUTCOME_STATUSES)[number] =>
  (JOB_OUTCOME_STATUSES as readonly string[]).includes(status);

/**
 * Per job type: how jobs ended and how their device executions ended — counts by status, success
 * rate (completed / all), average and p95 duration — on the given sites (undefined: every site).
 * Reads the job-outcome rollups only.
 */
export async function jobOutcomeMetrics(d1: D1Database, q: { hours: number; jobType?: string; siteIds: string[] | undefined; now: number }) {
  const window = coverWindow(q.hours, q.now);
  const rows = windowRows(window);
  const filters = [rows.sql];
  const params: string[] = [...rows.params];
  if (q.jobType) {
    filters.push("job_type = ?");
    params.push(q.jobType);
  }
  if (q.siteIds) {
    // One JSON parameter: D1 binds at most 100, and a tenant-wide role reaches more sites than that.
    filters.push("site_id IN (SELECT value FROM json_each(?))");
    params.push(JSON.stringify(q.siteIds));
  }
  const { results } = q.siteIds?.length === 0 ? { results: [] } : await d1.prepare(
    `SELECT job_type, scope, status, sum(count) AS count, sum(timed_count) AS timed_count, sum(sum_duration_ms) AS sum_duration_ms,
            min(min_duration_ms) AS min_duration_ms, max(max_duration_ms) AS max_duration_ms, ${HISTOGRAMS}
     FROM job_outcome_rollups WHERE ${filters.join(" AND ")} GROUP BY job_type, scope, status`,
  ).bind(...params).all<{
    job_type: string; scope: Scope; status: string; count: number; timed_count: number; sum_duration_ms: number;
    min_duration_ms: number | null; max_duration_ms: number | null; histograms: string;
  }>();
  const fresh = () => ({ job: new OutcomeAggregate(), execution: new OutcomeAggregate() });
  const totals = fresh();
  const byType = new Map<string, ReturnType<typeof fresh>>();
  for (const row of results) {
    let entry = byType.get(row.job_type);
    if (!entry) byType.set(row.job_type, (entry = fresh()));
    for (const a of [entry[row.scope], totals[row.scope]]) {
      a.mergeStored({ count: row.count, valued: row.timed_count, sum: row.sum_duration_ms, min: row.min_duration_ms, max: row.max_duration_ms, histograms: row.histograms });
      if (isOutcomeStatus(row.status)) a.byStatus[row.status] += row.count;
    }
  }
  const jobTypes = [...byType.entries()]
    .map(([jobType, a]) => ({ job_type: jobType, jobs: outcomeStats(a.job), executions: outcomeStats(a.execution) }))
    .sort((a, b) => b.jobs.total + b.executions.total - (a.jobs.total + a.executions.total) || a.job_type.localeCompare(b.job_type));
  return {
    ...windowFields(q.hours, window),
    job_type: q.jobType ?? null,
    job_types: jobTypes,
    totals: { jobs: outcomeStats(totals.job), executions: outcomeStats(totals.execution) },
  };
}

// ---- error-trends -------------------------------------------------------------------------------

const zeroes = <K extends string>(keys: readonly K[]) => Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
const isCategory = (c: string): c is (typeof ERROR_CATEGORIES)[number] => (ERROR_CATEGORIES as readonly string[]).includes(c);
const isSeverity = (s: string): s is (typeof ERROR_SEVERITIES)[number] => (ERROR_SEVERITIES as readonly string[]).includes(s);

/**
 * Error occurrences (folded reports counted each time) by category × severity, and per hour, over
 * the window. Reads the hourly error rollups only: at most 169 hours × categories × severities.
 */
export async function errorTrends(d1: D1Database, q: { hours: number; category?: string; now: number }) {
  const window = coverWindow(q.hours, q.now);
  const { results } = await d1.prepare(
    `SELECT bucket_start, category, severity, count FROM error_rollups WHERE bucket_start >= ? AND bucket_start <= ?${q.category ? " AND category = ?" : ""}`,
  ).bind(iso(window.since), iso(window.until), ...(q.category ? [q.category] : [])).all<{ bucket_start: string; category: string; severity: string; count: number }>();
  const byCategory = zeroes(ERROR_CATEGORIES);
  const bySeverity = zeroes(ERROR_SEVERITIES);
  const cells = new Map<string, { category: string; severity: string; count: number }>();
  const hourly = new Map<string, { hour: string; count: number; by_severity: Record<(typeof ERROR_SEVERITIES)[number], number> }>();
  for (let h = window.since; h <= window.until; h += HOUR_MS) hourly.set(iso(h), { hour: iso(h), count: 0, by_severity: zeroes(ERROR_SEVERITIES) });
  let total = 0;
  for (const row of results) {
    total += row.count;
    if (isCategory(row.category)) byCategory[row.category] += row.count;
    const cell = cells.get(`${row.category} ${row.severity}`) ?? { category: row.category, severity: row.severity, count: 0 };
    cell.count += row.count;
    cells.set(`${row.category} ${row.severity}`, cell);
    const hour = hourly.get(row.bucket_start);
    if (hour) hour.count += row.count;
    if (isSeverity(row.severity)) {
      bySeverity[row.severity] += row.count;
      if (hour) hour.by_severity[row.severity] += row.count;
    }
  }
  return {
    ...windowFields(q.hours, window),
    category: q.category ?? null,
    total,
    by_category: byCategory,
    by_severity: bySeverity,
    by_category_and_severity: [...cells.values()].sort((a, b) => b.count - a.count || a.category.localeCompare(b.category) || a.severity.localeCompare(b.severity)),
    hourly: [...hourly.values()],
  };
}

// ---- device-state-history -----------------------------------------------------------------------

/**
 * The device's timeline over the last `hours`, newest first: presence transitions, lifecycle
 * changes and reported changes alike, each with who (changed_by, user_id) and why (reason, source).
 * One device's rows, read through its (device_id, created_at) index.
 */
export async function deviceStateTimeline(db: Db, device: DeviceRow, q: { hours: number; limit: number; offset: number; now: number }) {
  const since = iso(q.now - q.hours * HOUR_MS);
  const where = and(eq(deviceStateHistory.deviceId, device.deviceId), gte(deviceStateHistory.timestamp, since));
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(deviceStateHistory).where(where).orderBy(desc(deviceStateHistory.timestamp), desc(deviceStateHistory.id))
      .limit(q.limit).offset(q.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(deviceStateHistory).where(where).all(),
  ]);
  return {
    device_id: device.deviceId,
    site_id: device.siteId,
    hours: q.hours,
    since,
    until: iso(q.now),
    total,
    limit: q.limit,
    offset: q.offset,
    history: rows.map((r) => ({
      id: r.id,
      timestamp: r.timestamp,
      previous_state: r.previousState,
      new_state: r.newState,
      changed_by: r.changedBy,
      user_id: r.userId,
      source: r.source,
      reason: r.reason,
      extra_data: (r.extraData ?? null) as Record<string, unknown> | null,
    })),
  };
}
