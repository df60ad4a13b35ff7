import { z } from "@hono/zod-openapi";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { currentDate, workerClock } from "../../lib/clock";
import { auditStatistics } from "../../services/audit";
import { runAuditRetention } from "../../services/audit-retention";
import { auditBreakdowns, auditDeliveryStatus, auditEffectiveConfig, auditPerformance, auditRetentionStatus } from "../../services/audit-status";
import { apiRequestCount, requestCountSourcesOf } from "../../services/request-counts";
import { REPORT_TYPES } from "../../services/audit-reports";
import type { MountOptions } from "../mount";
import { PolicyView, RetentionPolicySchema } from "./retention";
import { Statistics, StatisticsQuery } from "./routes";
import { AUDIT_TAGS } from "./schemas";

const RetentionRun = z
  .object({
    trigger: z.enum(["cron", "optimize"]),
    started_at: z.string(),
    finished_at: z.string(),
    archived_events: z.number().int(),
    archive_objects: z.number().int(),
    deleted_events: z.number().int(),
    error: z.string().nullable(),
  })
  .openapi("AuditRetentionRun");

const Status = z
  .object({
    retention: PolicyView,
    last_run: RetentionRun.nullable().openapi({ description: "The latest retention run that archived or deleted something, failed, or was asked for; null when none in the last 30 days" }),
    events: z.object({
      total: z.number().int(),
      archived: z.number().int(),
      not_archived: z.number().int(),
      due_for_archive: z.number().int().nullable().openapi({ description: "Not archived although older than archive_after_days: what the next runs will archive (null: archiving off)" }),
      due_for_deletion: z.number().int().nullable().openapi({ description: "Older than retention_days and deletable now (null: no policy)" }),
    }),
    archives: z.object({
      count: z.number().int(), events: z.number().int(), bytes: z.number().int(),
      oldest_day: z.string().nullable(), newest_day: z.string().nullable(),
    }),
    stream: z.object({
      subscribers: z.number().int().openapi({ description: "Open `GET /audit/events/stream` connections" }),
    }),
    deliveries: z.object({
      pending_retry: z.number().int().openapi({ description: "Alert and integration notifications whose latest try failed and that will be tried again" }),
      failed_last_day: z.number().int().openapi({ description: "Notifications given up on (every try failed) in the last 24 hours" }),
    }),
    generated_at: z.string(),
  })
  .openapi("AuditStatus");

const EffectiveConfig = z
  .object({
    retention: PolicyView,
    retention_run: z.object({
      schedule: z.string(),
      archive_object_max_events: z.number().int(),
      archive_object_max_bytes: z.number().int(),
      archive_max_objects_per_run: z.number().int(),
      delete_batch_rows: z.number().int(),
      delete_max_batches_per_run: z.number().int(),
      run_records_kept_days: z.number().int(),
    }),
    export: z.object({ formats: z.array(z.string()), fields: z.array(z.string()), page_rows: z.number().int() }),
    reports: z.object({ types: z.array(z.enum(REPORT_TYPES)), top_n: z.number().int() }),
    events: z.object({ page_max_bytes: z.number().int(), custom_event_metadata_max_bytes: z.number().int(), custom_event_description_max_chars: z.number().int() }),
    request_log: z.object({
      enabled: z.boolean(),
      sink: z.enum(["d1", "analytics_engine"]),
      raw_retention_days: z.number().int(),
      rollup_retention_days: z.number().int(),
    }),
  })
  .openapi("AuditConfig");

const Performance = z
  .object({
    write_rate: z.object({
      last_hour: z.object({ events: z.number().int(), per_minute: z.number() }),
      last_day: z.object({ events: z.number().int(), per_minute: z.number() }),
    }),
    query_latency_ms: z.object({
      newest_page: z.number(), count_last_day: z.number(), by_category_last_day: z.number(), oldest_unarchived: z.number(),
    }).openapi({ description: "Each query run once on this request, one after the other, timed as the Worker saw it (round trip to D1 included)" }),
    table: z.object({
      rows: z.number().int(),
      oldest_event_at: z.string().nullable(),
      newest_event_at: z.string().nullable(),
      database_bytes: z.number().int().nullable().openapi({ description: "The whole D1 database as D1 reports it (D1 gives no per-table size)" }),
    }),
    generated_at: z.string(),
  })
  .openapi("AuditPerformance");

