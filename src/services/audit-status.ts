import { and, asc, desc, gte, isNotNull, lt, sql } from "drizzle-orm";
import type { Db, Env } from "../env";
import { auditAlertDeliveries, auditArchives, auditLogs } from "../db/schema";
import { auditStream } from "../hub/audit-stream";
import { DAY_MS, HOUR_MS } from "../shared/rollups";
import type { Config } from "../shared/config";
import {
  ARCHIVE_MAX_OBJECTS_PER_RUN, ARCHIVE_OBJECT_MAX_BYTES, ARCHIVE_OBJECT_MAX_EVENTS, AUDIT_DELETE_BATCH_ROWS, AUDIT_DELETE_MAX_BATCHES,
  RETENTION_RUN_KEEP_DAYS, archiveKeyState, getRetentionPolicy, lastRetentionRun,
} from "./audit-retention";
import { AUDIT_EXPORT_FIELDS, EXPORT_PAGE_ROWS } from "./audit-export";
import { REPORT_TOP_N, REPORT_TYPES } from "./audit-reports";
import { AUDIT_PAGE_MAX_BYTES, CUSTOM_EVENT_DESCRIPTION_MAX_CHARS, CUSTOM_EVENT_METADATA_MAX_BYTES } from "./audit";

const count = sql<number>`count(*)`;
const isoAgo = (now: number, ms: number) => new Date(now - ms).toISOString();

/** The retention policy and how far the trail is from what it asks: every figure counted now. */
export async function auditRetentionStatus(env: Env, db: Db, now: number) {
  const policy = await getRetentionPolicy(db);
  const archiving = policy?.archive_after_days != null;
  const countWhere = async (where: ReturnType<typeof and>) => (await db.select({ n: count }).from(auditLogs).where(where).get())?.n ?? 0;
  const [total, archived, dueForArchive, dueForDeletion, archives, lastRun] = await Promise.all([
    countWhere(undefined),
    countWhere(isNotNull(auditLogs.archivedAt)),
    archiving ? countWhere(and(sql`${auditLogs.archivedAt} IS NULL`, lt(auditLogs.createdAt, isoAgo(now, policy!.archive_after_days! * DAY_MS)))) : null,
    policy ? countWhere(and(lt(auditLogs.createdAt, isoAgo(now, policy.retention_days * DAY_MS)), archiving ? isNotNull(auditLogs.archivedAt) : undefined)) : null,
    db.select({
      count, events: sql<number>`coalesce(sum(${auditArchives.events}), 0)`, bytes: sql<number>`coalesce(sum(${auditArchives.bytes}), 0)`,
      oldest: sql<string | null>`min(${auditArchives.day})`, newest: sql<string | null>`max(${auditArchives.day})`,
    }).from(auditArchives).get(),
    lastRetentionRun(db),
  ]);
  return {
    retention: { policy, encryption_key: archiveKeyState(env) },
    last_run: lastRun,
    events: { total, archived, not_archived: total - archived, due_for_archive: dueForArchive, due_for_deletion: dueForDeletion },
    archives: {
      count: archives?.count ?? 0, events: archives?.events ?? 0, bytes: archives?.bytes ?? 0,
      oldest_day: archives?.oldest ?? null, newest_day: archives?.newest ?? null,
    },
  };
}

/**
 * The live side of the trail: open stream subscribers (asked of the AuditStream object) and alert
 * or integration notifications whose latest try left them waiting for a retry, or failed for good
 * in the last day.
 */
export async function auditDeliveryStatus(env: Env, db: Db, now: number) {
  const latestTry = sql`${auditAlertDeliveries.id} = (SELECT max(d.id) FROM audit_alert_deliveries d
    WHERE d.rule_id = ${auditAlertDeliveries.ruleId} AND d.firing_id = ${auditAlertDeliveries.firingId} AND d.channel = ${auditAlertDeliveries.channel})`;
  const [subscribers, pending, failed] = await Promise.all([
    auditStream(env).subscriberCount(),
    db.select({ n: count }).from(auditAlertDeliveries).where(and(sql`${auditAlertDeliveries.outcome} = 'retrying'`, latestTry)).get(),
    db.select({ n: count }).from(auditAlertDeliveries)
      .where(and(sql`${auditAlertDeliveries.outcome} = 'failed'`, gte(auditAlertDeliveries.createdAt, isoAgo(now, DAY_MS)))).get(),
  ]);
  return { stream: { subscribers }, deliveries: { pending_retry: pending?.n ?? 0, failed_last_day: failed?.n ?? 0 } };
}

/** Runs `query` and says how long it took, in milliseconds, as this request saw it. */
async function timed(query: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await query();
  return Math.round((performance.now() - started) * 100) / 100;
}

