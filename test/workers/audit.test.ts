import { describe, expect, it } from "vitest";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, eventually, signup, unique } from "./helpers";

type Event = { id: number; event_type: string; category: string; severity: string; user_id: number | null; site_id: string | null; created_at: string; event_metadata: Record<string, unknown> };

const events = async (token: string | undefined, query = "", path = "/api/v1/audit/events") => {
  const res = await call(`${path}${query ? `?${query}` : ""}`, { token });
  return res;
};

const auditRows = (eventType: string) => db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, eventType)).all();

describe("events recorded", () => {
  it("login success and failure (known and unknown e-mail)", async () => {
    const user = await signup();
    await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password }, headers: { "User-Agent": "till-test/1.0", "CF-Connecting-IP": "198.51.100.4" } });
    await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: "wrong-one" } });
    const ghost = `${unique("ghost")}@example.com`;
    await call("/api/v1/auth/login", { method: "POST", body: { email: ghost, password: "wrong-one" } });

    const success = (await auditRows("login_success")).filter((r) => r.userId === user.id);
    expect(success).toHaveLength(1);
    expect(success[0]).toMatchObject({ category: "security_events", severity: "info", userAgent: "till-test/1.0", ipAddress: "198.51.100.4" });
    const failed = await auditRows("login_failed");
    const mine = failed.filter((r) => r.userId === user.id);
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({ category: "security_events", severity: "warning", eventMetadata: { email: user.email } });
    const unknown = failed.filter((r) => (r.eventMetadata as { email?: string }).email === ghost);
    expect(unknown).toHaveLength(1);
    expect(unknown[0].userId).toBeNull();
    // the password never lands in the audit trail
    expect(JSON.stringify(failed)).not.toContain("wrong-one");
  });

  it("permission_denied for site access and administrator-only endpoints", async () => {
    const owner = await signup();
    const stranger = await signup();
    const siteId = await createSite(owner.token);
    await call(`/api/v1/sites/${siteId}`, { token: stranger.token });
    await call("/api/v1/tenants", { token: stranger.token });
    // A site the stranger was told does not exist names them in its metadata only (their own trail would
    // otherwise show them the site).
    const denied = (await auditRows("permission_denied"))
      .filter((r) => r.userId === stranger.id || (r.eventMetadata as { caller_user_id?: number }).caller_user_id === stranger.id);
    expect(denied).toHaveLength(2);
    expect(denied.every((r) => r.category === "security_events" && r.severity === "warning")).toBe(true);
    expect(denied.find((r) => r.siteId === siteId)).toMatchObject({
      userId: null, eventMetadata: { required_role: "viewer", role: null, caller_user_id: stranger.id, answered: 404 },
    });
    expect(denied.find((r) => r.siteId === null)?.eventMetadata).toMatchObject({ required: "admin", path: "/api/v1/tenants", method: "GET" });
  });

  it("site_created with the creator and the site", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token, { name: "Audited store" });
    const rows = (await auditRows("site_created")).filter((r) => r.siteId === siteId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ userId: owner.id, category: "site_management", severity: "info", eventMetadata: { name: "Audited store" } });
  });

  it("nothing is audited for a site creation that failed", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { site_id: siteId, name: "dup" } });
    expect((await auditRows("site_created")).filter((r) => r.siteId === siteId)).toHaveLength(1);
  });
});

