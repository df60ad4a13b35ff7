import { z } from "@hono/zod-openapi";
import { lineText, proseText } from "../../lib/text";
import { and, gte, eq, sql } from "drizzle-orm";
import { apiRequestLogs } from "../../db/schema";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { unprocessable } from "../../lib/errors";
import { parseDuration } from "../../shared/time";
import { accessibleSiteIds } from "../../services/access";
import { recordCustomEvent } from "../../services/custom-events";
import {
  AUDIT_PAGE_MAX_BYTES, CUSTOM_EVENT_DESCRIPTION_MAX_CHARS, CUSTOM_EVENT_METADATA_MAX_BYTES, auditStatistics, listAuditEvents,
  toAuditEventView, utf8Bytes,
} from "../../services/audit";
import { CATEGORIES } from "../../shared/vocabulary";
import type { MountOptions } from "../mount";
import { currentDate, workerClock } from "../../lib/clock";
import { apiRequestCount, requestCountSourcesOf } from "../../services/request-counts";

const TAGS = ["Audit"];
const SEVERITIES = ["info", "warning", "error", "critical"] as const;

const AuditEvent = z
  .object({
    id: z.number().int(),
    event_type: z.string(),
    category: z.string(),
    severity: z.enum(SEVERITIES),
    description: z.string().nullable(),
    user_id: z.number().int().nullable(),
    job_id: z.string().nullable(),
    device_id: z.string().nullable(),
    site_id: z.string().nullable(),
    event_metadata: z.record(z.string(), z.unknown()).openapi({ description: "What the event carries (the `metadata` of a recorded custom event)" }),
    ip_address: z.string().nullable(),
    user_agent: z.string().nullable(),
    session_id: z.string().nullable(),
    created_at: z.string(),
    timestamp: z.string().openapi({ description: "Same as created_at" }),
    prev_hash: z.string().nullable().openapi({ description: "The hash of the previous event of the same chain (its site's, or the service-wide chain), or 64 zeros for a chain's first event; null until the event is sealed (seconds after it is recorded). See docs/audit.md" }),
    hash: z.string().nullable().openapi({ description: "SHA-256 (hex) over `prev_hash` and the event's canonical form; null until sealed" }),
  })
  .openapi("AuditEvent");

const EventsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  offset: z.coerce.number().int().min(0).default(0),
  category: z.enum(CATEGORIES).optional(),
  event_type: lineText().max(64).optional(),
  severity: z.enum(SEVERITIES).optional(),
  since: z.string().max(16).optional().openapi({ description: "A duration back from now: 30m, 24h, 7d, 2w" }),
  "metadata.user_id": z.coerce.number().int().positive().optional().openapi({ description: "Events whose metadata names this user (`event_metadata.user_id`)" }),
  user_id: z.coerce.number().int().positive().optional().openapi({ description: "Events whose `user_id` is this user (who acted, or whom the event is about)" }),
});

const EventsPage = z
  .object({
    events: z.array(AuditEvent),
    total: z.number().int().openapi({ description: "Events matching the filters, across all pages" }),
    limit: z.number().int(),
    offset: z.number().int(),
    truncated: z.boolean().openapi({
      description: `True when the page stopped before \`limit\` events because the response body would have passed ${AUDIT_PAGE_MAX_BYTES / (1024 * 1024)} MB; continue from \`next_offset\``,
    }),
    next_offset: z.number().int().nullable().openapi({ description: "The offset of the next page, or null when this page holds the last matching event" }),
  })
  .openapi("AuditEventPage");

export const StatisticsQuery = z.object({ time_period_hours: z.coerce.number().int().min(1).max(8760).default(24) });

export const Statistics = z
  .object({
    statistics: z.object({
      total_events: z.number().int(),
      events_by_type: z.record(z.string(), z.number().int()),
      events_by_category: z.record(z.string(), z.number().int()),
      events_by_severity: z.record(z.string(), z.number().int()),
      api_access_count: z.number().int().openapi({ description: "API requests in the period (see the operation's description for the sources)" }),
      time_period_hours: z.number().int(),
      since: z.string(),
      recent_activity: z.object({ last_hour: z.number().int(), last_24_hours: z.number().int(), last_week: z.number().int() }),
    }),
    generated_at: z.string(),
  })
  .openapi("AuditStatistics");

