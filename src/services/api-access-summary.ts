import { classify } from "../shared/vocabulary";

const HOUR_MS = 3_600_000;
/** An hour is summarised once it ended this long ago, so the request log's late writes are in. */
export const API_ACCESS_SETTLE_MS = 2 * 60_000;
/** How many finished hours back the cron looks, so a few missed runs are caught up. */
export const API_ACCESS_CATCH_UP_HOURS = 6;

const { category, severity } = classify("api_access");

/**
 * One `api_access` event per user per hour, never one per request: the user's requests in that
 * hour, from the raw request log, with the number that failed and the distinct endpoints. The
 * insert skips users whose hour already has its row, so running it again (every minute) adds
 * nothing, and each row is written once, dated at the end of its hour.
 */
const SUMMARISE_HOUR = `
  INSERT INTO audit_logs (event_type, category, severity, description, user_id, event_metadata, created_at)
  SELECT 'api_access', ?3, ?4,
         count(*) || ' API requests in the hour from ' || ?1,
         r.user_id,
         json_object('user_id', r.user_id, 'hour_start', ?1, 'requests', count(*),
                     'failed', sum(CASE WHEN r.status_code >= 400 THEN 1 ELSE 0 END),
                     'endpoints', count(DISTINCT r.method || ' ' || r.endpoint)),
         ?2
  FROM api_request_logs r
  WHERE r.created_at >= ?1 AND r.created_at < ?2 AND r.user_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM audit_logs a
                    WHERE a.event_type = 'api_access' AND a.created_at = ?2 AND a.user_id = r.user_id)
  GROUP BY r.user_id`;

/**
 * Writes the `api_access` summaries of the last finished hours that do not have them yet. Reads the
 * raw request log in D1; when that log goes to Analytics Engine instead (REQUEST_LOG_AE), D1 holds
 * no requests and no summary is written (docs/audit.md).
 */
export async function summariseApiAccess(d1: D1Database, now: Date): Promise<number> {
  const lastFinished = Math.floor((now.getTime() - API_ACCESS_SETTLE_MS) / HOUR_MS) * HOUR_MS;
  const statements = [];
  for (let h = 1; h <= API_ACCESS_CATCH_UP_HOURS; h++) {
    const start = new Date(lastFinished - h * HOUR_MS).toISOString();
    const end = new Date(lastFinished - (h - 1) * HOUR_MS).toISOString();
    statements.push(d1.prepare(SUMMARISE_HOUR).bind(start, end, category, severity));
  }
  const results = await d1.batch(statements);
  return results.reduce((sum, r) => sum + r.meta.changes, 0);
}
