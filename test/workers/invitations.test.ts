import { describe, expect, it } from "vitest";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, grantSiteRole, login, signup, unique } from "./helpers";
import { installWorkerClock } from "./clock";

const members = (siteId: string) => `/api/v1/sites/${siteId}/members`;
const invitations = (siteId: string) => `/api/v1/sites/${siteId}/invitations`;
const add = (token: string, siteId: string, body: Record<string, unknown>) => call(members(siteId), { method: "POST", token, body });
const siteRole = async (siteId: string, userId: number) =>
  (await db().select().from(schema.siteMemberships)
    .where(and(eq(schema.siteMemberships.siteId, siteId), eq(schema.siteMemberships.userId, userId))).get())?.role;
const nobody = () => `${unique("nobody")}@example.com`;
const accept = (token: string, code: string) => call("/api/v1/invitations/accept", { method: "POST", token, body: { invitation_code: code } });

describe("site members by e-mail are invitations", () => {
  it("answers the same whether or not an account has the address, and changes nothing yet", async () => {
    const owner = await signup();
    const existing = await signup();
    const siteId = await createSite(owner.token);
    const known = await add(owner.token, siteId, { email: existing.email, role: "viewer" });
    const unknown = await add(owner.token, siteId, { email: nobody(), role: "viewer" });
    expect(known.status).toBe(202);
    expect(unknown.status).toBe(202);
    expect(Object.keys(known.json).sort()).toEqual(Object.keys(unknown.json).sort());
    expect(known.json).toEqual({
      invitation_id: expect.any(String), email: existing.email, role: "viewer", invited_by: owner.id,
      created_at: expect.stringMatching(/Z$/), expires_at: expect.stringMatching(/Z$/), invitation_code: expect.stringMatching(/^inv_[\w-]{43}$/),
    });
    expect(known.json.invitation_code).not.toBe(unknown.json.invitation_code);
    expect(JSON.stringify(known.json)).not.toContain(`"user_id"`);
    // Nothing changes until the invitee accepts: no access, not a member.
    expect((await call(`/api/v1/sites/${siteId}`, { token: existing.token })).status).toBe(404);
    expect((await call(members(siteId), { token: owner.token })).json.members.map((m: { user_id: number }) => m.user_id)).toEqual([owner.id]);
    // The code is kept only as a digest, and never listed again.
    const stored = await db().select().from(schema.invitations).where(eq(schema.invitations.invitationId, known.json.invitation_id)).get();
    expect(stored?.codeDigest).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(stored)).not.toContain(known.json.invitation_code);
    expect(JSON.stringify((await call(invitations(siteId), { token: owner.token })).json)).not.toContain(known.json.invitation_code);
  });

  it("are not collected by whoever signs up or logs in with the address first: the address alone grants nothing", async () => {
    const owner = await signup();
    const existing = await signup();
    const siteId = await createSite(owner.token);
    const address = nobody();
    expect((await add(owner.token, siteId, { email: address, role: "operator" })).status).toBe(202);
    expect((await add(owner.token, siteId, { email: existing.email, role: "operator" })).status).toBe(202);
    const squatter = await signup({ email: address });
    await login(existing);
    for (const who of [squatter, existing]) {
      expect((await call(`/api/v1/sites/${siteId}`, { token: who.token })).status).toBe(404);
      expect(await siteRole(siteId, who.id)).toBeUndefined();
    }
    expect((await call(invitations(siteId), { token: owner.token })).json.invitations).toHaveLength(2);
  });

  it("are accepted with the code, once, from an account with the invited address, compared case-insensitively", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const address = `${unique("New")}@Example.COM`;
    const invited = await add(owner.token, siteId, { email: address, role: "operator" });
    expect(invited.status).toBe(202);
    const newcomer = await signup({ email: address.toLowerCase() });

    const accepted = await accept(newcomer.token, invited.json.invitation_code);
    expect(accepted.status, accepted.text).toBe(200);
    expect(accepted.json).toEqual({ invitation_id: invited.json.invitation_id, scope: "site", site_id: siteId, tenant_id: null, role: "operator" });
    expect((await call(`/api/v1/sites/${siteId}`, { token: newcomer.token })).status).toBe(200);
    expect(await siteRole(siteId, newcomer.id)).toBe("operator");
    expect((await call(invitations(siteId), { token: owner.token })).json.invitations).toEqual([]);
    const audit = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.eventType, "site_member_added"), eq(schema.auditLogs.siteId, siteId))).all();
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ userId: owner.id, eventMetadata: { member_user_id: newcomer.id, role: "operator", accepted_with: "code" } });

    // Used: a second accept finds nothing.
    expect((await accept(newcomer.token, invited.json.invitation_code)).status).toBe(404);
  });

  it("refuses the code from an account with another address (403), and unknown or voided codes (404), changing nothing", async () => {
    const owner = await signup();
    const other = await signup();
    const siteId = await createSite(owner.token);
    const address = nobody();
    const first = await add(owner.token, siteId, { email: address, role: "viewer" });
    const forwarded = await accept(other.token, first.json.invitation_code);
    expect(forwarded.status).toBe(403);
    expect(forwarded.json.detail).toMatch(/another e-mail address/);
    expect(await siteRole(siteId, other.id)).toBeUndefined();

    // Inviting the address again voids the first code.
    const second = await add(owner.token, siteId, { email: address, role: "operator" });
    const invitee = await signup({ email: address });
    for (const code of [first.json.invitation_code, "inv_not-a-real-code", "not even the shape"]) {
      const refused = await accept(invitee.token, code);
      expect(refused.status, code).toBe(404);
      expect(refused.json).toEqual({ detail: expect.stringMatching(/Invitation not found/) });
    }
    expect(await siteRole(siteId, invitee.id)).toBeUndefined();
    expect((await accept(invitee.token, second.json.invitation_code)).status).toBe(200);
    expect(await siteRole(siteId, invitee.id)).toBe("operator");

    expect((await call("/api/v1/invitations/accept", { method: "POST", body: { invitation_code: second.json.invitation_code } })).status).toBe(401);
    expect((await call("/api/v1/invitations/accept", { method: "POST", token: invitee.token, body: {} })).status).toBe(422);
  });

  it("never lower a role the account already has", async () => {
    const owner = await signup();
    const existing = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, existing, "operator");
    const invited = await add(owner.token, siteId, { email: existing.email.toUpperCase(), role: "viewer" });
    const accepted = await accept(existing.token, invited.json.invitation_code);
    expect(accepted.status).toBe(200);
    expect(await siteRole(siteId, existing.id)).toBe("operator");
  });

  it("cannot be accepted once expired", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const address = nobody();
    const invited = await add(owner.token, siteId, { email: address, role: "viewer" });
    const invitee = await signup({ email: address });
    const clock = installWorkerClock();
    try {
      clock.advance(7 * 24 * 3_600_000 + 1_000);
      // A week later the old tokens are long expired: both sign in again.
      const ownerToken = await login(owner);
      const pending = await call(invitations(siteId), { token: ownerToken });
      expect(pending.status, pending.text).toBe(200);
      expect(pending.json.invitations).toEqual([]);
      const late = await accept(await login(invitee), invited.json.invitation_code);
      expect(late.status).toBe(404);
      expect(await siteRole(siteId, invitee.id)).toBeUndefined();
    } finally {
      clock.restore();
    }
  });
});

