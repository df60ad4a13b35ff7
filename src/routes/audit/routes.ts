import { z } from "@hono/zod-openapi";
import { and, gte, eq, sql } from "drizzle-orm";
import { apiRequestLogs } from "../../db/schema";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { forbidden, unprocessable } from "../../lib/errors";
import { parseDuration } from "../../shared/time";
import { accessibleSiteIds, authorizeSite } from "../../services/access";
import { authorizeDevice } from "../../services/devices";
import { auditStatistics, listAuditEvents, recordAudit, type AuditRow } from "../../services/audit";
import { CATEGORIES, classify } from "../../shared/vocabulary";
import type { MountOptions } from "../mount";

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
    event_metadata: z.record(z.string(), z.unknown()),
    metadata: z.record(z.string(), z.unknown()).openapi({ description: "Same as event_metadata, under the name some clients read" }),
    ip_address: z.string().nullable(),
    user_agent: z.string().nullable(),
    session_id: z.string().nullable(),
    created_at: z.string(),
    timestamp: z.string().openapi({ description: "Same as created_at" }),
  })
  .openapi("AuditEvent");

const EventsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  offset: z.coerce.number().int().min(0).default(0),
  category: z.enum(CATEGORIES).optional(),
  event_type: z.string().max(64).optional(),
  severity: z.enum(SEVERITIES).optional(),
  since: z.string().max(16).optional().openapi({ description: "A duration back from now: 30m, 24h, 7d, 2w" }),
  "metadata.user_id": z.coerce.number().int().positive().optional().openapi({ description: "Events of this user" }),
});

const EventsPage = z
  .object({ events: z.array(AuditEvent), total: z.number().int(), limit: z.number().int(), offset: z.number().int() })
  .openapi("AuditEventPage");

const StatisticsQuery = z.object({ time_period_hours: z.coerce.number().int().min(1).max(8760).default(24) });

const Statistics = z
  .object({
    statistics: z.object({
      total_events: z.number().int(),
      events_by_type: z.record(z.string(), z.number().int()),
      events_by_category: z.record(z.string(), z.number().int()),
      events_by_severity: z.record(z.string(), z.number().int()),
      api_access_count: z.number().int().openapi({ description: "API requests in the period, from the request log" }),
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
    description: z.string().max(2000).optional(),
    metadata: z.record(z.string(), z.unknown()).optional(),
    severity: z.enum(SEVERITIES).optional(),
    site_id: z.string().max(64).optional(),
    device_id: z.string().max(64).optional(),
    session_id: z.string().max(128).optional(),
  })
  .openapi("CustomAuditEvent");

export const toAuditEvent = (r: AuditRow) => {
  const metadata = (r.eventMetadata ?? {}) as Record<string, unknown>;
  return {
    id: r.id,
    event_type: r.eventType,
    category: r.category,
    severity: r.severity,
    description: r.description,
    user_id: r.userId,
    job_id: r.jobId,
    device_id: r.deviceId,
    site_id: r.siteId,
    event_metadata: metadata,
    metadata,
    ip_address: r.ipAddress,
    user_agent: r.userAgent,
    session_id: r.sessionId,
    created_at: r.createdAt,
    timestamp: r.createdAt,
  };
};

// Users record business and user-action events; everything else is the service's own testimony.
const USER_CATEGORIES = new Set(["business_events", "user_actions"]);

export function auditRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/events", auth: "user", deprecated, tags: TAGS,
      summary: "Audit events, newest first",
      description: "Administrators read every event; other users the events of sites they can access and their own.",
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
        since = new Date(Date.now() - ms).toISOString();
      }
      const siteIds = await accessibleSiteIds(c.var.db, user);
      const { rows, total } = await listAuditEvents(c.var.db, {
        limit: q.limit, offset: q.offset, category: q.category, eventType: q.event_type, severity: q.severity, since,
        userId: q["metadata.user_id"],
        visibleTo: siteIds ? { siteIds, userId: user.id } : undefined,
      });
      return c.json({ events: rows.map(toAuditEvent), total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/events", auth: "user", deprecated, tags: TAGS,
      summary: "Record a custom event",
      description: "For business events such as `transaction_processed`. Event types the service emits itself (security, system, device, job and site events) are reserved to administrators; naming a site requires the operator role on it. Naming a device requires the operator role on the device's site, and the event is attributed to that site (a different `site_id` is 422).",
      request: jsonBody(CustomEventBody),
      responses: { 201: jsonResponse(AuditEvent, "The recorded event") },
      errors: [403, 404],
    }),
    async (c) => {
      const body = c.req.valid("json");
      const user = c.var.user!;
      const category = body.category ?? classify(body.event_type).category;
      if (!user.isAdmin && (!USER_CATEGORIES.has(category) || classify(body.event_type).category !== "business_events")) {
        throw forbidden(`Only administrators may record '${body.event_type}' events in category '${category}'`);
      }
      // A device's trail may only be written by someone who operates its site; the event carries that site.
      let siteId = body.site_id;
      if (body.device_id) {
        const { device } = await authorizeDevice(c.var.db, user, body.device_id, "operator", c.req.raw);
        if (siteId && siteId !== device.siteId) {
          throw unprocessable([{ loc: ["body", "device_id"], msg: "The device does not belong to site_id", type: "value_error" }]);
        }
        siteId = device.siteId;
      } else if (siteId) {
        await authorizeSite(c.var.db, user, siteId, "operator", c.req.raw);
      }
      const row = await recordAudit(c.var.db, {
        eventType: body.event_type,
        category: body.category,
        severity: body.severity,
        description: body.description,
        metadata: body.metadata,
        siteId,
        deviceId: body.device_id,
        sessionId: body.session_id,
        userId: user.id,
        request: c.req.raw,
      });
      return c.json(toAuditEvent(row), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/statistics", auth: "user", deprecated, tags: TAGS,
      summary: "Event counts for a period",
      description: "Counts by type, category and severity over `time_period_hours` (default 24), scoped like the event list. `api_access_count` counts API requests from the request log (all requests for administrators, the caller's own otherwise).",
      request: { query: StatisticsQuery },
      responses: { 200: jsonResponse(Statistics, "Statistics") },
    }),
    async (c) => {
      const { time_period_hours } = c.req.valid("query");
      const user = c.var.user!;
      const db = c.var.db;
      const since = new Date(Date.now() - time_period_hours * 3_600_000).toISOString();
      const siteIds = await accessibleSiteIds(db, user);
      const [stats, api] = await Promise.all([
        auditStatistics(db, since, siteIds ? { siteIds, userId: user.id } : undefined),
        db.select({ n: sql<number>`count(*)` }).from(apiRequestLogs)
          .where(and(gte(apiRequestLogs.createdAt, since), user.isAdmin ? undefined : eq(apiRequestLogs.userId, user.id))).get(),
      ]);
      return c.json({
        statistics: { ...stats, api_access_count: api?.n ?? 0, time_period_hours, since },
        generated_at: new Date().toISOString(),
      }, 200);
    },
  );

  return app;
}
