import { describe, expect, it } from "vitest";
import { admin, call, createSite, grantSiteRole, signup, unique } from "./helpers";
import { registerDevice } from "./device-helpers";
import { queueCommand } from "./commands-helpers";

/**
 * Existence and access (docs/security.md): an object on a site the caller has no role on answers
 * exactly like an id that does not exist, on every operation; only enrolment-intent calls answer 403
 * to such a caller. A caller who can see the object but lacks the role is told 403.
 */

type Operation = { security?: Record<string, string[]>[]; requestBody?: unknown };

const OBJECT_PARAMS = ["site_id", "device_id", "job_id", "command_id", "tenant_id"];
const isIntentCall = (path: string) => path.includes("/enrolment-intents");

async function world() {
  const a = await admin();
  const owner = await signup();
  const tenantId = (await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Hidden tenant" } })).json.tenant_id as string;
  await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: owner.id, role: "owner" } });
  const siteId = await createSite(owner.token, { tenant_id: tenantId });
  const device = await registerDevice(owner.token, siteId);
  const jobId = (await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "ping" } })).json.job_id as string;
  const commandId = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json.command_id as string;
  const intentId = (await call(`/api/v1/sites/${siteId}/enrolment-intents`, { method: "POST", token: owner.token, body: {} })).json.intent_id as string;
  for (const id of [tenantId, jobId, commandId, intentId]) expect(id).toBeTruthy();
  return {
    owner,
    real: { site_id: siteId, device_id: device.device_id, job_id: jobId, command_id: commandId, tenant_id: tenantId, intent_id: intentId, user_id: String(owner.id),
      invitation_id: crypto.randomUUID(), ticket_id: "0".repeat(64) },
    unknown: {
      site_id: unique("NO-SITE-"), device_id: unique("NO-DEVICE-"), job_id: unique("job-none"), command_id: crypto.randomUUID(),
      tenant_id: unique("NO-TENANT-"), intent_id: crypto.randomUUID(), user_id: String(owner.id),
      invitation_id: crypto.randomUUID(), ticket_id: "1".repeat(64),
    },
  };
}

const fill = (path: string, ids: Record<string, string>) => path.replace(/\{(\w+)\}/g, (_m, name: string) => ids[name]);

/** The body with every id of `ids` replaced by its parameter's name, so two answers compare on their shape alone. */
const anonymise = (text: string, ids: Record<string, string>) =>
  Object.entries(ids).reduce((t, [name, id]) => (name === "user_id" ? t : t.split(id).join(`{${name}}`)), text);

