import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { and, eq, like, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { createApp } from "../../src/app";
import { RequestRollups, ROLLUP_FLUSH_INTERVAL_MS, UNMATCHED_ROUTE } from "../../src/services/analytics-rollups";
import { HISTOGRAM_RELATIVE_ERROR, HOUR_MS, periodStart } from "../../src/shared/rollups";
import { admin, call, db, grantSiteRole, signup, unique } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { flushHub, runAlarm, hubSql } from "./commands-helpers";
import { ManualClock } from "./clock";

const M = "/api/v1/metrics";

/** A small deterministic generator, so a failure can be reproduced. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const nearestRank = (sorted: number[], p: number) => sorted[Math.max(1, Math.ceil(p * sorted.length)) - 1];

interface Sample { route: string; method: string; status: number; durationMs: number; at: number }

/** What api-performance must say about these samples, computed the slow way. */
function bruteForce(samples: Sample[]) {
  const durations = samples.map((s) => s.durationMs).sort((a, b) => a - b);
  const clientErrors = samples.filter((s) => s.status >= 400 && s.status < 500).length;
  const serverErrors = samples.filter((s) => s.status >= 500).length;
  return {
    request_count: samples.length,
    client_error_count: clientErrors,
    server_error_count: serverErrors,
    error_count: clientErrors + serverErrors,
    min: durations[0],
    max: durations[durations.length - 1],
    avg: durations.reduce((a, b) => a + b, 0) / durations.length,
    p50: nearestRank(durations, 0.5),
    p95: nearestRank(durations, 0.95),
    p99: nearestRank(durations, 0.99),
  };
}

/** Within the histogram's error, plus the 0.005 of rounding to two decimals. */
const withinHistogramError = (estimate: number, exact: number) => Math.abs(estimate - exact) <= exact * HISTOGRAM_RELATIVE_ERROR + 0.005;

function expectStats(stats: Record<string, number | null>, samples: Sample[], label: string) {
  const want = bruteForce(samples);
  expect(stats.request_count, label).toBe(want.request_count);
  expect(stats.client_error_count, label).toBe(want.client_error_count);
  expect(stats.server_error_count, label).toBe(want.server_error_count);
  expect(stats.error_count, label).toBe(want.error_count);
  expect(stats.error_rate, label).toBeCloseTo(want.error_count / want.request_count, 4);
  expect(stats.min_response_time_ms, label).toBeCloseTo(want.min, 2);
  expect(stats.max_response_time_ms, label).toBeCloseTo(want.max, 2);
  expect(stats.avg_response_time_ms, label).toBeCloseTo(want.avg, 2);
  for (const p of ["p50", "p95", "p99"] as const) {
    const estimate = stats[`${p}_response_time_ms`]!;
    expect(withinHistogramError(estimate, want[p]), `${label} ${p}: ${estimate} vs exact ${want[p]}`).toBe(true);
  }
}

async function member(ownerToken: string, siteId: string, role: "viewer" | "operator") {
  const user = await signup();
  await grantSiteRole(ownerToken, siteId, user, role);
  return user;
}

describe("request rollups", () => {
  it("answer api-performance exactly as a brute-force computation over the same requests (percentiles within the histogram's error)", async () => {
    const tag = unique("perf");
    const routes = [`/api/v1/__${tag}/items/{item_id}`, `/api/v1/__${tag}/items`];
    const next = random(20260423);
    const now = Date.now();
    const hour = periodStart("hour", now);
    const rollups = new RequestRollups(env.DB);
    const samples: Sample[] = [];
    for (let i = 0; i < 4000; i++) {
      const r = next();
      const sample: Sample = {
        route: routes[i % 2],
        method: i % 5 === 0 ? "POST" : "GET",
        status: r < 0.7 ? 200 : r < 0.8 ? 201 : r < 0.88 ? 404 : r < 0.93 ? 422 : r < 0.97 ? 500 : 503,
        // 0.2 ms to ~1.2 s, heavy-tailed like real response times
        durationMs: 0.2 * Math.exp(next() * 8.7),
        // this hour, the previous one, and five hours ago
        at: i % 7 === 0 ? hour - 5 * HOUR_MS + 60_000 : i % 3 === 0 ? hour - HOUR_MS / 2 : hour + Math.floor(next() * (now - hour)),
      };
      samples.push(sample);
      rollups.record(sample);
      // Two flushes: the second adds to the rows the first wrote.
      if (i === 1999) await rollups.flush();
    }
    await rollups.flush();
    const boss = await admin();

    const recent = samples.filter((s) => s.at >= hour - HOUR_MS);
    for (const [hours, included] of [[2, recent], [6, samples], [168, samples]] as const) {
      for (const route of routes) {
        const res = await call(`${M}/api-performance?hours=${hours}&endpoint=${encodeURIComponent(route)}`, { token: boss.token });
        expect(res.status).toBe(200);
        const mine = included.filter((s) => s.route === route);
        expect(res.json.endpoint).toBe(route);
        expectStats(res.json.totals, mine, `${hours}h ${route} totals`);
        expect(res.json.endpoints.map((e: { method: string }) => e.method).sort()).toEqual(["GET", "POST"]);
        for (const e of res.json.endpoints) {
          expect(e.endpoint).toBe(route);
          expectStats(e, mine.filter((s) => s.method === e.method), `${hours}h ${e.method} ${route}`);
        }
      }
    }

    // Both flushes added to the same rows; no raw path anywhere.
    const rows = await db().select().from(schema.requestRollups).where(like(schema.requestRollups.route, `/api/v1/__${tag}/%`)).all();
    expect(rows.filter((r) => r.period === "hour").reduce((n, r) => n + r.count, 0)).toBe(samples.length);
    expect(rows.filter((r) => r.period === "day").reduce((n, r) => n + r.count, 0)).toBe(samples.length);
    expect(rows.some((r) => r.flushes === 2)).toBe(true);
    expect(new Set(rows.map((r) => r.route))).toEqual(new Set(routes));
  });

  it("are written at most every 10 s: at once after a quiet spell, then when 10 s have passed, the requests between sharing that write", async () => {
    const clock = new ManualClock();
    const waits: number[] = [];
    const gates: (() => void)[] = [];
    const sleep = (ms: number) => { waits.push(ms); return new Promise<void>((resolve) => gates.push(resolve)); };
    const rollups = new RequestRollups(env.DB, clock, sleep);
    const route = `/api/v1/__${unique("flush")}`;
    const count = async () => (await db().select({ n: sql<number>`coalesce(sum(count), 0)` }).from(schema.requestRollups)
      .where(and(eq(schema.requestRollups.route, route), eq(schema.requestRollups.period, "hour"))).get())!.n;
    const record = () => rollups.record({ route, method: "GET", status: 200, durationMs: 5, at: clock.now() });

    record();
    const first = rollups.flushSoon()!;
    // A write is scheduled: the next request's share goes with it, and it has nothing to wait for.
    record();
    expect(rollups.flushSoon()).toBeUndefined();
    expect(waits).toEqual([0]);
    gates[0]();
    await first;
    expect(await count()).toBe(2);

    clock.advance(3_000);
    record();
    const second = rollups.flushSoon()!;
    record();
    expect(rollups.flushSoon()).toBeUndefined();
    expect(waits).toEqual([0, ROLLUP_FLUSH_INTERVAL_MS - 3_000]);
    expect(await count()).toBe(2);
    clock.advance(7_000);
    gates[1]();
    await second;
    expect(await count()).toBe(4);
    // Quiet for longer than the interval: the next write goes at once again.
    clock.advance(60_000);
    record();
    const third = rollups.flushSoon()!;
    expect(waits).toEqual([0, ROLLUP_FLUSH_INTERVAL_MS - 3_000, 0]);
    gates[2]();
    await third;
    expect(await count()).toBe(5);
  });

  it("come from the request log middleware by route template, after the response, and stop with REQUEST_LOG_ENABLED or ANALYTICS_ENABLED off", async () => {
    const app = createApp();
    const tag = unique("tpl");
    app.get(`/api/v1/__${tag}/things/:thing_id`, (c) => c.json({ ok: true }));
    const rowsFor = (route: string) => db().select().from(schema.requestRollups).where(eq(schema.requestRollups.route, route)).all();
    const send = async (bindings: typeof env, path: string) => {
      const ctx = createExecutionContext();
      const res = await app.request(path, {}, bindings, ctx);
      await waitOnExecutionContext(ctx);
      return res.status;
    };
    expect(await send({ ...env }, `/api/v1/__${tag}/things/A-1`)).toBe(200);
    expect(await send({ ...env }, `/api/v1/__${tag}/things/B-2`)).toBe(200);
    const rows = await rowsFor(`/api/v1/__${tag}/things/{thing_id}`);
    expect(rows.filter((r) => r.period === "hour").map((r) => [r.method, r.statusClass, r.count])).toEqual([["GET", 2, 2]]);
    expect(await rowsFor(`/api/v1/__${tag}/things/A-1`)).toEqual([]);

    const unmatched = `/api/v1/__${tag}/nothing-here`;
    expect(await send({ ...env }, unmatched)).toBe(404);
    expect(await rowsFor(unmatched)).toEqual([]);
    expect((await rowsFor(UNMATCHED_ROUTE)).length).toBeGreaterThan(0);

    expect(await send({ ...env, REQUEST_LOG_ENABLED: "false" }, `/api/v1/__${tag}/things/C-3`)).toBe(200);
    expect(await send({ ...env, ANALYTICS_ENABLED: "false" }, `/api/v1/__${tag}/things/D-4`)).toBe(200);
    expect((await rowsFor(`/api/v1/__${tag}/things/{thing_id}`)).find((r) => r.period === "hour")!.count).toBe(2);
  });
});

describe("metrics: windows and access", () => {
  it("refuses windows outside the limits with 422: 1–168 hours, 1–720 for a device's history", async () => {
    const boss = await admin();
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    for (const path of ["api-performance", "job-outcomes", "error-trends"]) {
      for (const hours of ["0", "169", "-1", "1.5", "abc"]) {
        const res = await call(`${M}/${path}?hours=${hours}`, { token: boss.token });
        expect(res.status, `${path} ${hours}`).toBe(422);
        expect(res.json.detail[0].loc).toEqual(["query", "hours"]);
      }
      expect((await call(`${M}/${path}?hours=168`, { token: boss.token })).status).toBe(200);
      expect((await call(`${M}/${path}?hours=1`, { token: boss.token })).status).toBe(200);
    }
    expect((await call(`${M}/device-state-history/${device.device_id}?hours=721`, { token: owner.token })).status).toBe(422);
    expect((await call(`${M}/device-state-history/${device.device_id}?hours=0`, { token: owner.token })).status).toBe(422);
    expect((await call(`${M}/device-state-history/${device.device_id}?hours=720`, { token: owner.token })).status).toBe(200);
  });

  it("keeps api-performance and error-trends to administrators", async () => {
    const { owner } = await siteWithOperator();
    for (const path of ["api-performance", "error-trends"]) {
      expect((await call(`${M}/${path}`, { token: owner.token })).status).toBe(403);
      expect((await call(`${M}/${path}`)).status).toBe(401);
    }
  });

  it("scopes job-outcomes to the caller's sites: a viewer sees their site, an outsider nothing, an admin everything", async () => {
    const { owner, siteId } = await siteWithOperator();
    const viewer = await member(owner.token, siteId, "viewer");
    const outsider = await signup();
    const boss = await admin();
    const jobType = unique("scoped_");
    // A device that never answers keeps the job open, so only the reported outcomes count.
    await registerDevice(owner.token, siteId);
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: jobType } });
    for (const status of ["completed", "completed", "failed"]) {
      expect((await call("/api/v1/analytics/job-outcome", { method: "POST", token: owner.token, body: { job_id: job.json.job_id, status, duration_ms: 1000 } })).status).toBe(201);
    }
    const totalFor = async (token: string, query = "") => {
      const res = await call(`${M}/job-outcomes?hours=1&job_type=${jobType}${query}`, { token });
      expect(res.status).toBe(200);
      return res.json.totals.jobs.total;
    };
    expect(await totalFor(viewer.token)).toBe(3);
    expect(await totalFor(viewer.token, `&site_id=${siteId}`)).toBe(3);
    expect(await totalFor(boss.token)).toBe(3);
    expect(await totalFor(outsider.token)).toBe(0);
    expect((await call(`${M}/job-outcomes?site_id=${siteId}`, { token: outsider.token })).status).toBe(404);
    expect((await call(`${M}/job-outcomes?site_id=${unique("NOPE-")}`, { token: boss.token })).status).toBe(404);
  });

  it("scopes a device's state history to its site: viewer yes, outsider and unknown device 404, admin yes", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const viewer = await member(owner.token, siteId, "viewer");
    const outsider = await signup();
    const boss = await admin();
    const path = `${M}/device-state-history/${device.device_id}`;
    expect((await call(path, { token: viewer.token })).status).toBe(200);
    expect((await call(path, { token: boss.token })).status).toBe(200);
    expect((await call(path, { token: outsider.token })).status).toBe(404);
    expect((await call(`${M}/device-state-history/${unique("NOPE-")}`, { token: boss.token })).status).toBe(404);
  });
});

