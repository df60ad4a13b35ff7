import { describe, expect, it } from "vitest";
import { admin, call, createSite, grantSiteRole, signup } from "./helpers";
import { hub } from "./agents-helpers";
import { openSocket, openStream } from "./live-helpers";

const REVOKED = { code: 4403, reason: "access revoked" };
const ws = (siteId: string) => `/api/v1/sites/${siteId}/ws`;
const events = (siteId: string) => `/api/v1/sites/${siteId}/events`;
const subscriptions = async (siteId: string) => (await hub(siteId).subscribers(siteId)).subscriptions;

/** Publishes a marker on the site's channel; `got` tells whether a subscriber's messages include it. */
async function publishMarker(siteId: string) {
  // The RPC stub types a reply holding `unknown` as never; the hub answers a LiveEvent.
  const event = (await hub(siteId).publish(siteId, "test.marker", { at: Date.now() })) as unknown as { seq: number };
  return { seq: event.seq, got: (messages: { seq?: number }[]) => messages.some((m) => m.seq === event.seq) };
}

async function tenantWithSites(count: number) {
  const a = await admin();
  const tenant = await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Chain" } });
  const tenantId = tenant.json.tenant_id as string;
  const siteIds: string[] = [];
  for (let i = 0; i < count; i++) siteIds.push(await createSite(a.token, { tenant_id: tenantId }));
  return { a, tenantId, siteIds };
}

