import { siteHub } from "../../hub/client";
import { z } from "@hono/zod-openapi";
import { sql } from "drizzle-orm";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { SERVICE_VERSION, isolateUptimeSeconds, systemPulse } from "../../services/system";
import { STRESS_LIMITS, runStressTest } from "../../services/stress";
import type { Db, Env } from "../../env";
import { currentDate, workerClock } from "../../lib/clock";

const TAGS = ["Service"];

async function databaseCheck(db: Db) {
  const started = performance.now();
  try {
    await db.run(sql`select 1`);
    return { ok: true, latency_ms: performance.now() - started };
  } catch (error) {
    return { ok: false, latency_ms: performance.now() - started, error: String((error as Error).message ?? error) };
  }
}

const HEALTH_PROBE_HUB = "__health-probe__";

async function siteHubCheck(env: Env) {
  const started = performance.now();
  try {
    await siteHub(env, HEALTH_PROBE_HUB).ping();
    return { ok: true, latency_ms: performance.now() - started };
  } catch (error) {
    return { ok: false, latency_ms: performance.now() - started, error: String((error as Error).message ?? error) };
  }
}

const SystemPulse = z
  .object({
    status: z.enum(["idle", "active", "busy", "overloaded"]),
    load_score: z.number().int().min(0).max(100),
    active_jobs: z.number().int(),
    queue_depth: z.number().int(),
    active_agents: z.number().int(),
    total_agents: z.number().int(),
    requests_per_minute: z.number().int(),
    cpu_percent: z.number().openapi({ description: "Share of the last minute this isolate spent serving requests" }),
    memory_percent: z.number().nullable().openapi({ description: "Always null: the Workers runtime does not expose memory use to the Worker" }),
  })
  .openapi("SystemPulse");

/** Unauthenticated service status: `/`, `/health`, `/status`, `/version`. */
export const rootRoutes = newRouter();

rootRoutes.openapi(
  apiRoute({ method: "get", path: "/", auth: "none", tags: TAGS, summary: "Service banner",
    description: "A browser (a request that accepts `text/html`) is sent to the operator dashboard at `/dashboard/` (302); every other client gets the JSON banner.",
    responses: {
      200: jsonResponse(z.object({ message: z.string(), version: z.string(), docs: z.string(), openapi: z.string() }), "Banner"),
      302: { description: "To the operator dashboard (Location: /dashboard/)" },
    } }),
  (c) => {
    if (/\btext\/html\b/.test(c.req.header("accept") ?? "")) return c.redirect("/dashboard/", 302);
    return c.json({ message: "Fleet Edge device fleet management API", version: SERVICE_VERSION, docs: "/docs", openapi: "/openapi.json" }, 200);
  },
);

rootRoutes.openapi(
  apiRoute({ method: "get", path: "/health", auth: "none", tags: TAGS, summary: "Liveness and database reachability",
    description: "`client_connected` tells whether the database answered; `status` is `degraded` when it did not. `timestamp` is Unix seconds.",
    responses: { 200: jsonResponse(z.object({ status: z.enum(["healthy", "degraded"]), client_connected: z.boolean(), version: z.string(), timestamp: z.number() }), "Health") } }),
  async (c) => {
    const db = await databaseCheck(c.var.db);
    return c.json({ status: db.ok ? ("healthy" as const) : ("degraded" as const), client_connected: db.ok, version: SERVICE_VERSION, timestamp: workerClock.now() / 1000 }, 200);
  },
);

rootRoutes.openapi(
  apiRoute({ method: "get", path: "/status", auth: "none", tags: TAGS, summary: "Connection status",
    description: "`uptime` is the serving isolate's age in seconds (Workers have no process lifetime).",
    responses: { 200: jsonResponse(z.object({ connected: z.boolean(), version: z.string(), uptime: z.number(), client_type: z.string() }), "Status") } }),
  async (c) => {
    const db = await databaseCheck(c.var.db);
    return c.json({ connected: db.ok, version: SERVICE_VERSION, uptime: isolateUptimeSeconds(), client_type: "cloudflare-d1" }, 200);
  },
);

