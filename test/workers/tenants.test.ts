import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, db, signup, unique } from "./helpers";

const createTenant = (token: string | undefined, body: Record<string, unknown>) =>
  call("/api/v1/tenants", { method: "POST", token, body });

describe("tenants", () => {
  it("administrators create tenants (201) with a given or generated id", async () => {
    const a = await admin();
    const tenantId = unique("T-");
    const res = await createTenant(a.token, { tenant_id: tenantId, name: "Chain" });
    expect(res.status).toBe(201);
    expect(res.json).toEqual({ tenant_id: tenantId, name: "Chain", created_at: expect.stringMatching(/Z$/) });
    const generated = await createTenant(a.token, { name: "Generated" });
    expect(generated.status).toBe(201);
    expect(generated.json.tenant_id).toMatch(/^TENANT-[2-9A-HJKMNP-Z]{4}-[2-9A-HJKMNP-Z]{4}$/);
    const list = await call("/api/v1/tenants", { token: a.token });
    expect(list.status).toBe(200);
    const ids = list.json.tenants.map((t: { tenant_id: string }) => t.tenant_id);
    expect(ids.slice(0, 2)).toEqual([generated.json.tenant_id, tenantId]);
    const audit = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "tenant_created")).all();
    expect(audit.some((e) => (e.eventMetadata as { tenant_id?: string }).tenant_id === tenantId)).toBe(true);
  });

  it("answers 409 for a duplicate tenant id and 422 for a bad body", async () => {
    const a = await admin();
    const tenantId = unique("T-");
    await createTenant(a.token, { tenant_id: tenantId, name: "One" });
    const dup = await createTenant(a.token, { tenant_id: tenantId, name: "Two" });
    expect(dup.status).toBe(409);
    expect(dup.json).toEqual({ detail: expect.stringContaining(tenantId) });
    expect((await createTenant(a.token, { name: "" })).status).toBe(422);
    expect((await createTenant(a.token, { name: "x", tenant_id: "has space" })).status).toBe(422);
  });

  it("gives one 201 and 409s when the same tenant id is created concurrently", async () => {
    const a = await admin();
    const tenantId = unique("T-");
    const results = await Promise.all(Array.from({ length: 5 }, () => createTenant(a.token, { tenant_id: tenantId, name: "Race" })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
  });

  it("refuses non-administrators (403) and anonymous callers (401)", async () => {
    const user = await signup();
    expect((await createTenant(user.token, { name: "Mine" })).status).toBe(403);
    expect((await call("/api/v1/tenants", { token: user.token })).status).toBe(403);
    expect((await createTenant(undefined, { name: "Mine" })).status).toBe(401);
    expect((await call("/api/v1/tenants")).status).toBe(401);
  });

  it("tenant members: owners and administrators manage, members read (403 for more), to others the tenant does not exist", async () => {
    const a = await admin();
    const tenantId = (await createTenant(a.token, { name: "Members" })).json.tenant_id;
    const owner = await signup();
    const viewer = await signup();
    const stranger = await signup();
    const add = (token: string, body: Record<string, unknown>) =>
      call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token, body });
    const first = await add(a.token, { user_id: owner.id, role: "owner" });
    expect(first.status).toBe(201);
    expect(first.json).toMatchObject({ user_id: owner.id, email: owner.email, role: "owner" });
    const invited = await add(owner.token, { email: viewer.email, role: "viewer" });
    expect(invited.status).toBe(202);
    const accepted = await call("/api/v1/invitations/accept", { method: "POST", token: viewer.token, body: { invitation_code: invited.json.invitation_code } });
    expect(accepted.status).toBe(200);
    expect((await add(viewer.token, { user_id: stranger.id, role: "viewer" })).status).toBe(403);
    const hidden = { detail: `Tenant with ID '${tenantId}' not found` };
    const selfGrant = await add(stranger.token, { user_id: stranger.id, role: "owner" });
    expect([selfGrant.status, selfGrant.json]).toEqual([404, hidden]);

    const list = await call(`/api/v1/tenants/${tenantId}/members`, { token: viewer.token });
    expect(list.status).toBe(200);
    expect(list.json.members.map((m: { user_id: number }) => m.user_id).sort()).toEqual([owner.id, viewer.id].sort());
    const strangerList = await call(`/api/v1/tenants/${tenantId}/members`, { token: stranger.token });
    expect([strangerList.status, strangerList.json]).toEqual([404, hidden]);

    expect((await call(`/api/v1/tenants/${tenantId}/members/${viewer.id}`, { method: "DELETE", token: viewer.token })).status).toBe(403);
    const removed = await call(`/api/v1/tenants/${tenantId}/members/${viewer.id}`, { method: "DELETE", token: owner.token });
    expect(removed.status).toBe(200);
    expect(removed.json).toEqual({ user_id: viewer.id, role: "viewer" });
    expect((await call(`/api/v1/tenants/${tenantId}/members/${viewer.id}`, { method: "DELETE", token: owner.token })).status).toBe(404);
    expect((await call(`/api/v1/tenants/${tenantId}/members`, { token: viewer.token })).status).toBe(404);
  });

  it("answers 404 for an unknown tenant", async () => {
    const a = await admin();
    const res = await call("/api/v1/tenants/NO-SUCH-TENANT/members", { token: a.token });
    expect(res.status).toBe(404);
    expect(res.json.detail).toContain("NO-SUCH-TENANT");
    expect((await call("/api/v1/tenants/NO-SUCH-TENANT/members", { method: "POST", token: a.token, body: { user_id: 1, role: "viewer" } })).status).toBe(404);
  });
});