describe("pending invitations", () => {
  it("are listed and revoked by owners only, and a revoked one is never applied", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const first = nobody();
    const second = nobody();
    const a = await add(owner.token, siteId, { email: first, role: "viewer" });
    await add(owner.token, siteId, { email: second.toUpperCase(), role: "operator" });

    const list = await call(invitations(siteId), { token: owner.token });
    expect(list.status).toBe(200);
    expect(list.json.invitations.map((i: { email: string; role: string }) => [i.email, i.role])).toEqual([[second, "operator"], [first, "viewer"]]);
    expect((await call(invitations(siteId), { token: viewer.token })).status).toBe(403);
    expect((await call(`${invitations(siteId)}/${a.json.invitation_id}`, { method: "DELETE", token: viewer.token })).status).toBe(403);

    const revoked = await call(`${invitations(siteId)}/${a.json.invitation_id}`, { method: "DELETE", token: owner.token });
    expect(revoked.status).toBe(200);
    expect(revoked.json).toMatchObject({ invitation_id: a.json.invitation_id, email: first });
    expect((await call(`${invitations(siteId)}/${a.json.invitation_id}`, { method: "DELETE", token: owner.token })).status).toBe(404);
    expect((await call(invitations(siteId), { token: owner.token })).json.invitations.map((i: { email: string }) => i.email)).toEqual([second]);
    const late = await signup({ email: first });
    expect((await accept(late.token, a.json.invitation_code)).status).toBe(404);
    expect((await call(`/api/v1/sites/${siteId}`, { token: late.token })).status).toBe(404);
  });
});

describe("site members by user id", () => {
  it("are added by administrators only; an owner may re-role an existing member, and learns nothing about other ids", async () => {
    const owner = await signup();
    const member = await signup();
    const stranger = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, member, "viewer");

    const existingUser = await add(owner.token, siteId, { user_id: stranger.id, role: "viewer" });
    const missingUser = await add(owner.token, siteId, { user_id: 99_999_999, role: "viewer" });
    expect(existingUser.status).toBe(403);
    expect(missingUser.status).toBe(403);
    expect(existingUser.json).toEqual(missingUser.json);
    expect(await siteRole(siteId, stranger.id)).toBeUndefined();

    const rerole = await add(owner.token, siteId, { user_id: member.id, role: "operator" });
    expect(rerole.status).toBe(201);
    expect(rerole.json).toMatchObject({ user_id: member.id, role: "operator" });

    const a = await admin();
    expect((await add(a.token, siteId, { user_id: stranger.id, role: "viewer" })).status).toBe(201);
    expect((await add(a.token, siteId, { user_id: 99_999_999, role: "viewer" })).status).toBe(404);
  });
});