describe("reading events", () => {
  it("answers {events, total, limit, offset, truncated, next_offset}, newest first, in both path forms", async () => {
    const a = await admin();
    const res = await events(a.token);
    expect(res.status).toBe(200);
    expect(Object.keys(res.json).sort()).toEqual(["events", "limit", "next_offset", "offset", "total", "truncated"]);
    expect(res.json.limit).toBe(100);
    expect(res.json.offset).toBe(0);
    const all = await db().select().from(schema.auditLogs).all();
    expect(res.json.total).toBe(all.length);
    const list: Event[] = res.json.events;
    for (let i = 1; i < list.length; i++) {
      expect(list[i - 1].created_at >= list[i].created_at).toBe(true);
      if (list[i - 1].created_at === list[i].created_at) expect(list[i - 1].id).toBeGreaterThan(list[i].id);
    }
    const e = list[0];
    expect(e).toMatchObject({ timestamp: e.created_at });
    expect(Object.keys(e).sort()).toEqual([
      "category", "created_at", "description", "device_id", "event_metadata", "event_type", "hash", "id", "ip_address", "job_id",
      "prev_hash", "session_id", "severity", "site_id", "timestamp", "user_agent", "user_id",
    ]);
    const legacy = await events(a.token, "", "/audit/events");
    expect(legacy.status).toBe(200);
    expect(legacy.headers.get("Deprecation")).toBe("true");
    expect(legacy.headers.get("Link")).toBe('</api/v1/audit/events>; rel="successor-version"');
    expect(legacy.json.total).toBeGreaterThanOrEqual(res.json.total);
  });

  it("pages with limit and offset", async () => {
    const a = await admin();
    const owner = await signup();
    for (let i = 0; i < 4; i++) await createSite(owner.token);
    const first = await events(a.token, "limit=2&offset=0&event_type=site_created");
    const second = await events(a.token, "limit=2&offset=2&event_type=site_created");
    expect(first.json.events).toHaveLength(2);
    expect(second.json.events).toHaveLength(2);
    expect(first.json.total).toBe(second.json.total);
    expect(first.json.total).toBeGreaterThanOrEqual(4);
    const ids = [...first.json.events, ...second.json.events].map((e: Event) => e.id);
    expect(new Set(ids).size).toBe(4);
    expect(ids).toEqual([...ids].sort((x, y) => y - x));
    expect((await events(a.token, "limit=500")).status).toBe(200);
    expect((await events(a.token, "limit=501")).status).toBe(422);
    expect((await events(a.token, "limit=0")).status).toBe(422);
    expect((await events(a.token, "offset=-1")).status).toBe(422);
  });

  it("filters by category, event_type, severity and the user_id column", async () => {
    const a = await admin();
    const user = await signup();
    await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: "bad-password" } });
    const byCategory = await events(a.token, "category=security_events&limit=500");
    expect(byCategory.json.events.length).toBeGreaterThan(0);
    expect(byCategory.json.events.every((e: Event) => e.category === "security_events")).toBe(true);
    const byType = await events(a.token, "event_type=login_failed&limit=500");
    expect(byType.json.events.length).toBeGreaterThan(0);
    expect(byType.json.events.every((e: Event) => e.event_type === "login_failed")).toBe(true);
    const bySeverity = await events(a.token, "severity=warning&limit=500");
    expect(bySeverity.json.events.every((e: Event) => e.severity === "warning")).toBe(true);
    expect(bySeverity.json.events.some((e: Event) => e.event_type === "login_failed")).toBe(true);
    const byUser = await events(a.token, `user_id=${user.id}&limit=500`);
    expect(byUser.json.events.map((e: Event) => e.event_type).sort()).toEqual(["login_failed", "user_created"]);
    expect(byUser.json.total).toBe(2);
    const combined = await events(a.token, `user_id=${user.id}&severity=warning`);
    expect(combined.json.events.map((e: Event) => e.event_type)).toEqual(["login_failed"]);
    expect((await events(a.token, "category=nonsense")).status).toBe(422);
    expect((await events(a.token, "severity=loud")).status).toBe(422);
  });

  it("filters by since", async () => {
    const a = await admin();
    const type = unique("aged_event_");
    await db().insert(schema.auditLogs).values([
      { eventType: type, category: "business_events", createdAt: "2020-01-01T00:00:00.000Z" },
      { eventType: type, category: "business_events", createdAt: new Date(Date.now() - 3 * 86_400_000).toISOString() },
      { eventType: type, category: "business_events" },
    ]);
    const count = async (since?: string) => (await events(a.token, `event_type=${type}${since ? `&since=${since}` : ""}`)).json.total;
    expect(await count()).toBe(3);
    expect(await count("7d")).toBe(2);
    expect(await count("2w")).toBe(2);
    expect(await count("24h")).toBe(1);
    expect(await count("30m")).toBe(1);
    for (const bad of ["yesterday", "7", "-1d", "7y"]) {
      const res = await events(a.token, `since=${bad}`);
      expect(res.status, bad).toBe(422);
      expect(res.json.detail[0].loc).toEqual(["query", "since"]);
    }
  });

  it("non-administrators see events of their sites and their own, not others'", async () => {
    const alice = await signup();
    const bob = await signup();
    const aliceSite = await createSite(alice.token);
    const bobSite = await createSite(bob.token);
    await call(`/api/v1/sites/${aliceSite}`, { token: bob.token }); // bob denied on alice's site
    const seen: Event[] = (await events(alice.token, "limit=500")).json.events;
    expect(seen.some((e) => e.event_type === "site_created" && e.site_id === aliceSite)).toBe(true);
    expect(seen.some((e) => e.event_type === "user_created" && e.user_id === alice.id)).toBe(true);
    // Bob was told alice's site does not exist; alice, its owner, sees who asked.
    expect(seen.some((e) => e.event_type === "permission_denied" && e.site_id === aliceSite && e.event_metadata.caller_user_id === bob.id)).toBe(true);
    expect((await events(bob.token, "limit=500")).json.events.some((e: Event) => e.site_id === aliceSite)).toBe(false);
    expect(seen.some((e) => e.site_id === bobSite)).toBe(false);
    expect(seen.every((e) => e.user_id === alice.id || e.site_id === aliceSite)).toBe(true);
    // system-wide events (no site, no user) are for administrators
    expect(seen.some((e) => e.user_id === null && e.site_id === null)).toBe(false);
    // filtering by another user's id does not widen the view
    const bobsEvents: Event[] = (await events(alice.token, `metadata.user_id=${bob.id}&limit=500`)).json.events;
    expect(bobsEvents.every((e) => e.site_id === aliceSite)).toBe(true);
    const total = (await events(alice.token, "limit=1")).json.total;
    expect(total).toBe(seen.length);
  });

  it("works for a user with access to more sites than D1 binds parameters (> 100)", async () => {
    const a = await admin();
    const tenantId = (await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Big chain" } })).json.tenant_id;
    const user = await signup();
    await db().insert(schema.tenantMemberships).values({ tenantId, userId: user.id, role: "viewer" });
    const siteIds = Array.from({ length: 130 }, (_, i) => `${tenantId}-S${i}`);
    for (let i = 0; i < siteIds.length; i += 10) {
      await db().insert(schema.sites).values(siteIds.slice(i, i + 10).map((siteId) => ({ siteId, name: siteId, tenantId })));
    }
    await db().insert(schema.auditLogs).values({ eventType: "transaction_processed", category: "business_events", siteId: siteIds[129] });
    const res = await events(user.token, "event_type=transaction_processed");
    expect(res.status).toBe(200);
    expect(res.json.events.map((e: Event) => e.site_id)).toContain(siteIds[129]);
    const stats = await call("/api/v1/audit/statistics", { token: user.token });
    expect(stats.status).toBe(200);
    expect(stats.json.statistics.events_by_type.transaction_processed).toBeGreaterThanOrEqual(1);
    const sites = await call("/api/v1/sites/sites", { token: user.token });
    expect(sites.status).toBe(200);
    expect(sites.json.sites).toHaveLength(130);
    expect(sites.json.sites.map((s: { site_id: string }) => s.site_id).sort()).toEqual([...siteIds].sort());
  });

  it("refuses anonymous callers with 401 on every form", async () => {
    for (const path of ["/api/v1/audit/events", "/audit/events", "/api/v1/audit/statistics", "/audit/statistics"]) {
      const res = await call(path);
      expect(res.status, path).toBe(401);
    }
    expect((await call("/audit/events", { method: "POST", body: { event_type: "transaction_processed" } })).status).toBe(401);
  });
});

