import type { Config } from "../shared/config";
import { DAY_MS } from "../shared/rollups";

/** Rows one DELETE removes; a run stops after MAX_BATCHES of them and the next minute goes on. */
export const RETENTION_BATCH_ROWS = 2_000;
export const RETENTION_MAX_BATCHES = 10;

/** Abuse-guard windows are one minute long; an hour later nobody reads them. */
const REPORT_WINDOW_KEEP_MS = 3_600_000;

/** One analytics table and how old its rows may get. */
export interface RetainedTable {
  table: string;
  /** The row's time: when it was recorded, or where its rollup bucket starts. */
  column: string;
  /** Index prefixes to delete through, one pass each (the rollups' keys start with their period). */
  partitions?: string[];
  keepMs: (config: Config) => number;
}

const days = (n: number) => n * DAY_MS;
const analytics = (config: Config) => days(config.retention.analyticsDays);

/** Every analytics table the cron prunes (docs/analytics.md, "Retention"). */
export const RETAINED_TABLES: RetainedTable[] = [
  { table: "api_request_logs", column: "created_at", keepMs: (config) => days(config.retention.requestLogDays) },
  { table: "user_activities", column: "created_at", keepMs: analytics },
  { table: "device_state_history", column: "created_at", keepMs: analytics },
  { table: "job_outcomes", column: "created_at", keepMs: analytics },
  { table: "error_logs", column: "created_at", keepMs: analytics },
  { table: "request_rollups", column: "bucket_start", partitions: ["period = 'hour'", "period = 'day'"], keepMs: analytics },
  { table: "job_outcome_rollups", column: "bucket_start", partitions: ["period = 'hour'", "period = 'day'"], keepMs: analytics },
  { table: "error_rollups", column: "bucket_start", keepMs: analytics },
  { table: "error_report_windows", column: "window_start", keepMs: () => REPORT_WINDOW_KEEP_MS },
];

/**
 * Deletes the table's rows older than its retention (time < now − keep), oldest first, in batches
 * of RETENTION_BATCH_ROWS and at most RETENTION_MAX_BATCHES per call, so one run stays short
 * however far behind it is. Returns how many rows went.
 */
export async function pruneTable(d1: D1Database, retained: RetainedTable, config: Config, now: Date): Promise<number> {
  const cutoff = new Date(now.getTime() - retained.keepMs(config)).toISOString();
  let deleted = 0;
  let batches = 0;
  for (const partition of retained.partitions ?? ["true"]) {
    for (;;) {
      const { meta } = await d1.prepare(
        `DELETE FROM ${retained.table} WHERE rowid IN (
           SELECT rowid FROM ${retained.table} WHERE ${partition} AND ${retained.column} < ?1 ORDER BY ${retained.column} LIMIT ${RETENTION_BATCH_ROWS})`,
      ).bind(cutoff).run();
      deleted += meta.changes;
      batches++;
      if (meta.changes < RETENTION_BATCH_ROWS || batches >= RETENTION_MAX_BATCHES) break;
    }
    if (batches >= RETENTION_MAX_BATCHES) break;
  }
  return deleted;
}