describe("member lists and the audit trail", () => {
  it("show e-mail addresses to owners and administrators only", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const seenBy = async (token: string) => (await call(members(siteId), { token })).json.members as Record<string, unknown>[];

    const forViewer = await seenBy(viewer.token);
    expect(forViewer).toHaveLength(2);
    for (const m of forViewer) expect(Object.keys(m).sort()).toEqual(["created_at", "role", "user_id", "username"]);
    expect(JSON.stringify(forViewer)).not.toContain("@");

    for (const token of [owner.token, (await admin()).token]) {
      const full = await seenBy(token);
      expect(full.map((m) => m.email).sort()).toEqual([owner.email, viewer.email].sort());
    }
  });

  it("never name a member's or an invitee's address to the site's other members", async () => {
    const owner = await signup();
    const viewer = await signup();
    const operator = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    await grantSiteRole(owner.token, siteId, operator, "viewer");
    await add(owner.token, siteId, { user_id: operator.id, role: "operator" });
    const invitee = nobody();
    await add(owner.token, siteId, { email: invitee, role: "viewer" });
    const trail = await call("/api/v1/audit/events?limit=500", { token: viewer.token });
    expect(trail.status).toBe(200);
    const siteEvents = trail.json.events.filter((e: { site_id: string | null }) => e.site_id === siteId);
    expect(siteEvents.map((e: { event_type: string }) => e.event_type)).toEqual(expect.arrayContaining(["site_member_added", "site_member_invited"]));
    for (const address of [operator.email, invitee]) expect(JSON.stringify(siteEvents)).not.toContain(address);
  });
});

describe("tenant members", () => {
  it("follow the same rules: invitations by e-mail, user ids for administrators, addresses for owners", async () => {
    const a = await admin();
    const tenantId = (await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Chain" } })).json.tenant_id as string;
    const tenantMembers = `/api/v1/tenants/${tenantId}/members`;
    const owner = await signup();
    const existing = await signup();
    const stranger = await signup();
    expect((await call(tenantMembers, { method: "POST", token: a.token, body: { user_id: owner.id, role: "owner" } })).status).toBe(201);
    const siteId = await createSite(owner.token, { tenant_id: tenantId });

    const known = await call(tenantMembers, { method: "POST", token: owner.token, body: { email: existing.email, role: "viewer" } });
    const unknown = await call(tenantMembers, { method: "POST", token: owner.token, body: { email: nobody(), role: "viewer" } });
    expect([known.status, unknown.status]).toEqual([202, 202]);
    expect(Object.keys(known.json).sort()).toEqual(Object.keys(unknown.json).sort());
    const byId = await call(tenantMembers, { method: "POST", token: owner.token, body: { user_id: stranger.id, role: "viewer" } });
    const byMissingId = await call(tenantMembers, { method: "POST", token: owner.token, body: { user_id: 99_999_999, role: "viewer" } });
    expect([byId.status, byMissingId.status]).toEqual([403, 403]);
    expect(byId.json).toEqual(byMissingId.json);

    expect((await call(`/api/v1/sites/${siteId}`, { token: existing.token })).status).toBe(404);
    const joined = await accept(existing.token, known.json.invitation_code);
    expect(joined.json).toMatchObject({ scope: "tenant", tenant_id: tenantId, site_id: null, role: "viewer" });
    expect((await call(`/api/v1/sites/${siteId}`, { token: existing.token })).status).toBe(200);

    const forMember = (await call(tenantMembers, { token: existing.token })).json.members;
    expect(JSON.stringify(forMember)).not.toContain("@");
    const forOwner = (await call(tenantMembers, { token: owner.token })).json.members.map((m: { email?: string }) => m.email);
    expect(forOwner.sort()).toEqual([owner.email, existing.email].sort());

    const pending = await call(`/api/v1/tenants/${tenantId}/invitations`, { token: owner.token });
    expect(pending.status).toBe(200);
    expect(pending.json.invitations).toHaveLength(1);
    expect((await call(`/api/v1/tenants/${tenantId}/invitations`, { token: existing.token })).status).toBe(403);
    const revoked = await call(`/api/v1/tenants/${tenantId}/invitations/${pending.json.invitations[0].invitation_id}`, { method: "DELETE", token: owner.token });
    expect(revoked.status).toBe(200);
    expect((await call(`/api/v1/tenants/${tenantId}/invitations`, { token: owner.token })).json.invitations).toEqual([]);
  });
});
