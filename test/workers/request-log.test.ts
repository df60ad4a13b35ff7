import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { createApp } from "../../src/app";
import { readConfig } from "../../src/shared/config";
import { isLoggedPath } from "../../src/middleware/request-log";
import { call, db, eventually, signup, unique } from "./helpers";

const rowFor = (requestId: string) =>
  db().select().from(schema.apiRequestLogs).where(eq(schema.apiRequestLogs.requestId, requestId)).get();

describe("request log", () => {
  it("records an API request after the response", async () => {
    const user = await signup();
    const requestId = unique("req-");
    const res = await call("/api/v1/auth/me", { token: user.token, headers: { "X-Request-Id": requestId, "CF-Connecting-IP": "203.0.113.7" } });
    expect(res.status).toBe(200);
    const row = await eventually(() => rowFor(requestId));
    expect(row).toMatchObject({
      endpoint: "/api/v1/auth/me", method: "GET", statusCode: 200, userId: user.id, ipAddress: "203.0.113.7", errorMessage: null,
      createdAt: expect.stringMatching(/Z$/),
    });
    expect(row.responseTimeMs).toBeGreaterThanOrEqual(0);
  });

  it("records failures with their detail", async () => {
    const requestId = unique("req-");
    await call("/api/v1/auth/me", { headers: { "X-Request-Id": requestId } });
    const row = await eventually(() => rowFor(requestId));
    expect(row).toMatchObject({ statusCode: 401, userId: null, errorMessage: "Not authenticated" });
    const notFound = unique("req-");
    await call("/api/v1/nothing-here", { headers: { "X-Request-Id": notFound } });
    expect(await eventually(() => rowFor(notFound))).toMatchObject({ statusCode: 404, errorMessage: "Not Found" });
    const invalid = unique("req-");
    const body = JSON.stringify({ email: "nope" });
    await call("/api/v1/auth/login", { method: "POST", rawBody: body, headers: { "X-Request-Id": invalid } });
    const row422 = await eventually(() => rowFor(invalid));
    expect(row422.statusCode).toBe(422);
    expect(row422.requestSize).toBe(body.length);
    expect(JSON.parse(row422.errorMessage!)).toEqual(expect.arrayContaining([expect.objectContaining({ loc: ["body", "email"] })]));
  });

  it("records a burst of concurrent requests, each once", async () => {
    const user = await signup();
    const ids = Array.from({ length: 25 }, () => unique("burst-"));
    await Promise.all(ids.map((id) => call("/api/v1/sites/sites", { token: user.token, headers: { "X-Request-Id": id } })));
    await eventually(async () => {
      const rows = await Promise.all(ids.map(rowFor));
      return rows.every(Boolean);
    }, 5000);
    for (const id of ids) {
      const rows = await db().select().from(schema.apiRequestLogs).where(eq(schema.apiRequestLogs.requestId, id)).all();
      expect(rows).toHaveLength(1);
    }
  });

  it("skips health and status endpoints", async () => {
    const skipped = ["/health", "/status", "/version", "/api/v1/health/status", "/api/v1/health/system-pulse"];
    const ids = skipped.map(() => unique("skip-"));
    for (const [i, path] of skipped.entries()) {
      expect((await call(path, { headers: { "X-Request-Id": ids[i] } })).status).toBe(200);
    }
    // A logged request afterwards: once it is written, anything buffered before it has been too.
    const marker = unique("marker-");
    await call("/", { headers: { "X-Request-Id": marker } });
    await eventually(() => rowFor(marker));
    for (const id of ids) expect(await rowFor(id)).toBeUndefined();
  });

  it("writes through waitUntil, after the response, and honours REQUEST_LOG_ENABLED", async () => {
    const app = createApp();
    const send = async (bindings: typeof env, requestId: string) => {
      const ctx = createExecutionContext();
      const res = await app.request("/api/v1/auth/me", { headers: { "X-Request-Id": requestId } }, bindings, ctx);
      expect(res.status).toBe(401);
      const beforeWaitUntil = await rowFor(requestId);
      await waitOnExecutionContext(ctx);
      return { beforeWaitUntil, after: await rowFor(requestId) };
    };
    const on = await send({ ...env, REQUEST_LOG_ENABLED: "true" }, unique("on-"));
    expect(on.beforeWaitUntil).toBeUndefined();
    expect(on.after).toMatchObject({ endpoint: "/api/v1/auth/me", statusCode: 401 });
    const off = await send({ ...env, REQUEST_LOG_ENABLED: "false" }, unique("off-"));
    expect(off.after).toBeUndefined();
  });
});

describe("configuration and path filter", () => {
  it("reads the REQUEST_LOG_ENABLED switch", () => {
    for (const [value, expected] of [["true", true], ["1", true], ["false", false], ["0", false], ["off", false], ["no", false], [undefined, true], ["", true]] as const) {
      expect(readConfig({ ...env, REQUEST_LOG_ENABLED: value }).requestLogEnabled, String(value)).toBe(expected);
    }
  });

  it("logs API paths and skips health and metrics paths", () => {
    for (const path of ["/", "/api/v1/auth/me", "/api/v1/sites/sites", "/sites", "/audit/events", "/api/v1/devices/x/heartbeat", "/healthz", "/api/v1/sites/S1/health"]) {
      expect(isLoggedPath(path), path).toBe(true);
    }
    for (const path of ["/health", "/status", "/version", "/api/v1/health/status", "/api/v1/health/system-pulse", "/api/v1/health/stress-test", "/api/v1/metrics/devices", "/metrics"]) {
      expect(isLoggedPath(path), path).toBe(false);
    }
  });
});
