import { describe, expect, it } from "vitest";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, signup, unique } from "./helpers";

const LIST_FORMS = ["/api/v1/sites/sites", "/api/v1/sites/", "/api/v1/sites", "/sites"];
const CREATE_FORMS = ["/api/v1/sites/sites", "/api/v1/sites/", "/sites"];
const detailForms = (id: string) => [`/api/v1/sites/${id}`, `/sites/${id}`];
const healthForms = (id: string) => [`/api/v1/sites/${id}/health`, `/sites/${id}/health`];
const isLegacy = (path: string) => !path.startsWith("/api/v1/");

function expectDeprecation(path: string, headers: Headers) {
  if (isLegacy(path)) {
    expect(headers.get("Deprecation"), path).toBe("true");
    const successor = `/api/v1${new URL(path, "http://x").pathname}`;
    expect(headers.get("Link"), path).toBe(`<${successor}>; rel="successor-version"`);
  } else {
    expect(headers.get("Deprecation"), path).toBeNull();
  }
}

async function insertDevice(siteId: string, status: string, extra: Partial<typeof schema.devices.$inferInsert> = {}) {
  const deviceId = unique("DEV-");
  await db().insert(schema.devices).values({ deviceId, siteId, name: `Till ${deviceId}`, status, ...extra });
  return deviceId;
}

describe("path forms", () => {
  it("answer 401 without a token on every form, legacy forms marked deprecated", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const reads = [...LIST_FORMS, ...detailForms(siteId), ...healthForms(siteId)];
    for (const path of reads) {
      const res = await call(path);
      expect(res.status, path).toBe(401);
      expect(res.json, path).toEqual({ detail: "Not authenticated" });
      expectDeprecation(path, res.headers);
    }
    for (const path of CREATE_FORMS) {
      const res = await call(path, { method: "POST", body: { name: "x" } });
      expect(res.status, path).toBe(401);
      expectDeprecation(path, res.headers);
    }
    // an invalid token is refused the same way everywhere
    for (const path of reads) expect((await call(path, { token: "garbage" })).status, path).toBe(401);
  });

  it("list forms answer the same filtered list", async () => {
    const owner = await signup();
    const a = await createSite(owner.token);
    const b = await createSite(owner.token);
    const bodies = [];
    for (const path of LIST_FORMS) {
      const res = await call(path, { token: owner.token });
      expect(res.status, path).toBe(200);
      expectDeprecation(path, res.headers);
      bodies.push(res.json);
    }
    for (const body of bodies) expect(body).toEqual(bodies[0]);
    expect(bodies[0].sites.map((s: { site_id: string }) => s.site_id)).toEqual([b, a]);
  });

  it("detail and health forms answer identically, including the 404 of a site hidden from the caller", async () => {
    const owner = await signup();
    const stranger = await signup();
    const siteId = await createSite(owner.token);
    for (const forms of [detailForms(siteId), healthForms(siteId)]) {
      const [v1, legacy] = await Promise.all(forms.map((p) => call(p, { token: owner.token })));
      expect(v1.status).toBe(200);
      expect(legacy.status).toBe(200);
      const strip = (j: Record<string, unknown>) => ({ ...j, last_updated: undefined });
      expect(strip(legacy.json)).toEqual(strip(v1.json));
      expectDeprecation(forms[1], legacy.headers);
      for (const p of forms) {
        const denied = await call(p, { token: stranger.token });
        expect(denied.status, p).toBe(404);
        expect(denied.json, p).toEqual({ detail: `Site with ID '${siteId}' not found` });
        expectDeprecation(p, denied.headers);
      }
    }
    for (const p of [...detailForms("NO-SUCH-SITE"), ...healthForms("NO-SUCH-SITE")]) {
      const res = await call(p, { token: owner.token });
      expect(res.status, p).toBe(404);
      expect(res.json, p).toEqual({ detail: "Site with ID 'NO-SUCH-SITE' not found" });
    }
  });

  it("create works on every form", async () => {
    const owner = await signup();
    for (const path of CREATE_FORMS) {
      const siteId = unique("FORM-");
      const res = await call(path, { method: "POST", token: owner.token, body: { site_id: siteId, name: "Form store" } });
      expect(res.status, path).toBe(201);
      expect(res.json).toEqual({ message: expect.any(String), site_id: siteId, name: "Form store" });
      expectDeprecation(path, res.headers);
    }
  });
});