rootRoutes.openapi(
  apiRoute({ method: "get", path: "/version", auth: "none", tags: TAGS, summary: "Service version",
    responses: { 200: jsonResponse(z.object({ version: z.string(), api_version: z.string() }), "Version") } }),
  (c) => c.json({ version: SERVICE_VERSION, api_version: "v1" }, 200),
);

/** `/api/v1/health/*`. */
export const healthRoutes = newRouter();

healthRoutes.openapi(
  apiRoute({ method: "get", path: "/status", auth: "none", tags: TAGS, summary: "Component status",
    responses: { 200: jsonResponse(z.object({
      status: z.enum(["healthy", "degraded"]),
      version: z.string(),
      timestamp: z.string(),
      uptime_seconds: z.number(),
      components: z.object({
        database: z.object({ status: z.enum(["up", "down"]), latency_ms: z.number(), error: z.string().optional() }),
        site_hubs: z.object({ status: z.enum(["up", "down"]), latency_ms: z.number(), error: z.string().optional() })
          .openapi({ description: "A round trip to a Durable Object (the one reserved for this probe): the runtime that holds every site's live state" }),
      }),
    }).openapi("ServiceStatus"), "Status") } }),
  async (c) => {
    const [db, hubs] = await Promise.all([databaseCheck(c.var.db), siteHubCheck(c.env)]);
    return c.json({
      status: db.ok && hubs.ok ? ("healthy" as const) : ("degraded" as const),
      version: SERVICE_VERSION,
      timestamp: currentDate().toISOString(),
      uptime_seconds: isolateUptimeSeconds(),
      components: {
        database: { status: db.ok ? ("up" as const) : ("down" as const), latency_ms: db.latency_ms, ...(db.error ? { error: db.error } : {}) },
        site_hubs: { status: hubs.ok ? ("up" as const) : ("down" as const), latency_ms: hubs.latency_ms, ...(hubs.error ? { error: hubs.error } : {}) },
      },
    }, 200);
  },
);

healthRoutes.openapi(
  apiRoute({ method: "get", path: "/system-pulse", auth: "none", tags: TAGS, summary: "System pulse",
    description: "Jobs in flight and queued (from D1), online and registered devices, API requests in the last minute (from the request log) and this isolate's busy share.",
    responses: { 200: jsonResponse(SystemPulse, "Pulse") } }),
  async (c) => c.json(await systemPulse(c.var.db), 200),
);

const StressQuery = z.object({
  duration: z.coerce.number().int().min(1).max(STRESS_LIMITS.maxDurationS).default(10),
  memory_mb: z.coerce.number().int().min(0).max(STRESS_LIMITS.maxMemoryMb).default(STRESS_LIMITS.maxMemoryMb),
  cpu_cores: z.coerce.number().int().min(0).max(64).default(0),
});

healthRoutes.openapi(
  apiRoute({ method: "post", path: "/stress-test", auth: "admin", tags: TAGS, summary: "Bounded stress test (administrators)",
    description: "Runs inside the request on purpose: a Worker has no background processes and one isolate per request, so the test runs inside this request, is limited to 30 s and 64 MB (the isolate has 128 MB), hashes in short bursts that stay inside the Worker CPU limit (`cpu_cores` > 1 cannot apply and only scales the burst size to 1/cores of full), and is restricted to administrators because it is a load generator.",
    request: { query: StressQuery },
    responses: { 200: jsonResponse(z.object({ message: z.string(), duration_s: z.number(), memory_mb: z.number(), hash_iterations: z.number().int(), ticks: z.number().int() }), "Completed") } }),
  async (c) => {
    const q = c.req.valid("query");
    const share = q.cpu_cores <= 1 ? 1 : 1 / q.cpu_cores;
    const result = await runStressTest(q.duration, q.memory_mb, share);
    return c.json({ message: `Stress test completed: ${result.duration_s.toFixed(1)} s, ${result.memory_mb} MB held`, ...result }, 200);
  },
);