const DetailedStatistics = z
  .object({
    statistics: Statistics.shape.statistics.extend({
      by_site: z.array(z.object({ site_id: z.string().nullable(), events: z.number().int() }))
        .openapi({ description: "Events per site, most first; site_id null for events of no site" }),
      by_hour: z.array(z.object({ hour: z.string().openapi({ example: "2026-01-31T14:00:00Z" }), events: z.number().int() }))
        .openapi({ description: "Events per UTC hour, oldest first, hours without events left out" }),
    }),
    generated_at: z.string(),
  })
  .openapi("AuditDetailedStatistics");

const Optimized = z
  .object({
    policy: RetentionPolicySchema.nullable(),
    run: RetentionRun.nullable().openapi({ description: "What the run did; null when no policy is set (nothing may be pruned)" }),
    events_remaining: z.number().int(),
  })
  .openapi("AuditOptimizeResult");

export function auditStatusRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/status", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "The audit trail's retention and delivery state (administrators)",
      description: "The retention policy, the latest retention run and its result, how many events are archived, waiting to be archived and deletable now, and the archives written; the open live-stream subscribers, and alert and integration notifications waiting for a retry or given up on in the last day. Every figure is counted on this request.",
      responses: { 200: jsonResponse(Status, "Status") },
    }),
    async (c) => {
      const now = workerClock.now();
      const [retention, live] = await Promise.all([auditRetentionStatus(c.env, c.var.db, now), auditDeliveryStatus(c.env, c.var.db, now)]);
      return c.json({ ...retention, ...live, generated_at: currentDate().toISOString() }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/config", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "The audit trail's effective settings (administrators)",
      description: "The retention policy, the retention run's bounds, the export, report and event limits, and the request log's settings. Secrets are never shown: `retention.encryption_key` only says whether the archive key is usable.",
      responses: { 200: jsonResponse(EffectiveConfig, "Settings") },
    }),
    async (c) => c.json(await auditEffectiveConfig(c.env, c.var.db, c.var.config), 200),
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/performance", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "Audit write rate, query latencies and table size (administrators)",
      description: "Events written in the last hour and day, the latency of four typical audit queries measured on this request, and the table's row count and time span.",
      responses: { 200: jsonResponse(Performance, "Performance") },
    }),
    async (c) => c.json({ ...(await auditPerformance(c.env, c.var.db, workerClock.now())), generated_at: currentDate().toISOString() }, 200),
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/statistics/detailed", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "Audit statistics with per-site and per-hour breakdowns (administrators)",
      description: "The statistics of `GET /audit/statistics` over every event (an administrator's view), plus events per site and per UTC hour over `time_period_hours`.",
      request: { query: StatisticsQuery },
      responses: { 200: jsonResponse(DetailedStatistics, "Statistics") },
    }),
    async (c) => {
      const { time_period_hours } = c.req.valid("query");
      const now = workerClock.now();
      const sinceMs = now - time_period_hours * 3_600_000;
      const since = new Date(sinceMs).toISOString();
      const [stats, apiAccessCount, breakdowns] = await Promise.all([
        auditStatistics(c.var.db, since),
        apiRequestCount(c.var.db, requestCountSourcesOf(c.var.config, c.env), sinceMs, now),
        auditBreakdowns(c.var.db, since),
      ]);
      return c.json({
        statistics: { ...stats, api_access_count: apiAccessCount, time_period_hours, since, ...breakdowns },
        generated_at: currentDate().toISOString(),
      }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/optimize", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "Run the audit retention now (administrators)",
      description: "One retention run, as the minute cron does it: archives what the policy says is due and deletes what it allows, within the same per-run bounds, and reports what it did (also recorded as the latest run). Without a policy nothing is pruned and `run` is null. A run that failed part-way reports its error and keeps what it did.",
      responses: { 200: jsonResponse(Optimized, "What the run did") },
    }),
    async (c) => {
      const run = await runAuditRetention(c.env, c.var.db, currentDate(), "optimize");
      const status = await auditRetentionStatus(c.env, c.var.db, workerClock.now());
      return c.json({ policy: status.retention.policy, run, events_remaining: status.events.total }, 200);
    },
  );

  return app;
}
