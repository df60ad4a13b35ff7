import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedDevice, grantedSiteIfNamed } from "../../middleware/access";
import { accessibleSiteIds } from "../../services/access";
import { apiPerformance, deviceStateTimeline, errorTrends, jobOutcomeMetrics } from "../../services/metrics";
import * as s from "./schema";
import { workerClock } from "../../lib/clock";

const TAGS = ["Metrics"];

/** `/api/v1/metrics`: aggregate queries over the analytics (docs/analytics.md), read from rollups. */
export function metricsRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/api-performance", auth: "admin", tags: TAGS,
      summary: "API performance (administrators)",
      description: "Per route template and method: request count, errors (4xx and 5xx apart) and their rates, average, minimum, maximum and p50/p95/p99 response time; and the same over all routes. Service-wide, so administrators only. Read from hourly and daily rollups, so the cost is the same whatever the traffic; percentiles are within 5 %.",
      request: { query: s.ApiPerformanceQuery },
      responses: { 200: jsonResponse(s.ApiPerformance, "Request metrics") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      return c.json(await apiPerformance(c.env.DB, { hours: q.hours, endpoint: q.endpoint, now: workerClock.now() }), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/job-outcomes", auth: "user", access: { site: "viewer", from: "query" }, tags: TAGS,
      summary: "Job outcomes",
      description: "Per job type: how jobs ended and how devices' executions of them ended — counts by status, success rate, average and p95 duration. Over the sites the caller can see (administrators: all), or one site with `site_id`. Read from hourly and daily rollups.",
      request: { query: s.JobOutcomesQuery },
      responses: { 200: jsonResponse(s.JobOutcomeMetrics, "Job outcome metrics") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const named = grantedSiteIfNamed(c);
      const siteIds = named ? [named.site.siteId] : await accessibleSiteIds(c.var.db, c.var.user!);
      return c.json(await jobOutcomeMetrics(c.env.DB, { hours: q.hours, jobType: q.job_type, siteIds, now: workerClock.now() }), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/error-trends", auth: "admin", tags: TAGS,
      summary: "Error trends (administrators)",
      description: "Error occurrences by category × severity, and per hour. Service-wide, so administrators only. Read from hourly rollups; a folded error counts once per report.",
      request: { query: s.ErrorTrendsQuery },
      responses: { 200: jsonResponse(s.ErrorTrends, "Error trends") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      return c.json(await errorTrends(c.env.DB, { hours: q.hours, category: q.category, now: workerClock.now() }), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/device-state-history/{device_id}", auth: "user", access: { device: "viewer" }, tags: TAGS,
      summary: "A device's state timeline",
      description: "The last `hours` (1–720) of the device's state changes, newest first, with who and why: presence transitions (online, offline, error), lifecycle changes (suspend, resume) and reported changes alike. Paged (`limit` ≤ 500) with `total`.",
      request: { params: s.DeviceParams, query: s.StateHistoryQuery },
      responses: { 200: jsonResponse(s.DeviceStateHistory, "The timeline") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      return c.json(await deviceStateTimeline(c.var.db, grantedDevice(c).device, { hours: q.hours, limit: q.limit, offset: q.offset, now: workerClock.now() }), 200);
    },
  );

  return app;
}