describe("create", () => {
  it("returns 201 and makes the creator the owner", async () => {
    const owner = await signup();
    const siteId = unique("STORE-");
    const res = await call("/api/v1/sites/sites", {
      method: "POST", token: owner.token,
      body: { site_id: siteId, name: "Main Street", description: "Flagship", location: "Main St 1" },
    });
    expect(res.status).toBe(201);
    expect(res.json).toEqual({ message: expect.any(String), site_id: siteId, name: "Main Street" });
    const membership = await db().select().from(schema.siteMemberships)
      .where(and(eq(schema.siteMemberships.siteId, siteId), eq(schema.siteMemberships.userId, owner.id))).get();
    expect(membership?.role).toBe("owner");
    const detail = await call(`/api/v1/sites/${siteId}`, { token: owner.token });
    expect(detail.json).toEqual({
      site_id: siteId, name: "Main Street", description: "Flagship", location: "Main St 1",
      is_active: true, tenant_id: null, time_zone: "UTC",
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/),
      updated_at: expect.stringMatching(/Z$/),
    });
  });

  it("generates SITE-XXXX-XXXX when no site_id is given", async () => {
    const owner = await signup();
    const res = await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { name: "No id" } });
    expect(res.status).toBe(201);
    expect(res.json.site_id).toMatch(/^SITE-[2-9A-HJKMNP-Z]{4}-[2-9A-HJKMNP-Z]{4}$/);
    expect((await call(`/api/v1/sites/${res.json.site_id}`, { token: owner.token })).status).toBe(200);
  });

  it("answers 409 for a duplicate site_id, whoever asks", async () => {
    const owner = await signup();
    const other = await signup();
    const siteId = await createSite(owner.token);
    const dup = await call("/api/v1/sites/sites", { method: "POST", token: other.token, body: { site_id: siteId, name: "Again" } });
    expect(dup.status).toBe(409);
    expect(dup.json).toEqual({ detail: expect.stringContaining(siteId) });
    // the other user did not become a member of the existing site
    expect((await call(`/api/v1/sites/${siteId}`, { token: other.token })).status).toBe(404);
  });

  it("gives one success and 409s when the same id is created concurrently", async () => {
    const owner = await signup();
    const siteId = unique("RACE-");
    const results = await Promise.all(Array.from({ length: 5 }, () =>
      call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { site_id: siteId, name: "Race" } })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
  });

  it("validates the body with 422", async () => {
    const owner = await signup();
    for (const body of [{}, { name: "" }, { name: "   " }, { name: 5 }, { name: "x", site_id: "bad id/with slash" }, { name: "x", site_id: "" }]) {
      const res = await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body });
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(Array.isArray(res.json.detail)).toBe(true);
    }
  });
});

