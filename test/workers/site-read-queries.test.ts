// How many D1 statements a signed-in user's site read costs the Worker. Site health and the device
// list are answered by the site's hub from its roster; what is left in the Worker is the
// authentication and the access check, which must come to one statement together (the user, the
// site and the caller's role), whichever way the role is granted.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, grantSiteRole, signup } from "./helpers";
import { registerDevice } from "./device-helpers";
import { countingD1 } from "./d1-counter";

const READS = (siteId: string) => [`/api/v1/sites/${siteId}/health`, `/api/v1/devices/sites/${siteId}/devices`, `/api/v1/sites/${siteId}`];

/** Sends one request through the app with a counting D1 binding; the request log is off so only the route's own statements count. */
async function measured(path: string, token: string) {
  const counter = countingD1(env.DB);
  const ctx = createExecutionContext();
  const response = await createApp().request(path, { headers: { Authorization: `Bearer ${token}` } }, { ...env, DB: counter.binding, REQUEST_LOG_ENABLED: "false" }, ctx);
  const body = await response.json();
  await waitOnExecutionContext(ctx);
  return { status: response.status, body, statements: counter.statements, roundTrips: counter.roundTrips };
}

describe("D1 statements per site read", () => {
  it("a site member's site health, device list and site detail each cost one D1 statement", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    await registerDevice(owner.token, siteId);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    for (const user of [owner, viewer]) {
      for (const path of READS(siteId)) {
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
