import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import pkg from "../../package.json";
import { admin, call, db, eventually, signup, unique } from "./helpers";

const pulse = async () => {
  const res = await call("/api/v1/health/system-pulse");
  expect(res.status).toBe(200);
  return res.json;
};

describe("service status", () => {
  it("GET / answers the banner", async () => {
    const res = await call("/");
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: expect.stringContaining("Fleet Edge"), version: pkg.version, docs: "/docs", openapi: "/openapi.json" });
  });

  it("GET /health reports the database and the package version", async () => {
    const before = Date.now() / 1000;
    const res = await call("/health");
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ status: "healthy", client_connected: true, version: pkg.version, timestamp: expect.any(Number) });
    expect(res.json.timestamp).toBeGreaterThanOrEqual(before - 1);
    expect(res.json.timestamp).toBeLessThan(before + 60);
  });

  it("GET /status and /version", async () => {
    const status = await call("/status");
    expect(status.status).toBe(200);
    expect(status.json).toEqual({ connected: true, version: pkg.version, uptime: expect.any(Number), client_type: expect.any(String) });
    expect(status.json.uptime).toBeGreaterThanOrEqual(0);
    const version = await call("/version");
    expect(version.json).toEqual({ version: pkg.version, api_version: "v1" });
  });

  it("GET /api/v1/health/status reports components", async () => {
    const res = await call("/api/v1/health/status");
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      status: "healthy",
      version: pkg.version,
      timestamp: expect.stringMatching(/Z$/),
      uptime_seconds: expect.any(Number),
      components: { database: { status: "up", latency_ms: expect.any(Number) }, site_hubs: { status: "up" } },
    });
  });

  it("status endpoints need no authentication and ignore a bad token", async () => {
    for (const path of ["/", "/health", "/status", "/version", "/api/v1/health/status", "/api/v1/health/system-pulse"]) {
      expect((await call(path, { token: "garbage" })).status, path).toBe(200);
    }
  });
});

describe("system pulse", () => {
  it("has the specification's fields", async () => {
    const p = await pulse();
    expect(Object.keys(p).sort()).toEqual([
      "active_agents", "active_jobs", "cpu_percent", "load_score", "memory_percent", "queue_depth", "requests_per_minute", "status", "total_agents",
    ]);
    expect(Number.isInteger(p.load_score)).toBe(true);
    expect(p.load_score).toBeGreaterThanOrEqual(0);
    expect(p.load_score).toBeLessThanOrEqual(100);
    // The status is the load score's band, not an independent reading.
    const band = p.load_score === 0 ? "idle" : p.load_score < 50 ? "active" : p.load_score < 80 ? "busy" : "overloaded";
    expect(p.status).toBe(band);
  });

  it("counts queued and sent jobs from D1", async () => {
    const before = await pulse();
    const siteId = unique("PULSE-");
    const job = (status: "queued" | "sent" | "completed") => ({ jobId: unique("job-"), siteId, action: "update_config", status });
    await db().insert(schema.jobs).values([job("queued"), job("queued"), job("sent"), job("completed")]);
    const after = await pulse();
    expect(after.active_jobs - before.active_jobs).toBe(3);
    expect(after.queue_depth - before.queue_depth).toBe(2);
    expect(after.load_score).toBeGreaterThanOrEqual(before.load_score);
    expect(after.status).not.toBe("idle");
  });

  it("counts registered and online devices", async () => {
    const before = await pulse();
    const siteId = unique("PULSE-");
    const device = (status: string) => ({ deviceId: unique("D-"), siteId, name: "Till", status });
    await db().insert(schema.devices).values([device("online"), device("online"), device("offline")]);
    const after = await pulse();
    expect(after.total_agents - before.total_agents).toBe(3);
    expect(after.active_agents - before.active_agents).toBe(2);
  });

  it("counts API requests of the last minute from the request log", async () => {
    const marker = unique("pulse-");
    await call("/", { headers: { "X-Request-Id": marker } });
    await eventually(() => db().select().from(schema.apiRequestLogs).where(eq(schema.apiRequestLogs.requestId, marker)).get());
    const before = await pulse();
    expect(before.requests_per_minute).toBeGreaterThanOrEqual(1);
    // an old row does not count
    await db().insert(schema.apiRequestLogs).values({ endpoint: "/old", method: "GET", statusCode: 200, responseTimeMs: 1, createdAt: "2020-01-01T00:00:00.000Z" });
    expect((await pulse()).requests_per_minute).toBe(before.requests_per_minute);
    await db().insert(schema.apiRequestLogs).values(Array.from({ length: 5 }, () => ({ endpoint: "/new", method: "GET", statusCode: 200, responseTimeMs: 1 })));
    expect((await pulse()).requests_per_minute).toBe(before.requests_per_minute + 5);
  });
});

describe("stress test", () => {
  it("is for administrators only", async () => {
    expect((await call("/api/v1/health/stress-test?duration=1&memory_mb=1", { method: "POST" })).status).toBe(401);
    const user = await signup();
    const res = await call("/api/v1/health/stress-test?duration=1&memory_mb=1", { method: "POST", token: user.token });
    expect(res.status).toBe(403);
    expect(res.json).toEqual({ detail: expect.any(String) });
  });

  it("enforces its bounds with 422", async () => {
    const a = await admin();
    for (const q of ["duration=31", "memory_mb=65", "duration=0", "duration=abc", "memory_mb=-1", "cpu_cores=65"]) {
      const res = await call(`/api/v1/health/stress-test?${q}`, { method: "POST", token: a.token });
      expect(res.status, q).toBe(422);
      expect(res.json.detail[0].loc[0], q).toBe("query");
    }
  });

  it("runs a small test to completion", async () => {
    const a = await admin();
    const res = await call("/api/v1/health/stress-test?duration=1&memory_mb=1", { method: "POST", token: a.token });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ message: expect.any(String), memory_mb: 1, hash_iterations: expect.any(Number), ticks: expect.any(Number) });
    expect(res.json.duration_s).toBeGreaterThanOrEqual(1);
    expect(res.json.duration_s).toBeLessThan(5);
    expect(res.json.hash_iterations).toBeGreaterThan(0);
  });
});