describe("revocation reaches open live connections", () => {
  it("removing a member closes their WebSocket (4403) and event stream at once; the owner's keep streaming", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const socket = await openSocket(ws(siteId), { token: viewer.token });
    const stream = await openStream(events(siteId), { token: viewer.token });
    const ownerSocket = await openSocket(ws(siteId), { token: owner.token });
    expect([socket.status, stream.status, ownerSocket.status]).toEqual([101, 200, 101]);

    expect((await call(`/api/v1/sites/${siteId}/members/${viewer.id}`, { method: "DELETE", token: owner.token })).status).toBe(200);
    expect(await socket.waitForClose!()).toEqual(REVOKED);
    expect(socket.messages!.at(-1)).toMatchObject({ type: "stream.revoked", site_id: siteId, data: { code: "access_revoked" } });
    await stream.stream!.waitForEnd();
    expect(stream.stream!.messages().at(-1)).toMatchObject({ type: "stream.revoked", site_id: siteId });

    const marker = await publishMarker(siteId);
    await ownerSocket.until!(() => marker.got(ownerSocket.messages!), "the owner to get the marker");
    expect(marker.got(socket.messages!)).toBe(false);
    expect(await subscriptions(siteId)).toEqual([{ user_id: owner.id, channel: "ws", role: "owner" }]);
    // and it cannot come back
    expect((await openSocket(ws(siteId), { token: viewer.token })).status).toBe(404);
  });

  it("lowering a role keeps the connection (every role that can subscribe gets the same events) and records the new role", async () => {
    const owner = await signup();
    const operator = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, operator, "operator");
    const socket = await openSocket(ws(siteId), { token: operator.token });
    const stream = await openStream(events(siteId), { token: operator.token });
    expect((await subscriptions(siteId)).map((s) => s.role)).toEqual(["operator", "operator"]);

    expect((await call(`/api/v1/sites/${siteId}/members`, { method: "POST", token: owner.token, body: { user_id: operator.id, role: "viewer" } })).status).toBe(201);
    expect((await subscriptions(siteId)).map((s) => [s.channel, s.role]).sort()).toEqual([["sse", "viewer"], ["ws", "viewer"]]);
    const marker = await publishMarker(siteId);
    await socket.until!(() => marker.got(socket.messages!), "the marker on the socket");
    await stream.stream!.until(() => marker.got(stream.stream!.messages()), "the marker on the stream");
    expect(socket.closed!()).toBeUndefined();
  });

  it("removing a tenant member closes their connections on every site of the tenant, except where a site role remains", async () => {
    const { a, tenantId, siteIds: [first, second, third] } = await tenantWithSites(3);
    const member = await signup();
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: member.id, role: "operator" } });
    await call(`/api/v1/sites/${third}/members`, { method: "POST", token: a.token, body: { user_id: member.id, role: "viewer" } });
    const onFirst = await openSocket(ws(first), { token: member.token });
    const onSecond = await openStream(events(second), { token: member.token });
    const onThird = await openSocket(ws(third), { token: member.token });
    expect([onFirst.status, onSecond.status, onThird.status]).toEqual([101, 200, 101]);
    expect(await subscriptions(third)).toEqual([{ user_id: member.id, channel: "ws", role: "operator" }]);

    expect((await call(`/api/v1/tenants/${tenantId}/members/${member.id}`, { method: "DELETE", token: a.token })).status).toBe(200);
    expect(await onFirst.waitForClose!()).toEqual(REVOKED);
    await onSecond.stream!.waitForEnd();
    expect(await subscriptions(third)).toEqual([{ user_id: member.id, channel: "ws", role: "viewer" }]);
    expect(onThird.closed!()).toBeUndefined();
  });

  it("deleting a user closes their connections on every site they could see", async () => {
    const owner = await signup();
    const member = await signup();
    const ownSite = await createSite(member.token);
    const invitedTo = await createSite(owner.token);
    await grantSiteRole(owner.token, invitedTo, member, "viewer");
    const sockets = [await openSocket(ws(ownSite), { token: member.token }), await openSocket(ws(invitedTo), { token: member.token })];
    const bystander = await openSocket(ws(invitedTo), { token: owner.token });

    expect((await call(`/api/v1/auth/users/${encodeURIComponent(member.email)}`, { method: "DELETE", token: (await admin()).token })).status).toBe(200);
    for (const s of sockets) expect(await s.waitForClose!()).toEqual(REVOKED);
    expect(await subscriptions(invitedTo)).toEqual([{ user_id: owner.id, channel: "ws", role: "owner" }]);
    expect(bystander.closed!()).toBeUndefined();
  });

  it("deactivating a user closes their connections and stops their token; reactivating lets them back", async () => {
    const member = await signup();
    const siteId = await createSite(member.token);
    const socket = await openSocket(ws(siteId), { token: member.token });
    const stream = await openStream(events(siteId), { token: member.token });
    const a = await admin();
    const path = `/api/v1/auth/users/${encodeURIComponent(member.email)}`;

    const off = await call(path, { method: "PATCH", token: a.token, body: { is_active: false } });
    expect(off.status).toBe(200);
    expect(off.json).toEqual({ success: true, message: expect.any(String), data: { email: member.email, is_active: false } });
    expect(await socket.waitForClose!()).toEqual(REVOKED);
    await stream.stream!.waitForEnd();
    expect((await call("/api/v1/auth/me", { token: member.token })).status).toBe(401);
    expect((await openSocket(ws(siteId), { token: member.token })).status).toBe(401);

    expect((await call(path, { method: "PATCH", token: a.token, body: { is_active: true } })).status).toBe(200);
    expect((await openSocket(ws(siteId), { token: member.token })).status).toBe(101);
    expect((await call(path, { method: "PATCH", token: member.token, body: { is_active: false } })).status).toBe(403);
    expect((await call("/api/v1/auth/users/nobody-at-all%40example.com", { method: "PATCH", token: a.token, body: { is_active: false } })).status).toBe(404);
  });

  it("revoking a ticket closes the subscription it opened (only that one), and an unused ticket can no longer be redeemed", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const ticket = async () => (await call(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", token: owner.token })).json as { ticket: string; ticket_id: string };
    const used = await ticket();
    const byTicket = await openSocket(`${ws(siteId)}?ticket=${used.ticket}`);
    const byToken = await openSocket(ws(siteId), { token: owner.token });
    expect([byTicket.status, byToken.status]).toEqual([101, 101]);

    const stranger = await signup();
    const revoke = (id: string, token: string) => call(`/api/v1/sites/${siteId}/ws-ticket/${id}`, { method: "DELETE", token });
    expect((await revoke(used.ticket_id, stranger.token)).status).toBe(404);
    const revoked = await revoke(used.ticket_id, owner.token);
    expect(revoked.status).toBe(200);
    expect(revoked.json).toEqual({ ticket_id: used.ticket_id, revoked_unused: false, closed_subscriptions: 1 });
    expect(await byTicket.waitForClose!()).toEqual(REVOKED);
    expect(byToken.closed!()).toBeUndefined();

    const unused = await ticket();
    expect((await revoke(unused.ticket_id, owner.token)).json).toEqual({ ticket_id: unused.ticket_id, revoked_unused: true, closed_subscriptions: 0 });
    expect((await openSocket(`${ws(siteId)}?ticket=${unused.ticket}`)).status).toBe(401);
    expect((await revoke(unused.ticket_id, owner.token)).status).toBe(404);
    expect((await revoke("not-a-ticket-id", owner.token)).status).toBe(422);
  });
});