describe("statistics", () => {
  it("has the specification's shape, scoped to the caller", async () => {
    const user = await signup();
    await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    await createSite(user.token);
    const res = await call("/audit/statistics", { token: user.token });
    expect(res.status).toBe(200);
    expect(res.headers.get("Deprecation")).toBe("true");
    expect(res.json).toEqual({
      statistics: {
        total_events: 3,
        events_by_type: { user_created: 1, login_success: 1, site_created: 1 },
        events_by_category: { user_actions: 1, security_events: 1, site_management: 1 },
        events_by_severity: { info: 3 },
        api_access_count: expect.any(Number),
        time_period_hours: 24,
        since: expect.stringMatching(/Z$/),
        recent_activity: { last_hour: 3, last_24_hours: 3, last_week: 3 },
      },
      generated_at: expect.stringMatching(/Z$/),
    });
    const since = Date.parse(res.json.statistics.since);
    expect(Math.abs(Date.now() - 24 * 3_600_000 - since)).toBeLessThan(60_000);
    const v1 = await call("/api/v1/audit/statistics?time_period_hours=1", { token: user.token });
    expect(v1.json.statistics.time_period_hours).toBe(1);
    expect(v1.json.statistics.total_events).toBe(3);
    expect((await call("/api/v1/audit/statistics?time_period_hours=0", { token: user.token })).status).toBe(422);
  });

  it("counts API access from the request log (the caller's own for non-administrators)", async () => {
    const user = await signup();
    const marker = unique("stats-");
    await call("/api/v1/auth/me", { token: user.token, headers: { "X-Request-Id": marker } });
    await eventually(() => db().select().from(schema.apiRequestLogs).where(eq(schema.apiRequestLogs.requestId, marker)).get());
    const count = (await call("/api/v1/audit/statistics", { token: user.token })).json.statistics.api_access_count;
    const own = await db().select().from(schema.apiRequestLogs).where(eq(schema.apiRequestLogs.userId, user.id)).all();
    expect(count).toBe(own.length);
    expect(count).toBeGreaterThanOrEqual(1);
    const a = await admin();
    const all = (await call("/api/v1/audit/statistics", { token: a.token })).json.statistics.api_access_count;
    expect(all).toBeGreaterThan(count);
  });
});

