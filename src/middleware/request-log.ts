import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { requestLogFor } from "../services/request-log";

// Health and metrics endpoints are not logged: they are probes and signals rather than API use, and
// would fill the log with the service's own monitoring. A terminal's heartbeats, telemetry and
// command polls are its health and metrics signals, arrive every 10–15 s from every device, and are
// counted by the site's hub instead: logging them would put a D1 write behind every device call.
const UNLOGGED = [
  /^\/health$/, /^\/status$/, /^\/version$/, /^\/api\/v1\/health\//, /^\/api\/v1\/metrics\//, /^\/metrics/,
  /^(\/api\/v1)?\/agent\/(heartbeat|telemetry)$/, /^\/api\/v1\/analytics\/device-metrics$/, /^(\/api\/v1)?\/devices\/pending$/,
];

export const isLoggedPath = (path: string) => !UNLOGGED.some((re) => re.test(path));

export const requestLog = createMiddleware<AppEnv>(async (c, next) => {
  const started = performance.now();
  await next();
  if (!c.var.config?.requestLogEnabled || !isLoggedPath(c.req.path)) return;
  const errorDetail = c.res.status >= 400 ? await c.res.clone().json<{ detail?: unknown }>().catch(() => undefined) : undefined;
  const entry = {
    requestId: c.var.requestId,
    endpoint: c.req.path,
    method: c.req.method,
    statusCode: c.res.status,
    responseTimeMs: Math.round((performance.now() - started) * 100) / 100,
    userId: c.var.user?.id ?? null,
    deviceId: c.var.device?.deviceId ?? null,
    ipAddress: c.req.header("CF-Connecting-IP") ?? null,
    requestSize: Number(c.req.header("Content-Length") ?? 0) || 0,
    responseSize: Number(c.res.headers.get("Content-Length") ?? 0) || null,
    errorMessage: typeof errorDetail?.detail === "string" ? errorDetail.detail : errorDetail ? JSON.stringify(errorDetail.detail) : null,
  };
  c.executionCtx.waitUntil(requestLogFor(c.env, c.var.db).add(entry));
});
