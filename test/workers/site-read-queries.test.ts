// How many D1 statements a signed-in user's site read costs the Worker. Site health and the device
// list are answered by the site's hub from its roster; what is left in the Worker is the
// authentication and the access check, which must come to one statement together (the user, the
// site and the caller's role), whichever way the role is granted, and to none when this isolate
// answered the same question less than SITE_ACCESS_CACHE_TTL_MS ago (src/services/site-access-cache.ts).
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, grantSiteRole, signup } from "./helpers";
import { registerDevice } from "./device-helpers";
import { countingD1 } from "./d1-counter";
import { installWorkerClock } from "./clock";
import { SITE_ACCESS_CACHE_TTL_MS } from "../../src/services/site-access-cache";

const READS = (siteId: string) => [`/api/v1/sites/${siteId}/health`, `/api/v1/devices/sites/${siteId}/devices`, `/api/v1/sites/${siteId}`];

/** Sends one request through the app with a counting D1 binding; the request log is off so only the route's own statements count. */
async function measured(path: string, token: string, method = "GET") {
  const counter = countingD1(env.DB);
  const ctx = createExecutionContext();
  const response = await createApp().request(path, { method, headers: { Authorization: `Bearer ${token}` } }, { ...env, DB: counter.binding, REQUEST_LOG_ENABLED: "false" }, ctx);
  const body = await response.json();
  await waitOnExecutionContext(ctx);
  return { status: response.status, body, statements: counter.statements, roundTrips: counter.roundTrips };
}

let clock: ReturnType<typeof installWorkerClock>;
beforeEach(() => {
  clock = installWorkerClock();
});
afterEach(() => clock.restore());

/** Past the cached answers' lifetime: the next read asks D1 again, as another isolate's first read would. */
const expireCachedAccess = () => clock.advance(SITE_ACCESS_CACHE_TTL_MS);

describe("D1 statements per site read", () => {
  it("a site member's site health, device list and site detail each cost one D1 statement", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    await registerDevice(owner.token, siteId);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    for (const user of [owner, viewer]) {
      for (const path of READS(siteId)) {
        expireCachedAccess();
        const read = await measured(path, user.token);
        expect(read.status, path).toBe(200);
        expect(read.roundTrips, `${path}: ${read.statements.join(" | ")}`).toBe(1);
      }
    }
  });

  it("a role through the site's tenant, and an administrator's, cost one statement too", async () => {
    const a = await admin();
    const tenant = await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Counted chain" } });
    const tenantId = tenant.json.tenant_id as string;
    const tenantViewer = await signup();
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: tenantViewer.id, role: "viewer" } });
    const siteId = await createSite(a.token, { tenant_id: tenantId });
    for (const user of [tenantViewer, a]) {
      for (const path of READS(siteId)) {
        expireCachedAccess();
        const read = await measured(path, user.token);
        expect(read.status, path).toBe(200);
        expect(read.roundTrips, `${path}: ${read.statements.join(" | ")}`).toBe(1);
      }
    }
  });

  it("still refuses with the answers the access rules give, a deactivated user first of all", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const stranger = await signup();
    const hidden = await measured(`/api/v1/sites/${siteId}/health`, stranger.token);
    expect(hidden).toMatchObject({ status: 404, body: { detail: `Site with ID '${siteId}' not found` } });
    expireCachedAccess();
    const unknown = await measured(`/api/v1/sites/NO-SUCH-SITE/health`, owner.token);
    expect(unknown).toMatchObject({ status: 404, body: { detail: "Site with ID 'NO-SUCH-SITE' not found" } });
    expect(unknown.roundTrips).toBe(1);
    // A member deactivated after their token was issued: 401, as on every user route.
    const member = await signup();
    await grantSiteRole(owner.token, siteId, member, "owner");
    await db().update(schema.users).set({ isActive: false }).where(eq(schema.users.id, member.id));
    expect(await measured(`/api/v1/sites/${siteId}/health`, member.token)).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } });
  });
});