describe("recording custom events", () => {
  it("records transaction_processed for any user, and it is listed", async () => {
    const user = await signup();
    const siteId = await createSite(user.token);
    const res = await call("/audit/events", {
      method: "POST", token: user.token,
      body: { event_type: "transaction_processed", description: "Sale 42", metadata: { amount: 12.5, currency: "EUR" }, site_id: siteId },
    });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({
      id: expect.any(Number), event_type: "transaction_processed", category: "business_events", severity: "info",
      description: "Sale 42", user_id: user.id, site_id: siteId, event_metadata: { amount: 12.5, currency: "EUR" },
    });
    const listed: Event[] = (await events(user.token, "event_type=transaction_processed")).json.events;
    expect(listed.map((e) => e.id)).toContain(res.json.id);
    const v1 = await call("/api/v1/audit/events", { method: "POST", token: user.token, body: { event_type: "shift_closed", category: "user_actions", severity: "warning" } });
    expect(v1.status).toBe(201);
    expect(v1.json).toMatchObject({ event_type: "shift_closed", category: "user_actions", severity: "warning", site_id: null });
  });

  it("refuses reserved event types and categories to non-administrators", async () => {
    const user = await signup();
    for (const body of [
      { event_type: "login_success" },
      { event_type: "system_startup" },
      { event_type: "permission_denied" },
      { event_type: "device_offline" },
      { event_type: "job_completed" },
      { event_type: "site_created" },
      { event_type: "user_deleted" },
      { event_type: "transaction_processed", category: "security_events" },
      { event_type: "my_event", category: "system_events" },
    ]) {
      const res = await call("/api/v1/audit/events", { method: "POST", token: user.token, body });
      expect(res.status, JSON.stringify(body)).toBe(403);
    }
    const forged = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.userId, user.id), eq(schema.auditLogs.eventType, "system_startup"))).all();
    expect(forged).toEqual([]);
    const a = await admin();
    const ok = await call("/api/v1/audit/events", { method: "POST", token: a.token, body: { event_type: "config_updated", metadata: { key: "x" } } });
    expect(ok.status).toBe(201);
    expect(ok.json.category).toBe("system_events");
  });

  it("requires the operator role on a named site", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await db().insert(schema.siteMemberships).values({ siteId, userId: viewer.id, role: "viewer" });
    const body = { event_type: "transaction_processed", site_id: siteId };
    expect((await call("/api/v1/audit/events", { method: "POST", token: viewer.token, body })).status).toBe(403);
    const stranger = await signup();
    const hidden = await call("/api/v1/audit/events", { method: "POST", token: stranger.token, body });
    expect([hidden.status, hidden.json]).toEqual([404, { detail: `Site with ID '${siteId}' not found` }]);
    expect((await call("/api/v1/audit/events", { method: "POST", token: owner.token, body: { ...body, site_id: "NO-SUCH-SITE" } })).status).toBe(404);
  });

  it("attributes an event to a device only for someone who operates the device's site", async () => {
    const owner = await signup();
    const stranger = await signup();
    const siteId = await createSite(owner.token);
    const otherSite = await createSite(owner.token);
    const deviceId = unique("DEV-");
    await db().insert(schema.devices).values({ deviceId, siteId, name: "Till" });
    const post = (token: string, body: Record<string, unknown>) => call("/api/v1/audit/events", { method: "POST", token, body });
    const hidden = await post(stranger.token, { event_type: "transaction_processed", device_id: deviceId });
    expect([hidden.status, hidden.json]).toEqual([404, { detail: `Device with ID '${deviceId}' not found` }]);
    // Naming another site does not tell a stranger whether the device exists either.
    expect((await post(stranger.token, { event_type: "transaction_processed", device_id: deviceId, site_id: otherSite })).status).toBe(404);
    expect((await post(owner.token, { event_type: "transaction_processed", device_id: "NO-SUCH-DEVICE" })).status).toBe(404);
    expect((await post(owner.token, { event_type: "transaction_processed", device_id: deviceId, site_id: otherSite })).status).toBe(422);
    const ok = await post(owner.token, { event_type: "transaction_processed", device_id: deviceId });
    expect(ok.status).toBe(201);
    expect(ok.json).toMatchObject({ device_id: deviceId, site_id: siteId });
    const rows = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.deviceId, deviceId)).all();
    expect(rows.map((r) => r.userId)).toEqual([owner.id]);
  });

  it("validates the body", async () => {
    const user = await signup();
    for (const body of [{}, { event_type: "Has Spaces" }, { event_type: "ok", severity: "loud" }, { event_type: "ok", metadata: "text" }, { event_type: "ok", category: "made_up" }]) {
      const res = await call("/api/v1/audit/events", { method: "POST", token: user.token, body });
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
  });
});
