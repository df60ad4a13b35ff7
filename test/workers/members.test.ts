import { describe, expect, it } from "vitest";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, grantSiteRole, signup } from "./helpers";

const members = (siteId: string) => `/api/v1/sites/${siteId}/members`;

async function addMember(token: string, siteId: string, body: Record<string, unknown>) {
  return call(members(siteId), { method: "POST", token, body });
}

async function siteWithRoles() {
  const owner = await signup();
  const operator = await signup();
  const viewer = await signup();
  const stranger = await signup();
  const siteId = await createSite(owner.token);
  await grantSiteRole(owner.token, siteId, operator, "operator");
  await grantSiteRole(owner.token, siteId, viewer, "viewer");
  return { owner, operator, viewer, stranger, siteId };
}

describe("site members", () => {
  it("lets the owner add members, and lists them", async () => {
    const { owner, operator, viewer, siteId } = await siteWithRoles();
    const res = await call(members(siteId), { token: owner.token });
    expect(res.status).toBe(200);
    const byUser = Object.fromEntries(res.json.members.map((m: { user_id: number; role: string }) => [m.user_id, m.role]));
    expect(byUser).toEqual({ [owner.id]: "owner", [operator.id]: "operator", [viewer.id]: "viewer" });
    const entry = res.json.members.find((m: { user_id: number }) => m.user_id === viewer.id);
    expect(entry).toEqual({ user_id: viewer.id, email: viewer.email, username: expect.any(String), role: "viewer", created_at: expect.stringMatching(/Z$/) });
  });

  it("answers the membership on a role change and records site_member_added", async () => {
    const owner = await signup();
    const newcomer = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, newcomer, "viewer");
    const res = await addMember(owner.token, siteId, { user_id: newcomer.id, role: "operator" });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ user_id: newcomer.id, email: newcomer.email, role: "operator" });
    const audit = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.eventType, "site_member_added"), eq(schema.auditLogs.siteId, siteId))).all();
    // one when the invitation was applied, one for the role change
    expect(audit).toHaveLength(2);
    expect(audit.map((a) => a.userId)).toEqual([owner.id, owner.id]);
    expect(audit.map((a) => (a.eventMetadata as { role: string }).role).sort()).toEqual(["operator", "viewer"]);
  });

  it("changes the role of an existing member instead of duplicating it", async () => {
    const { owner, viewer, siteId } = await siteWithRoles();
    const res = await addMember(owner.token, siteId, { user_id: viewer.id, role: "operator" });
    expect(res.status).toBe(201);
    const rows = await db().select().from(schema.siteMemberships)
      .where(and(eq(schema.siteMemberships.siteId, siteId), eq(schema.siteMemberships.userId, viewer.id))).all();
    expect(rows.map((r) => r.role)).toEqual(["operator"]);
  });

  it("refuses viewers and operators adding members (403); to strangers the site does not exist (404)", async () => {
    const { operator, viewer, stranger, siteId } = await siteWithRoles();
    const extra = await signup();
    for (const who of [viewer, operator]) {
      const res = await addMember(who.token, siteId, { email: extra.email, role: "owner" });
      expect(res.status).toBe(403);
      expect(res.json).toEqual({ detail: "The owner role on this site is required" });
    }
    const hidden = await addMember(stranger.token, siteId, { email: extra.email, role: "owner" });
    expect(hidden.status).toBe(404);
    expect(hidden.json).toEqual({ detail: `Site with ID '${siteId}' not found` });
    // a viewer cannot promote themselves
    expect((await addMember(viewer.token, siteId, { user_id: viewer.id, role: "owner" })).status).toBe(403);
    const rows = await db().select().from(schema.siteMemberships).where(eq(schema.siteMemberships.siteId, siteId)).all();
    expect(rows.map((r) => r.userId)).not.toContain(extra.id);
    expect(rows.find((r) => r.userId === viewer.id)?.role).toBe("viewer");
    const hiddenList = await call(members(siteId), { token: stranger.token });
    expect(hiddenList.status).toBe(404);
    expect(hiddenList.json).toEqual({ detail: `Site with ID '${siteId}' not found` });
    expect((await call(members(siteId))).status).toBe(401);
  });

  it("lets an administrator manage any site's members", async () => {
    const { siteId, stranger } = await siteWithRoles();
    const a = await admin();
    expect((await addMember(a.token, siteId, { user_id: stranger.id, role: "viewer" })).status).toBe(201);
    expect((await call(`/api/v1/sites/${siteId}`, { token: stranger.token })).status).toBe(200);
  });

  it("validates the body: exactly one of email or user_id, a known role", async () => {
    const { owner, viewer, siteId } = await siteWithRoles();
    for (const body of [{ role: "viewer" }, { email: viewer.email, user_id: viewer.id, role: "viewer" }, { user_id: viewer.id, role: "admin" }, { user_id: "x", role: "viewer" }]) {
      const res = await addMember(owner.token, siteId, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(Array.isArray(res.json.detail)).toBe(true);
    }
  });

  it("answers 404 for an unknown site, and for an unknown user id to administrators", async () => {
    const { owner, siteId } = await siteWithRoles();
    expect((await addMember((await admin()).token, siteId, { user_id: 99999999, role: "viewer" })).status).toBe(404);
    const missing = await call(members("NO-SUCH-SITE"), { token: owner.token });
    expect(missing.status).toBe(404);
    expect(missing.json.detail).toBe("Site with ID 'NO-SUCH-SITE' not found");
  });

  it("removes members (owner only) and keeps the last owner", async () => {
    const { owner, operator, viewer, siteId } = await siteWithRoles();
    expect((await call(`${members(siteId)}/${viewer.id}`, { method: "DELETE", token: operator.token })).status).toBe(403);
    const res = await call(`${members(siteId)}/${viewer.id}`, { method: "DELETE", token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ user_id: viewer.id, role: "viewer" });
    // Removed, the former viewer no longer sees the site at all.
    expect((await call(`/api/v1/sites/${siteId}`, { token: viewer.token })).status).toBe(404);
    expect((await call(`${members(siteId)}/${viewer.id}`, { method: "DELETE", token: owner.token })).status).toBe(404);
    const last = await call(`${members(siteId)}/${owner.id}`, { method: "DELETE", token: owner.token });
    expect(last.status).toBe(400);
    expect(last.json.detail).toMatch(/owner/);
    // with a second owner, the first may leave
    await addMember(owner.token, siteId, { user_id: operator.id, role: "owner" });
    expect((await call(`${members(siteId)}/${owner.id}`, { method: "DELETE", token: owner.token })).status).toBe(200);
    expect((await call(`/api/v1/sites/${siteId}`, { token: owner.token })).status).toBe(404);
  });

  it("keeps the last owner when the owner is demoted through add", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const res = await addMember(owner.token, siteId, { user_id: owner.id, role: "viewer" });
    expect(res.status).toBe(400);
    const row = await db().select().from(schema.siteMemberships)
      .where(and(eq(schema.siteMemberships.siteId, siteId), eq(schema.siteMemberships.userId, owner.id))).get();
    expect(row?.role).toBe("owner");
  });

  it("never leaves a site without an owner when two owners remove each other at once", async () => {
    const first = await signup();
    const second = await signup();
    const siteId = await createSite(first.token);
    await grantSiteRole(first.token, siteId, second, "owner");
    const results = await Promise.all([
      call(`${members(siteId)}/${second.id}`, { method: "DELETE", token: first.token }),
      call(`${members(siteId)}/${first.id}`, { method: "DELETE", token: second.token }),
      addMember(first.token, siteId, { user_id: first.id, role: "viewer" }),
      addMember(second.token, siteId, { user_id: second.id, role: "viewer" }),
    ]);
    expect(results.every((r) => r.status < 500)).toBe(true);
    const owners = await db().select().from(schema.siteMemberships)
      .where(and(eq(schema.siteMemberships.siteId, siteId), eq(schema.siteMemberships.role, "owner"))).all();
    expect(owners.length).toBeGreaterThanOrEqual(1);
  });
});