describe("cached access on site reads", () => {
  it("a second read within the cache's lifetime costs no D1 statement, and a read after it one again", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    await registerDevice(owner.token, siteId);
    expireCachedAccess();
    expect((await measured(`/api/v1/sites/${siteId}/health`, owner.token)).roundTrips).toBe(1);
    for (const path of READS(siteId)) {
      const read = await measured(path, owner.token);
      expect(read.status, path).toBe(200);
      expect(read.roundTrips, `${path}: ${read.statements.join(" | ")}`).toBe(0);
    }
    clock.advance(SITE_ACCESS_CACHE_TTL_MS);
    expect((await measured(`/api/v1/sites/${siteId}/health`, owner.token)).roundTrips).toBe(1);
  });

  it("an unknown site and a site the caller has no role on are asked of D1 every time", async () => {
    const owner = await signup();
    const stranger = await signup();
    const siteId = await createSite(owner.token);
    for (let i = 0; i < 2; i++) {
      const refused = await measured(`/api/v1/sites/${siteId}/health`, stranger.token);
      expect(refused.status).toBe(404);
      expect(refused.roundTrips).toBeGreaterThan(0);
      expect(await measured(`/api/v1/sites/NO-SUCH-SITE/health`, owner.token)).toMatchObject({ status: 404 });
    }
    // A role granted a moment after a refused read is seen at once.
    await grantSiteRole(owner.token, siteId, stranger, "viewer");
    expect(await measured(`/api/v1/sites/${siteId}/health`, stranger.token)).toMatchObject({ status: 200, roundTrips: 1 });
  });

  it("a member removed through this isolate loses read access at once", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const member = await signup();
    await grantSiteRole(owner.token, siteId, member, "viewer");
    expect((await measured(`/api/v1/sites/${siteId}/health`, member.token)).status).toBe(200);
    expect((await call(`/api/v1/sites/${siteId}/members/${member.id}`, { method: "DELETE", token: owner.token })).status).toBe(200);
    expect(await measured(`/api/v1/sites/${siteId}/health`, member.token)).toMatchObject({ status: 404, body: { detail: `Site with ID '${siteId}' not found` } });
    expect((await measured(`/api/v1/devices/sites/${siteId}/devices`, member.token)).status).toBe(404);
  });

  it("a tenant member removed through this isolate loses read access to the tenant's sites at once", async () => {
    const a = await admin();
    const tenant = await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Cached chain" } });
    const tenantId = tenant.json.tenant_id as string;
    const member = await signup();
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: member.id, role: "viewer" } });
    const siteId = await createSite(a.token, { tenant_id: tenantId });
    expect((await measured(`/api/v1/sites/${siteId}/health`, member.token)).status).toBe(200);
    expect((await call(`/api/v1/tenants/${tenantId}/members/${member.id}`, { method: "DELETE", token: a.token })).status).toBe(200);
    expect((await measured(`/api/v1/sites/${siteId}/health`, member.token)).status).toBe(404);
  });

  it("a role lowered through this isolate is the role of the very next read", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const member = await signup();
    await grantSiteRole(owner.token, siteId, member, "owner");
    const emailsShown = async () => ((await measured(`/api/v1/sites/${siteId}/members`, member.token)).body as { members: { email?: string }[] })
      .members.some((m) => m.email !== undefined);
    expect(await emailsShown()).toBe(true);
    expect((await call(`/api/v1/sites/${siteId}/members`, { method: "POST", token: owner.token, body: { user_id: member.id, role: "viewer" } })).status).toBe(201);
    expect(await emailsShown()).toBe(false);
  });

  it("a user deactivated through this isolate is refused on the very next read", async () => {
    const a = await admin();
    const owner = await signup();
    const siteId = await createSite(owner.token);
    expect((await measured(`/api/v1/sites/${siteId}/health`, owner.token)).status).toBe(200);
    expect((await call(`/api/v1/auth/users/${encodeURIComponent(owner.email)}`, { method: "PATCH", token: a.token, body: { is_active: false } })).status).toBe(200);
    expect(await measured(`/api/v1/sites/${siteId}/health`, owner.token)).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } });
  });

  it("a change made in D1 by another isolate reaches reads within the cache's lifetime, and writes at once", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const member = await signup();
    await grantSiteRole(owner.token, siteId, member, "viewer");
    expect((await measured(`/api/v1/sites/${siteId}/health`, member.token)).status).toBe(200);
    // As another isolate would: straight into D1, so this isolate's cache is not told.
    await db().delete(schema.siteMemberships).where(eq(schema.siteMemberships.userId, member.id));
    // A write reads D1 whatever the cache holds: the viewer's ticket call is refused at once.
    const ticket = await measured(`/api/v1/sites/${siteId}/ws-ticket`, member.token, "POST");
    expect(ticket).toMatchObject({ status: 404 });
    expect(ticket.roundTrips).toBeGreaterThan(0);
    // A read within the lifetime may still be answered from the cache: the documented bound.
    clock.advance(SITE_ACCESS_CACHE_TTL_MS - 1);
    expect((await measured(`/api/v1/sites/${siteId}/health`, member.token)).status).toBe(200);
    clock.advance(1);
    expect((await measured(`/api/v1/sites/${siteId}/health`, member.token)).status).toBe(404);
  });

  it("an account deactivated in D1 by another isolate is refused once the cache's lifetime is over", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    expect((await measured(`/api/v1/sites/${siteId}/health`, owner.token)).status).toBe(200);
    await db().update(schema.users).set({ isActive: false }).where(eq(schema.users.id, owner.id));
    expireCachedAccess();
    expect(await measured(`/api/v1/sites/${siteId}/health`, owner.token)).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } });
  });
});