describe("existence and access", () => {
  it("every user operation on a site, device, job, command or tenant the caller has no role on answers like an unknown id", async () => {
    const { real, unknown } = await world();
    const stranger = await signup();
    const doc = (await call("/openapi.json")).json as { paths: Record<string, Record<string, Operation>> };

    const hidden: string[] = [];
    const forbiddenIntentCalls: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      if (!OBJECT_PARAMS.some((name) => path.includes(`{${name}}`))) continue;
      for (const [method, op] of Object.entries(item)) {
        if (!["get", "post", "put", "patch", "delete"].includes(method)) continue;
        if (!op.security?.some((s) => "bearerAuth" in s)) continue; // device calls prove their own identity
        const key = `${method.toUpperCase()} ${path}`;
        const send = (ids: Record<string, string>) =>
          call(fill(path, ids), { method: method.toUpperCase(), token: stranger.token, body: op.requestBody ? {} : undefined });
        const [seen, never] = [await send(real), await send(unknown)];

        // Validation runs before access: a route whose body `{}` does not satisfy answers 422 either way.
        expect(never.status === 404 || (never.status === 422 && Boolean(op.requestBody)), `${key} answered ${never.status}`).toBe(true);
        if (isIntentCall(path) && never.status === 404) {
          // Their contract names 403 for a caller not permitted on the site.
          expect([seen.status, seen.json], key).toEqual([403, { detail: "You do not have access to this site" }]);
          forbiddenIntentCalls.push(key);
          continue;
        }
        expect(seen.status, key).toBe(never.status);
        expect(anonymise(seen.text, real), key).toBe(anonymise(never.text, unknown));
        if (never.status === 404) hidden.push(key);
      }
    }
    // The sweep really covered the API: sites, members, devices, agents, commands, jobs, tenants, live.
    expect(hidden.length).toBeGreaterThan(30);
    for (const sample of ["GET /api/v1/sites/{site_id}", "GET /api/v1/devices/{device_id}", "GET /api/v1/jobs/{job_id}", "GET /api/v1/commands/{command_id}",
      "GET /api/v1/tenants/{tenant_id}/members", "POST /api/v1/devices/{device_id}/rotate-key", "POST /api/v1/commands/{command_id}/cancel", "GET /api/v1/sites/{site_id}/events"]) {
      expect(hidden, sample).toContain(sample);
    }
    expect(forbiddenIntentCalls.length).toBeGreaterThanOrEqual(4);

    // The refusals are audited, but not where the stranger can read them: their own trail names none
    // of the hidden objects (the intent calls' 403s are theirs to see: those calls admit the site exists).
    const own = await call("/api/v1/audit/events?limit=500", { token: stranger.token });
    expect(own.status).toBe(200);
    const hiddenEvents = own.json.events.filter((e: { event_metadata?: { path?: string } }) => !isIntentCall(e.event_metadata?.path ?? ""));
    for (const [name, id] of Object.entries(real)) if (name !== "user_id") expect(JSON.stringify(hiddenEvents), name).not.toContain(id);
  });

  it("with a valid body too, a stranger's writes answer like an unknown id's and change nothing", async () => {
    const { owner, real, unknown } = await world();
    const stranger = await signup();
    const writes: [string, string, Record<string, unknown>][] = [
      ["POST", "/api/v1/devices/sites/{site_id}/devices", { name: "Intruder" }],
      ["POST", "/api/v1/jobs/sites/{site_id}/jobs", { action: "ping" }],
      ["POST", "/api/v1/devices/{device_id}/commands", { command_type: "ping" }],
      ["PATCH", "/api/v1/devices/{device_id}", { name: "Renamed" }],
      ["POST", "/api/v1/sites/{site_id}/members", { user_id: Number(real.user_id), role: "viewer" }],
      ["POST", "/api/v1/tenants/{tenant_id}/members", { user_id: Number(real.user_id), role: "viewer" }],
      ["POST", "/api/v1/agents/{device_id}/push", { title: "hi" }],
    ];
    for (const [method, path, body] of writes) {
      const seen = await call(fill(path, real), { method, token: stranger.token, body });
      const never = await call(fill(path, unknown), { method, token: stranger.token, body });
      expect(seen.status, path).toBe(404);
      expect(anonymise(seen.text, real), path).toBe(anonymise(never.text, unknown));
    }
    const device = await call(`/api/v1/devices/${real.device_id}`, { token: owner.token });
    expect(device.json.name).toBe("Till");
    expect((await call(`/api/v1/devices/sites/${real.site_id}/devices`, { token: owner.token })).json).toHaveLength(1);
  });

  it("a caller who can see the object but lacks the role is told 403, not 404", async () => {
    const { owner, real } = await world();
    const viewer = await signup();
    await grantSiteRole(owner.token, real.site_id, viewer, "viewer");
    expect((await call(`/api/v1/devices/${real.device_id}`, { token: viewer.token })).status).toBe(200);
    for (const [method, path, body] of [
      ["PATCH", `/api/v1/devices/${real.device_id}`, { name: "Renamed" }],
      ["POST", `/api/v1/devices/${real.device_id}/commands`, { command_type: "ping" }],
      ["POST", `/api/v1/commands/${real.command_id}/cancel`, undefined],
      ["POST", `/api/v1/jobs/${real.job_id}/cancel`, undefined],
      ["POST", `/api/v1/sites/${real.site_id}/bootstrap-key`, undefined],
      ["POST", `/api/v1/sites/${real.site_id}/members`, { user_id: viewer.id, role: "owner" }],
      ["POST", `/api/v1/sites/${real.site_id}/enrolment-intents`, {}],
    ] as const) {
      const res = await call(path, { method, token: viewer.token, body });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.json.detail, `${method} ${path}`).toMatch(/^The (operator|owner) role on this site is required$/);
    }
  });
});
