import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import { matchedRoutes } from "hono/route";
import type { AppEnv } from "../env";
import { requestLogFor } from "../services/request-log";
import { UNMATCHED_ROUTE, requestRollupsFor, routeTemplate } from "../services/analytics-rollups";
import { workerClock } from "../lib/clock";

// Health and metrics endpoints are not logged: they are probes and signals rather than API use, and
// would fill the log with the service's own monitoring. A terminal's heartbeats, telemetry and
// command polls are its health and metrics signals, arrive every 10–15 s from every device, and are
// counted by the site's hub instead: logging them would put a D1 write behind every device call.
const UNLOGGED = [
  /^\/health$/, /^\/status$/, /^\/version$/, /^\/api\/v1\/health\//, /^\/api\/v1\/metrics\//, /^\/metrics/,
  /^(\/api\/v1)?\/agent\/(heartbeat|telemetry)$/, /^\/api\/v1\/analytics\/device-metrics$/, /^(\/api\/v1)?\/devices\/pending$/,
];

export const isLoggedPath = (path: string) => !UNLOGGED.some((re) => re.test(path));

/** The template of the route that answered (its handler's path), not the raw path. */
function answeringRoute(c: Context<AppEnv>): string {
  const routes = matchedRoutes(c);
  for (let i = routes.length - 1; i >= 0; i--) if (routes[i].method !== "ALL") return routeTemplate(routes[i].path);
  return UNMATCHED_ROUTE;
}

/**
 * Every logged request goes two ways after its response: into this isolate's rollups by route
 * template (what the metrics queries read), and as a raw row into the request-log sink.
 */
export const requestLog = createMiddleware<AppEnv>(async (c, next) => {
  const started = performance.now();
  await next();
  const config = c.var.config;
  if (!config?.requestLogEnabled || !config.analyticsEnabled || !isLoggedPath(c.req.path)) return;
  const durationMs = performance.now() - started;
  const rollups = requestRollupsFor(c.env);
  rollups.record({ route: answeringRoute(c), method: c.req.method, status: c.res.status, durationMs, at: workerClock.now() });
  const rollupWrite = rollups.flushSoon();
  if (rollupWrite) c.executionCtx.waitUntil(rollupWrite);
  const errorDetail = c.res.status >= 400 ? await c.res.clone().json<{ detail?: unknown }>().catch(() => undefined) : undefined;
  const entry = {
    requestId: c.var.requestId,
    endpoint: c.req.path,
    method: c.req.method,
    statusCode: c.res.status,
    responseTimeMs: Math.round(durationMs * 100) / 100,
    userId: c.var.user?.id ?? null,
    deviceId: c.var.device?.deviceId ?? null,
    ipAddress: c.req.header("CF-Connecting-IP") ?? null,
    requestSize: Number(c.req.header("Content-Length") ?? 0) || 0,
    responseSize: Number(c.res.headers.get("Content-Length") ?? 0) || null,
    errorMessage: typeof errorDetail?.detail === "string" ? errorDetail.detail : errorDetail ? JSON.stringify(errorDetail.detail) : null,
  };
  const rawWrite = requestLogFor(c.env).add(entry);
  if (rawWrite) c.executionCtx.waitUntil(rawWrite);
});