/** Write rates, the latency of typical reads measured on this request, and the table's size. */
export async function auditPerformance(env: Env, db: Db, now: number) {
  const since = (ms: number) => db.select({ n: count }).from(auditLogs).where(gte(auditLogs.createdAt, isoAgo(now, ms))).get();
  const [lastHour, lastDay, table] = await Promise.all([
    since(HOUR_MS),
    since(DAY_MS),
    env.DB.prepare("SELECT count(*) AS n, min(created_at) AS oldest, max(created_at) AS newest FROM audit_logs").all<{ n: number; oldest: string | null; newest: string | null }>(),
  ]);
  // One after the other, so each measures its own query rather than a share of a parallel batch.
  const latencies = {
    newest_page: await timed(() => db.select().from(auditLogs).orderBy(desc(auditLogs.createdAt), desc(auditLogs.id)).limit(100).all()),
    count_last_day: await timed(() => since(DAY_MS)),
    by_category_last_day: await timed(() => db.select({ category: auditLogs.category, n: count }).from(auditLogs)
      .where(gte(auditLogs.createdAt, isoAgo(now, DAY_MS))).groupBy(auditLogs.category).all()),
    oldest_unarchived: await timed(() => db.select({ id: auditLogs.id }).from(auditLogs).where(sql`${auditLogs.archivedAt} IS NULL`)
      .orderBy(asc(auditLogs.createdAt)).limit(1).all()),
  };
  const perMinute = (n: number, minutes: number) => Math.round((n / minutes) * 1000) / 1000;
  const row = table.results[0];
  return {
    write_rate: {
      last_hour: { events: lastHour?.n ?? 0, per_minute: perMinute(lastHour?.n ?? 0, 60) },
      last_day: { events: lastDay?.n ?? 0, per_minute: perMinute(lastDay?.n ?? 0, 1440) },
    },
    query_latency_ms: latencies,
    table: {
      rows: row?.n ?? 0,
      oldest_event_at: row?.oldest ?? null,
      newest_event_at: row?.newest ?? null,
      database_bytes: table.meta.size_after ?? null,
    },
  };
}

/** Events per site and per hour since `sinceIso`, every site and hour that has any. */
export async function auditBreakdowns(db: Db, sinceIso: string) {
  const hour = sql<string>`substr(${auditLogs.createdAt}, 1, 13) || ':00:00Z'`;
  const [bySite, byHour] = await Promise.all([
    db.select({ site_id: auditLogs.siteId, events: count }).from(auditLogs).where(gte(auditLogs.createdAt, sinceIso))
      .groupBy(auditLogs.siteId).orderBy(desc(count), asc(auditLogs.siteId)).all(),
    db.select({ hour, events: count }).from(auditLogs).where(gte(auditLogs.createdAt, sinceIso)).groupBy(hour).orderBy(asc(hour)).all(),
  ]);
  return { by_site: bySite, by_hour: byHour };
}

/** The settings in force for the audit trail. Secrets are reported only as whether they are usable. */
export async function auditEffectiveConfig(env: Env, db: Db, config: Config) {
  return {
    retention: { policy: await getRetentionPolicy(db), encryption_key: archiveKeyState(env) },
    retention_run: {
      schedule: "every minute (the Worker's cron)",
      archive_object_max_events: ARCHIVE_OBJECT_MAX_EVENTS,
      archive_object_max_bytes: ARCHIVE_OBJECT_MAX_BYTES,
      archive_max_objects_per_run: ARCHIVE_MAX_OBJECTS_PER_RUN,
      delete_batch_rows: AUDIT_DELETE_BATCH_ROWS,
      delete_max_batches_per_run: AUDIT_DELETE_MAX_BATCHES,
      run_records_kept_days: RETENTION_RUN_KEEP_DAYS,
    },
    export: { formats: ["json", "ndjson", "csv"], fields: AUDIT_EXPORT_FIELDS.map((f) => f.name), page_rows: EXPORT_PAGE_ROWS },
    reports: { types: [...REPORT_TYPES], top_n: REPORT_TOP_N },
    events: {
      page_max_bytes: AUDIT_PAGE_MAX_BYTES,
      custom_event_metadata_max_bytes: CUSTOM_EVENT_METADATA_MAX_BYTES,
      custom_event_description_max_chars: CUSTOM_EVENT_DESCRIPTION_MAX_CHARS,
    },
    request_log: {
      enabled: config.requestLogEnabled && config.analyticsEnabled,
      sink: env.REQUEST_LOG_AE ? ("analytics_engine" as const) : ("d1" as const),
      raw_retention_days: config.retention.requestLogDays,
      rollup_retention_days: config.retention.analyticsDays,
    },
  };
}
