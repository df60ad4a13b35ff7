import { and, eq, gte, lt, sql } from "drizzle-orm";
import type { Db, Env } from "../env";
import type { Config } from "../shared/config";
import { apiRequestLogs, requestRollups } from "../db/schema";
import { DAY_MS, HOUR_MS, periodStart } from "../shared/rollups";

export interface RequestCountSources {
  /** How long raw request-log rows stay in D1 (REQUEST_LOG_RETENTION_DAYS). */
  requestLogDays: number;
  /** False when the raw rows go to Analytics Engine instead of D1: then only the rollups are in D1. */
  rawRowsInD1: boolean;
}

export const requestCountSourcesOf = (config: Config, env: Pick<Env, "REQUEST_LOG_AE">): RequestCountSources => ({
  requestLogDays: config.retention.requestLogDays,
  rawRowsInD1: !env.REQUEST_LOG_AE,
});

/**
 * API requests since `sinceMs`, service-wide. The raw request log is complete only for its
 * retention (and absent from D1 when it goes to Analytics Engine); before that, the hourly request
 * rollups, kept for the analytics retention, give the count. The two meet on an hour boundary so no
 * request is counted twice; the rollups' first hour is counted whole, so a window that starts inside
 * an hour beyond the raw retention includes that hour's earlier requests.
 */
export async function apiRequestCount(db: Db, sources: RequestCountSources, sinceMs: number, nowMs: number): Promise<number> {
  const rawFrom = sources.rawRowsInD1 ? nowMs - sources.requestLogDays * DAY_MS : Number.POSITIVE_INFINITY;
  const rawCount = async (fromMs: number) =>
    (await db.select({ n: sql<number>`count(*)` }).from(apiRequestLogs).where(gte(apiRequestLogs.createdAt, new Date(fromMs).toISOString())).get())?.n ?? 0;
  if (sinceMs >= rawFrom) return rawCount(sinceMs);
  // Raw rows are complete from the first hour boundary at or after the raw retention's cutoff.
  const boundary = Math.min(Number.isFinite(rawFrom) ? Math.ceil(rawFrom / HOUR_MS) * HOUR_MS : Number.POSITIVE_INFINITY, nowMs + HOUR_MS);
  const [rolled, raw] = await Promise.all([
    db.select({ n: sql<number>`coalesce(sum(${requestRollups.count}), 0)` }).from(requestRollups).where(and(
      eq(requestRollups.period, "hour"),
      gte(requestRollups.bucketStart, new Date(periodStart("hour", sinceMs)).toISOString()),
      lt(requestRollups.bucketStart, new Date(boundary).toISOString()),
    )).get(),
    Number.isFinite(rawFrom) ? rawCount(boundary) : Promise.resolve(0),
  ]);
  return (rolled?.n ?? 0) + raw;
}