const CustomEventBody = z
  .object({
    event_type: z.string().min(1).max(64).regex(/^[a-z][a-z0-9_.]*$/, "lower_snake_case"),
    category: z.enum(CATEGORIES).optional(),
    description: proseText().max(CUSTOM_EVENT_DESCRIPTION_MAX_CHARS).optional(),
    metadata: z.record(z.string(), z.unknown()).optional()
      .refine((m) => m === undefined || utf8Bytes(JSON.stringify(m)) <= CUSTOM_EVENT_METADATA_MAX_BYTES, `metadata is limited to ${CUSTOM_EVENT_METADATA_MAX_BYTES / 1024} KB as JSON`)
      .openapi({ description: `Any JSON object, at most ${CUSTOM_EVENT_METADATA_MAX_BYTES / 1024} KB serialised (UTF-8); listed back as \`event_metadata\`` }),
    severity: z.enum(SEVERITIES).optional().openapi({ description: "Default from the event type's catalogue entry; `critical` is reserved to administrators" }),
    site_id: lineText().max(64).optional(),
    device_id: lineText().max(64).optional(),
    session_id: lineText().max(128).optional(),
  })
  .openapi("CustomAuditEvent");

export function auditRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/events", auth: "user", deprecated, tags: TAGS,
      summary: "Audit events, newest first",
      description: `Administrators read every event; other users the events of sites they can access and their own. A page holds at most \`limit\` events and stops before its body would pass ${AUDIT_PAGE_MAX_BYTES / (1024 * 1024)} MB (\`truncated\`), though it always holds at least one event; page on with \`next_offset\` until it is null.`,
      request: { query: EventsQuery },
      responses: { 200: jsonResponse(EventsPage, "A page of events") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const user = c.var.user!;
      let since: string | undefined;
      if (q.since) {
        const ms = parseDuration(q.since);
        if (ms === undefined) throw unprocessable([{ loc: ["query", "since"], msg: "Use a duration such as 30m, 24h or 7d", type: "value_error" }]);
        since = new Date(workerClock.now() - ms).toISOString();
      }
      const siteIds = await accessibleSiteIds(c.var.db, user);
      const page = await listAuditEvents(c.var.db, {
        limit: q.limit, offset: q.offset, category: q.category, eventType: q.event_type, severity: q.severity, since,
        userId: q.user_id, metadataUserId: q["metadata.user_id"],
        visibleTo: siteIds ? { siteIds, userId: user.id } : undefined,
      });
      return c.json({ events: page.events, total: page.total, limit: q.limit, offset: q.offset, truncated: page.truncated, next_offset: page.nextOffset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/events", auth: "user", deprecated, tags: TAGS,
      summary: "Record a custom event",
      description: `For business events such as \`transaction_processed\`. Event types the service emits itself (security, system, device, job and site events) and the \`critical\` severity are reserved to administrators (403); naming a site requires the operator role on it. Naming a device requires the operator role on the device's site, and the event is attributed to that site (a different \`site_id\` is 422). \`metadata\` is limited to ${CUSTOM_EVENT_METADATA_MAX_BYTES / 1024} KB as JSON and \`description\` to ${CUSTOM_EVENT_DESCRIPTION_MAX_CHARS} characters (422 beyond).`,
      request: jsonBody(CustomEventBody),
      responses: { 201: jsonResponse(AuditEvent, "The recorded event") },
      errors: [403, 404],
    }),
    async (c) => {
      const row = await recordCustomEvent(c.var.db, c.var.user!, c.req.valid("json"), c.req.raw);
      return c.json(toAuditEventView(row), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/statistics", auth: "user", deprecated, tags: TAGS,
      summary: "Event counts for a period",
      description: "Counts by type, category and severity over `time_period_hours` (default 24), scoped like the event list. `api_access_count` counts API requests: for administrators all of them, from the raw request log where it still holds the period and from the hourly request rollups before that (the earliest hour counted whole); for other users their own requests, from the raw request log, so at most its retention back.",
      request: { query: StatisticsQuery },
      responses: { 200: jsonResponse(Statistics, "Statistics") },
    }),
    async (c) => {
      const { time_period_hours } = c.req.valid("query");
      const user = c.var.user!;
      const db = c.var.db;
      const now = workerClock.now();
      const since = new Date(now - time_period_hours * 3_600_000).toISOString();
      const siteIds = await accessibleSiteIds(db, user);
      const [stats, apiAccessCount] = await Promise.all([
        auditStatistics(db, since, siteIds ? { siteIds, userId: user.id } : undefined),
        user.isAdmin
          ? apiRequestCount(db, requestCountSourcesOf(c.var.config, c.env), now - time_period_hours * 3_600_000, now)
          : db.select({ n: sql<number>`count(*)` }).from(apiRequestLogs)
            .where(and(gte(apiRequestLogs.createdAt, since), eq(apiRequestLogs.userId, user.id))).get().then((r) => r?.n ?? 0),
      ]);
      return c.json({
        statistics: { ...stats, api_access_count: apiAccessCount, time_period_hours, since },
        generated_at: currentDate().toISOString(),
      }, 200);
    },
  );

  return app;
}