describe("tenant roles", () => {
  async function tenantSetup() {
    const a = await admin();
    const tenant = await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Chain" } });
    expect(tenant.status).toBe(201);
    const tenantId = tenant.json.tenant_id as string;
    const tenantOwner = await signup();
    const tenantViewer = await signup();
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: tenantOwner.id, role: "owner" } });
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: tenantViewer.id, role: "viewer" } });
    return { a, tenantId, tenantOwner, tenantViewer };
  }

  it("grant access to every site of the tenant", async () => {
    const { a, tenantId, tenantViewer } = await tenantSetup();
    const siteId = await createSite(a.token, { tenant_id: tenantId });
    const outside = await createSite(a.token);
    const list = (await call("/api/v1/sites/sites", { token: tenantViewer.token })).json.sites.map((s: { site_id: string }) => s.site_id);
    expect(list).toContain(siteId);
    expect(list).not.toContain(outside);
    const detail = await call(`/api/v1/sites/${siteId}`, { token: tenantViewer.token });
    expect(detail.status).toBe(200);
    expect(detail.json.tenant_id).toBe(tenantId);
    expect((await call(`/api/v1/sites/${siteId}/health`, { token: tenantViewer.token })).status).toBe(200);
    expect((await call(`/api/v1/sites/${outside}`, { token: tenantViewer.token })).status).toBe(404);
    // viewer through the tenant: may read members but not add them
    expect((await call(members(siteId), { token: tenantViewer.token })).status).toBe(200);
    const stranger = await signup();
    expect((await addMember(tenantViewer.token, siteId, { user_id: stranger.id, role: "viewer" })).status).toBe(403);
  });

  it("a tenant owner can create sites in the tenant and manage their members; others cannot create in it", async () => {
    const { tenantId, tenantOwner, tenantViewer } = await tenantSetup();
    const siteId = await createSite(tenantOwner.token, { tenant_id: tenantId });
    const stranger = await signup();
    expect((await addMember(tenantOwner.token, siteId, { email: stranger.email, role: "viewer" })).status).toBe(202);
    const refused = await call("/api/v1/sites/sites", { method: "POST", token: tenantViewer.token, body: { name: "Not mine", tenant_id: tenantId } });
    expect(refused.status).toBe(403);
    const unknown = await call("/api/v1/sites/sites", { method: "POST", token: tenantOwner.token, body: { name: "x", tenant_id: "NO-SUCH-TENANT" } });
    expect(unknown.status).toBe(404);
    // To a user with no role in the tenant, it does not exist.
    const hidden = await call("/api/v1/sites/sites", { method: "POST", token: stranger.token, body: { name: "x", tenant_id: tenantId } });
    expect(hidden.status).toBe(404);
    expect(hidden.json).toEqual({ detail: `Tenant with ID '${tenantId}' not found` });
  });

  it("the higher of site and tenant role applies", async () => {
    const { a, tenantId, tenantViewer } = await tenantSetup();
    const siteId = await createSite(a.token, { tenant_id: tenantId });
    await addMember(a.token, siteId, { user_id: tenantViewer.id, role: "owner" });
    const stranger = await signup();
    expect((await addMember(tenantViewer.token, siteId, { email: stranger.email, role: "viewer" })).status).toBe(202);
  });
});
