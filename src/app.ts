import { OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "./env";
import { requestContext } from "./middleware/request-context";
import { requestLog } from "./middleware/request-log";
import { requestBodyLimit } from "./middleware/body-limits";
import { handleError, notFoundHandler } from "./middleware/errors";
import { securityHeaders } from "./middleware/security-headers";
import { cors } from "./middleware/cors";
import { recordBusy, recordVersionOnce, SERVICE_VERSION } from "./services/system";
import { mountRoutes } from "./routes";
import { auditPublication } from "./middleware/audit-publication";

const DOCUMENT = {
  openapi: "3.1.0",
  info: {
    title: "Fleet Edge API",
    version: SERVICE_VERSION,
    description: "Device fleet management for point-of-sale terminals grouped into sites. Errors are `{\"detail\": ...}`; validation errors list each problem as `{loc, msg, type}`. A JSON body must be valid UTF-8 with no key twice in one object (400); names and identifiers refuse control characters (422). Unversioned paths are deprecated aliases of their `/api/v1` successors.",
    license: { name: "Proprietary" },
  },
  servers: [{ url: "/", description: "This service" }],
  tags: [
    { name: "Service", description: "Status, health and documentation" },
    { name: "Auth", description: "Users, passwords and tokens" },
    { name: "Sites", description: "Sites (stores) and their health" },
    { name: "Site members", description: "Who may do what on a site" },
    { name: "Tenants", description: "Groups of sites with tenant-wide roles" },
    { name: "Audit", description: "The audit trail" },
    { name: "Enrolment intents", description: "Pre-provisioned enrolment: intents and their one-time claim tokens. Unlike the rest of the API, where a site the caller has no role on answers 404 like an unknown one, these calls answer 403 to such a caller (an unknown site or intent is still 404)." },
    { name: "Devices", description: "The device registry" },
    { name: "Device calls", description: "Calls terminals make with X-Device-ID and X-API-Key" },
    { name: "Enrolment", description: "Bootstrap keys and enrolment statistics" },
    { name: "Agents", description: "Device agents: lifecycle state, health, pushes and their metrics, transactions and errors series (simulated agents run in their site's hub)" },
    { name: "Live", description: "The site's live channel: WebSocket and server-sent events of every change (device status, heartbeats, metrics, agents, commands, jobs, intents)" },
    { name: "Commands", description: "Device commands: queued by operators, polled, acknowledged and reported by devices (at-least-once, leased)" },
    { name: "Jobs", description: "Work orders for a site's devices, fanned out as commands by the site's hub" },
    { name: "Analytics", description: "What browsers, operators and devices report: user activity, errors, device state changes, job outcomes" },
    { name: "Metrics", description: "Aggregate queries over the analytics: API performance, job outcomes, error trends, device state history" },
  ],
};

export function createApp() {
  const app = new OpenAPIHono<AppEnv>({ strict: false });

  app.onError(handleError);
  app.notFound(notFoundHandler);

  // First, so that every answer gets the headers, including errors thrown by the middleware after it.
  app.use("*", securityHeaders);
  app.use("*", cors);
  app.use("*", requestContext);
  app.use("*", async (c, next) => {
    const started = performance.now();
    c.executionCtx.waitUntil(recordVersionOnce(c.var.db));
    await next();
    recordBusy(performance.now() - started);
  });
  app.use("*", requestLog);
  app.use("*", auditPublication);
  app.use("*", requestBodyLimit);

  // What serves each URL, and its deprecated unversioned aliases: src/routes/index.ts.
  mountRoutes(app, () => app.getOpenAPI31Document(DOCUMENT));

  app.openAPIRegistry.registerComponent("securitySchemes", "bearerAuth", {
    type: "http", scheme: "bearer", bearerFormat: "JWT", description: "Access token from signup, login or the OpenID Connect callback. HS256; `iat` is required and may be at most 60 s in the future; a token is accepted for at most the configured lifetime (ACCESS_TOKEN_MINUTES, default 30) from its `iat`, and one whose `exp` lies further from `iat` than that is refused (401)",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "cookieAuth", {
    type: "apiKey", in: "cookie", name: "access_token", description: "The same token as an httpOnly cookie (set by login); the header wins when both are sent",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "deviceId", {
    type: "apiKey", in: "header", name: "X-Device-ID", description: "The device's business id",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "deviceApiKey", {
    type: "apiKey", in: "header", name: "X-API-Key", description: "The device's API key, shown once at registration",
  });


  return app;
}
