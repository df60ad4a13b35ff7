import { env } from "cloudflare:workers";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { eq, gte, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { AUDIT_EXPORT_FIELDS } from "../../src/services/audit-export";
import { requestRollupsFor } from "../../src/services/analytics-rollups";
import { admin, call, createSite, db, eventually, signup, unique } from "./helpers";
import { installWorkerClock } from "./clock";
import { runCron } from "./commands-helpers";

const DAY = 86_400_000;
let account: { email: string; password: string; token: string };
let clock: ReturnType<typeof installWorkerClock> | undefined;

beforeAll(async () => {
  account = await admin();
});
afterEach(async () => {
  if (!clock) return;
  clock.restore();
  clock = undefined;
  await signInAgain();
});

/** A token valid at the clock's current time. */
async function signInAgain() {
  const res = await call("/api/v1/auth/login", { method: "POST", body: { email: account.email, password: account.password } });
  expect(res.status).toBe(200);
  account.token = res.json.data.access_token;
}

const get = (path: string) => call(path, { token: account.token });
const auditCount = async () => (await db().select({ n: sql<number>`count(*)` }).from(schema.auditLogs).get())!.n;

async function recordEvents(n: number, extra: Record<string, unknown> = {}) {
  for (let i = 0; i < n; i++) {
    const res = await call("/api/v1/audit/events", { method: "POST", token: account.token, body: { event_type: "transaction_processed", ...extra } });
    expect(res.status).toBe(201);
  }
}

describe("audit status endpoints", () => {
  it("GET /audit/status: no policy yet, counts from the table", async () => {
    await recordEvents(2);
    const res = await get("/api/v1/audit/status");
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      retention: { policy: null, encryption_key: "configured" },
      last_run: null,
      events: { total: await auditCount(), archived: 0, due_for_archive: null, due_for_deletion: null },
      archives: { count: 0, events: 0, bytes: 0, oldest_day: null, newest_day: null },
    });
    expect(res.json.events.not_archived).toBe(res.json.events.total);
  });

  it("GET /audit/config: the effective settings, and the archive key only as whether it is usable", async () => {
    const res = await get("/audit/config");
    expect(res.status).toBe(200);
    expect(res.json.retention).toEqual({ policy: null, encryption_key: "configured" });
    expect(res.json.export.fields).toEqual(AUDIT_EXPORT_FIELDS.map((f) => f.name));
    expect(res.json.request_log).toEqual({ enabled: true, sink: "d1", raw_retention_days: 7, rollup_retention_days: 90 });
    expect(res.text).not.toContain(env.AUDIT_ARCHIVE_KEY!);
    expect(res.text).not.toContain(env.JWT_SECRET!);
  });

  it("GET /audit/performance: write rates and row counts that match the table", async () => {
    await recordEvents(3);
    const res = await get("/api/v1/audit/performance");
    expect(res.status).toBe(200);
    const hourAgo = new Date(Date.now() - 3_600_000).toISOString();
    const lastHour = (await db().select({ n: sql<number>`count(*)` }).from(schema.auditLogs).where(gte(schema.auditLogs.createdAt, hourAgo)).get())!.n;
    // Nothing is written between the request and these counts, so they must agree exactly.
    expect(res.json.write_rate.last_hour.events).toBe(lastHour);
    expect(res.json.write_rate.last_hour.per_minute).toBeCloseTo(lastHour / 60, 2);
    expect(res.json.table.rows).toBe(await auditCount());
    for (const ms of Object.values(res.json.query_latency_ms) as number[]) expect(ms).toBeGreaterThanOrEqual(0);
  });

  it("GET /audit/statistics/detailed: the statistics plus events per site and per hour", async () => {
    const siteId = await createSite(account.token);
    await recordEvents(4, { site_id: siteId });
    const res = await get("/api/v1/audit/statistics/detailed?time_period_hours=2");
    expect(res.status).toBe(200);
    const stats = res.json.statistics;
    const mine = (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.siteId, siteId)).all()).length;
    expect(stats.by_site).toContainEqual({ site_id: siteId, events: mine });
    expect(stats.by_site.reduce((sum: number, s: { events: number }) => sum + s.events, 0)).toBe(stats.total_events);
    expect(stats.by_hour.reduce((sum: number, h: { events: number }) => sum + h.events, 0)).toBe(stats.total_events);
    expect(stats.by_hour.at(-1).hour).toBe(`${new Date().toISOString().slice(0, 13)}:00:00Z`);
    expect((await get("/api/v1/audit/statistics/detailed?time_period_hours=0")).status).toBe(422);
  });

  it("refuses non-administrators", async () => {
    const user = await signup();
    for (const path of ["/status", "/config", "/performance", "/statistics/detailed"]) {
      expect((await call(`/api/v1/audit${path}`, { token: user.token })).status, path).toBe(403);
    }
    expect((await call("/api/v1/audit/optimize", { method: "POST", token: user.token })).status).toBe(403);
  });

  it("api_access_count still counts requests whose raw request-log rows the retention removed", async () => {
    const requests = 20;
    const marker = `/api/v1/audit/events`;
    for (let i = 0; i < requests; i++) expect((await get(`${marker}?limit=1`)).status).toBe(200);
    // The raw rows are written shortly after the responses; the rollups every 10 s, or now.
    await eventually(async () => ((await db().select({ n: sql<number>`count(*)` }).from(schema.apiRequestLogs)
      .where(eq(schema.apiRequestLogs.endpoint, marker)).get())!.n >= requests));
    await requestRollupsFor(env).flush();

    clock = installWorkerClock();
    clock.advance(8 * DAY);
    await runCron(clock.now());
    // the raw rows are gone (kept 7 days)...
    expect((await db().select({ n: sql<number>`count(*)` }).from(schema.apiRequestLogs).where(eq(schema.apiRequestLogs.endpoint, marker)).get())!.n).toBe(0);
    await signInAgain();
    // ...but those requests still count for a 10-day window, in both statistics.
    for (const path of ["/api/v1/audit/statistics?time_period_hours=240", "/api/v1/audit/statistics/detailed?time_period_hours=240"]) {
      const res = await get(path);
      expect(res.status).toBe(200);
      expect(res.json.statistics.api_access_count, path).toBeGreaterThanOrEqual(requests);
    }
  });

  it("POST /audit/optimize: nothing without a policy; with one, prunes what it allows and reports it", async () => {
    const none = await call("/api/v1/audit/optimize", { method: "POST", token: account.token });
    expect(none.status).toBe(200);
    expect(none.json).toMatchObject({ policy: null, run: null });
    expect(none.json.events_remaining).toBe(await auditCount());

    const set = await call("/api/v1/audit/retention", { method: "POST", token: account.token, body: { retention_days: 1, archive_after_days: null } });
    expect(set.status).toBe(200);
    const tag = unique("opt");
    await recordEvents(2, { description: tag });
    clock = installWorkerClock();
    clock.advance(2 * DAY);
    await signInAgain();
    const before = await auditCount();
    const res = await call("/audit/optimize", { method: "POST", token: account.token });
    expect(res.status).toBe(200);
    expect(res.json.run).toMatchObject({ trigger: "optimize", archived_events: 0, archive_objects: 0, error: null });
    // Every event older than a day went (the login just now was recorded at the real time, two days "ago").
    expect(res.json.run.deleted_events).toBe(before);
    expect(res.json.events_remaining).toBe(await auditCount());
    expect(await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.description, tag)).all()).toEqual([]);

    const status = await get("/api/v1/audit/status");
    expect(status.json.last_run).toEqual(res.json.run);
    expect(status.json.events.due_for_deletion).toBe(0);
  });
});