describe("access", () => {
  it("filters the list to accessible sites", async () => {
    const a = await signup();
    const b = await signup();
    const siteA = await createSite(a.token);
    const siteB = await createSite(b.token);
    const listA = (await call("/api/v1/sites/sites", { token: a.token })).json.sites.map((s: { site_id: string }) => s.site_id);
    expect(listA).toContain(siteA);
    expect(listA).not.toContain(siteB);
    const fresh = await signup();
    expect((await call("/api/v1/sites/sites", { token: fresh.token })).json).toEqual({ sites: [] });
  });

  it("list items carry only the list fields", async () => {
    const a = await signup();
    await createSite(a.token, { description: "d", location: "l" });
    const [item] = (await call("/api/v1/sites/sites", { token: a.token })).json.sites;
    expect(Object.keys(item).sort()).toEqual(["created_at", "description", "location", "name", "site_id"]);
  });

  it("lets an administrator see and read every site", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const a = await admin();
    const list = (await call("/api/v1/sites/sites", { token: a.token })).json.sites.map((s: { site_id: string }) => s.site_id);
    expect(list).toContain(siteId);
    const total = await db().select().from(schema.sites).all();
    expect(list.length).toBe(total.length);
    expect((await call(`/api/v1/sites/${siteId}`, { token: a.token })).status).toBe(200);
    expect((await call(`/api/v1/sites/${siteId}/health`, { token: a.token })).status).toBe(200);
  });

  it("gives a non-member the very 404 of an unknown site on detail and health, and records permission_denied", async () => {
    const owner = await signup();
    const stranger = await signup();
    const siteId = await createSite(owner.token);
    const unknownId = unique("SITE-");
    for (const suffix of ["", "/health"]) {
      const hidden = await call(`/api/v1/sites/${siteId}${suffix}`, { token: stranger.token });
      const unknown = await call(`/api/v1/sites/${unknownId}${suffix}`, { token: stranger.token });
      expect(hidden.status).toBe(404);
      expect(unknown.status).toBe(404);
      // Byte for byte the same body once the id is swapped: nothing tells the two apart.
      expect(hidden.text.replace(siteId, "<id>")).toBe(unknown.text.replace(unknownId, "<id>"));
    }
    const denied = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.eventType, "permission_denied"), eq(schema.auditLogs.siteId, siteId))).all();
    expect(denied.length).toBe(2);
    // The caller is named in the metadata only: events whose user is the caller are theirs to read,
    // and this one would tell them the site exists.
    expect(denied[0].userId).toBeNull();
    expect(denied[0].eventMetadata).toMatchObject({ caller_user_id: stranger.id, answered: 404 });
    const own = await call("/api/v1/audit/events?limit=500", { token: stranger.token });
    expect(JSON.stringify(own.json)).not.toContain(siteId);
    const stats = await call("/api/v1/audit/statistics", { token: stranger.token });
    expect(stats.json.statistics.events_by_type.permission_denied ?? 0).toBe(0);
  });

  it("lets a viewer read detail and health", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await db().insert(schema.siteMemberships).values({ siteId, userId: viewer.id, role: "viewer" });
    expect((await call(`/api/v1/sites/${siteId}`, { token: viewer.token })).status).toBe(200);
    expect((await call(`/sites/${siteId}/health`, { token: viewer.token })).status).toBe(200);
    expect((await call("/sites", { token: viewer.token })).json.sites.map((s: { site_id: string }) => s.site_id)).toEqual([siteId]);
  });
});

describe("site health", () => {
  it("has zero counts for a site without devices", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const res = await call(`/api/v1/sites/${siteId}/health`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({
      site_id: siteId, total_devices: 0, healthy_devices: 0, offline_devices: 0, error_devices: 0,
      health_percentage: 0, status_summary: expect.any(String), devices: [],
      last_updated: expect.stringMatching(/Z$/), twin_in_sync_devices: 0, twin_drifted_devices: 0,
    });
  });

  it("counts the site's devices by status", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const other = await createSite(owner.token);
    const online = await insertDevice(siteId, "online", { ipAddress: "10.0.0.5", lastSeen: "2026-01-01T00:00:00.000Z" });
    await insertDevice(siteId, "online");
    await insertDevice(siteId, "offline");
    await insertDevice(siteId, "error");
    await insertDevice(other, "online");
    const res = await call(`/api/v1/sites/${siteId}/health`, { token: owner.token });
    expect(res.json).toMatchObject({ total_devices: 4, healthy_devices: 2, offline_devices: 1, error_devices: 1, health_percentage: 50 });
    expect(res.json.devices).toHaveLength(4);
    expect(res.json.devices.find((d: { device_id: string }) => d.device_id === online)).toEqual({
      device_id: online, name: `Till ${online}`, type: "pos_terminal", status: "online", ip_address: "10.0.0.5", last_seen: "2026-01-01T00:00:00.000Z",
    });
  });
});