describe("D1 statements per device, job or command route", () => {
  const grantsRead = (statements: string[]) => statements.filter((sql) => /"site_memberships"|"tenant_memberships"|from "users"/i.test(sql));

  it("the user, the object, its site and the caller's role come back in one statement, whichever way the role is granted", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const device = await registerDevice(owner.token, siteId);
    const command = await call(`/api/v1/devices/${device.device_id}/commands`, { method: "POST", token: owner.token, body: { command_type: "ping" } });
    expect(command.status).toBe(201);
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { description: "counted", priority: "medium", action: "ping", target_device_ids: [device.device_id] } });
    expect(job.status).toBe(201);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const reads = [
      { path: `/api/v1/devices/${device.device_id}/twin`, statements: 1 },
      { path: `/api/v1/commands/${command.json.command_id}`, statements: 1 },
      { path: `/api/v1/jobs/${job.json.job_id}`, statements: 2 }, // and its executions
    ];
    for (const user of [owner, viewer]) {
      for (const read of reads) {
        const measuredRead = await measured(read.path, user.token);
        expect(measuredRead.status, read.path).toBe(200);
        expect(measuredRead.roundTrips, `${read.path}: ${measuredRead.statements.join(" | ")}`).toBe(read.statements);
        expect(grantsRead(measuredRead.statements), read.path).toHaveLength(1);
      }
    }
  });

  it("refuses as before: an unknown id and a stranger get the object's own 404, a viewer's write 403, a deactivated user 401", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const device = await registerDevice(owner.token, siteId);
    const stranger = await signup();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const notFound = { status: 404, body: { detail: `Device with ID '${device.device_id}' not found` } };
    expect(await measured(`/api/v1/devices/${device.device_id}/twin`, stranger.token)).toMatchObject(notFound);
    expect(await measured(`/api/v1/devices/NO-SUCH-DEVICE/twin`, owner.token)).toMatchObject({ status: 404, body: { detail: "Device with ID 'NO-SUCH-DEVICE' not found" } });
    expect(await measured(`/api/v1/jobs/no-such-job`, owner.token)).toMatchObject({ status: 404, body: { detail: "Job with ID 'no-such-job' not found" } });
    expect(await measured(`/api/v1/commands/no-such-command`, owner.token)).toMatchObject({ status: 404, body: { detail: "Command not found" } });
    expect(await measured(`/api/v1/devices/${device.device_id}/suspend`, viewer.token, "POST")).toMatchObject({ status: 403, body: { detail: "The operator role on this site is required" } });
    await db().update(schema.users).set({ isActive: false }).where(eq(schema.users.id, viewer.id));
    expect(await measured(`/api/v1/devices/${device.device_id}/twin`, viewer.token)).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } });
  });
});