describe("metrics: what the queries say", () => {
  it("device-state-history: presence, lifecycle and reported changes, newest first, with who and why, in its window", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
    await flushHub(siteId);
    expect((await call(`/api/v1/devices/${device.device_id}/suspend`, { method: "POST", token: owner.token })).status).toBe(200);
    expect((await call(`/api/v1/devices/${device.device_id}/resume`, { method: "POST", token: owner.token })).status).toBe(200);
    expect((await call("/api/v1/analytics/device-state-change", { method: "POST", token: owner.token, body: { device_id: device.device_id, new_state: "maintenance", reason: "cleaning" } })).status).toBe(201);
    await db().insert(schema.deviceStateHistory).values({
      deviceId: device.device_id, siteId, previousState: "offline", newState: "online", changedBy: "system", reason: "old", timestamp: new Date(Date.now() - 30 * HOUR_MS).toISOString(),
    });

    const res = await call(`${M}/device-state-history/${device.device_id}?hours=24`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ device_id: device.device_id, site_id: siteId, hours: 24, total: 4, limit: 50, offset: 0 });
    expect(res.json.history.map((h: Record<string, unknown>) => [h.source, h.previous_state, h.new_state, h.changed_by, h.user_id])).toEqual([
      ["reported", null, "maintenance", "user", owner.id],
      ["lifecycle", "suspended", "active", "user", owner.id],
      ["lifecycle", "active", "suspended", "user", owner.id],
      ["presence", null, "online", "system", null],
    ]);
    expect(res.json.history[0].reason).toBe("cleaning");
    const stamps = res.json.history.map((h: { timestamp: string }) => h.timestamp);
    expect([...stamps].sort().reverse()).toEqual(stamps);

    const wider = await call(`${M}/device-state-history/${device.device_id}?hours=48&limit=2&offset=3`, { token: owner.token });
    expect(wider.json.total).toBe(5);
    expect(wider.json.history.map((h: { reason: string }) => h.reason)).toEqual([expect.any(String), "old"]);
  });

  it("job-outcomes: per job type, jobs and device executions by status, success rate, average and p95 duration — from the hub and from reports", async () => {
    const { owner, siteId } = await siteWithOperator();
    const action = "ping";
    for (let i = 0; i < 3; i++) await registerDevice(owner.token, siteId, { device_source: "simulated", device_id: unique("SIM-") });
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action } });
    await runAlarm(siteId);
    await hubSql(siteId, "UPDATE commands SET sim_due_ms = ? WHERE sim_due_ms IS NOT NULL", Date.now() - 1);
    await runAlarm(siteId);
    await flushHub(siteId);
    expect((await call(`/api/v1/jobs/${job.json.job_id}`, { token: owner.token })).json.status).toBe("completed");

    const reportedType = unique("reported_");
    const reported = [100, 200, 300, 400, 500, 600, 700, 800, 900, 10_000];
    for (const [i, ms] of reported.entries()) {
      const body = { job_id: job.json.job_id, job_type: reportedType, status: i < 7 ? "completed" : i < 9 ? "failed" : "timeout", duration_ms: ms };
      expect((await call("/api/v1/analytics/job-outcome", { method: "POST", token: owner.token, body })).status).toBe(201);
    }

    const fromHub = await call(`${M}/job-outcomes?hours=1&job_type=${action}&site_id=${siteId}`, { token: owner.token });
    expect(fromHub.status).toBe(200);
    expect(fromHub.json.job_types).toHaveLength(1);
    const [hubType] = fromHub.json.job_types;
    expect(hubType.job_type).toBe(action);
    expect(hubType.jobs).toMatchObject({ total: 1, by_status: { completed: 1, failed: 0, cancelled: 0, timeout: 0, expired: 0 }, success_rate: 1 });
    expect(hubType.executions).toMatchObject({ total: 3, by_status: { completed: 3 }, success_rate: 1 });
    expect(hubType.executions.avg_duration_ms).toBeGreaterThanOrEqual(0);

    const fromReports = await call(`${M}/job-outcomes?hours=1&job_type=${reportedType}`, { token: owner.token });
    const [type] = fromReports.json.job_types;
    expect(type.jobs).toEqual({
      total: 10, by_status: { completed: 7, failed: 2, cancelled: 0, timeout: 1, expired: 0 }, success_rate: 0.7,
      avg_duration_ms: 1450, p95_duration_ms: expect.any(Number),
    });
    expect(withinHistogramError(type.jobs.p95_duration_ms, 10_000)).toBe(true);
    expect(type.executions.total).toBe(0);
    expect(fromReports.json.totals.jobs.total).toBe(10);
  });

  it("error-trends: occurrences by category × severity and per hour", async () => {
    const boss = await admin();
    const before = (await call(`${M}/error-trends?hours=1`, { token: boss.token })).json;
    const message = unique("trend ");
    const reports = [
      { category: "database", severity: "critical", error_message: message },
      { category: "database", severity: "critical", error_message: message },
      { category: "database", severity: "warning", error_message: `${message} other` },
      { category: "external_service", severity: "error", error_message: message },
    ];
    for (const body of reports) expect((await call("/api/v1/analytics/error", { method: "POST", body })).status).toBeLessThan(300);
    const after = (await call(`${M}/error-trends?hours=1`, { token: boss.token })).json;
    expect(after.total - before.total).toBe(4);
    expect(after.by_category.database - before.by_category.database).toBe(3);
    expect(after.by_category.external_service - before.by_category.external_service).toBe(1);
    expect(after.by_severity.critical - before.by_severity.critical).toBe(2);
    const cell = (r: typeof after, category: string, severity: string) =>
      r.by_category_and_severity.find((c: { category: string; severity: string }) => c.category === category && c.severity === severity)?.count ?? 0;
    expect(cell(after, "database", "critical") - cell(before, "database", "critical")).toBe(2);
    expect(after.hourly).toHaveLength(2);
    const currentHour = new Date(periodStart("hour", Date.now())).toISOString();
    const hourOf = (r: typeof after) => r.hourly.find((h: { hour: string }) => h.hour === currentHour)?.count ?? 0;
    expect(hourOf(after) - hourOf(before)).toBe(4);
    const onlyDb = (await call(`${M}/error-trends?hours=1&category=database`, { token: boss.token })).json;
    expect(onlyDb.total).toBe(onlyDb.by_category.database);
    expect(onlyDb.by_category.external_service).toBe(0);
  });
});
