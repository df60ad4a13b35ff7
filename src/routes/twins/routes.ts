import { z } from "@hono/zod-openapi";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedDevice, grantedSite } from "../../middleware/access";
import { authorizeTenant } from "../../services/access";
import { lineText } from "../../lib/text";
import {
  deviceTwin, getTemplate, ifMatchVersion, noneMatch, patchDesired, putTemplate, reportTwin, siteDrift, versionTag,
} from "../../services/twins";
import { TWIN_MAX_BYTES, TWIN_MAX_DEPTH, TwinDriftSchema, TwinStateSchema } from "../../shared/twin";
import { DeviceParams } from "../devices/schema";
import { SiteParams } from "../sites/schema";

const TAGS = ["Device twins"];

const LIMITS = `A document is a JSON object of at most ${TWIN_MAX_BYTES / 1024} KB, nested at most ${TWIN_MAX_DEPTH} levels, whose keys are 1–64 characters (a letter or \`_\`, then letters, digits, \`_\`, \`-\` or \`.\`): 413 beyond the size, 422 for the rest.`;

const Document = z.record(z.string(), z.unknown()).openapi("TwinDocument", { type: "object", additionalProperties: true, description: "A JSON object" });
const MergePatch = z.record(z.string(), z.unknown())
  .openapi("TwinMergePatch", { type: "object", additionalProperties: true, description: "A JSON merge patch (RFC 7396): objects merge recursively, null removes a key, anything else (arrays too) replaces" });

/** A merge-patch body, read as `application/merge-patch+json` or `application/json`. */
const mergePatchBody = (description: string) => ({
  body: {
    required: true, description,
    content: { "application/merge-patch+json": { schema: MergePatch }, "application/json": { schema: MergePatch } },
  },
});

const ETagHeader = z.object({ ETag: z.string().openapi({ description: "The version, quoted" }) });

const TwinTemplate = z.object({
  scope: z.enum(["site", "tenant"]),
  scope_id: z.string().openapi({ description: "The site id or the tenant id" }),
  segment: z.string().nullable().openapi({ description: "The device type a tenant template applies to; null for a site template" }),
  document: Document,
  version: z.number().int().openapi({ description: "0 while no template was ever set (the document is then empty)" }),
  updated_at: z.string().nullable(),
}).openapi("TwinTemplate");
const TwinTemplateWritten = TwinTemplate.extend({
  devices_recomputed: z.number().int().openapi({ description: "Devices whose effective desired state was recomputed in their site's hub" }),
}).openapi("TwinTemplateWritten");

const SiteDrift = z.object({
  site_id: z.string(),
  drifted_devices: z.number().int(),
  devices: z.array(TwinDriftSchema.extend({ name: z.string() })),
}).openapi("SiteDrift");

const AgentTwin = z.object({
  desired: Document.openapi({ description: "The effective desired document" }),
  version: z.number().int().openapi({ description: "Its version: the heartbeat's `desired_version` and the ETag" }),
  delta: Document.openapi({ description: "What differs from the device's last report, as a merge patch" }),
}).openapi("AgentTwin");

const TemplateParams = z.object({
  tenant_id: lineText().min(1).max(64).openapi({ param: { name: "tenant_id", in: "path" } }),
  segment: lineText().min(1).max(64).openapi({ param: { name: "segment", in: "path" }, description: "A device type", example: "pos_terminal" }),
});

/** `/api/v1/devices/{device_id}/twin…`: operators read and change a device's twin. */
export function deviceTwinRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/twin", auth: "user", access: { device: "viewer" }, tags: TAGS,
      summary: "A device's twin",
      description: "Desired (the device's own document), reported, the effective desired document with the source of each leaf, the delta, versions and whether the device is in sync. The ETag is the desired version, for If-Match on a change.",
      request: { params: DeviceParams },
      responses: { 200: { ...jsonResponse(TwinStateSchema, "The twin"), headers: ETagHeader } },
      errors: [404],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const twin = await deviceTwin(c.env, device.siteId, device.deviceId);
      c.header("ETag", versionTag(twin.version));
      return c.json(twin, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/{device_id}/twin/desired", auth: "user", access: { device: "operator" }, tags: TAGS,
      summary: "Change a device's desired state (operator)",
      description: `A JSON merge patch of the device's own desired document. If-Match with the ETag of the twin it is based on is required: 428 without it, 412 when the twin changed since (read it again). A patch that changes something bumps the version and is audited as \`config_updated\` with the changed keys; the device hears of its new effective state at once on its channel, or from \`desired_version\` on its next heartbeat. ${LIMITS}`,
      request: {
        params: DeviceParams,
        headers: z.object({ "If-Match": z.string().optional().openapi({ description: 'The twin\'s ETag, e.g. "3"' }) }),
        ...mergePatchBody("What to change"),
      },
      responses: { 200: { ...jsonResponse(TwinStateSchema, "The twin after the change"), headers: ETagHeader } },
      errors: [403, 404, 412, 428],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const twin = await patchDesired(c.env, c.var.db, c.var.user!, device, ifMatchVersion(c.req.header("If-Match")), c.req.valid("json"), c.req.raw);
      c.header("ETag", versionTag(twin.version));
      return c.json(twin, 200);
    },
  );

  return app;
}

/** `/api/v1/sites/{site_id}/twin-template` and `/drift`. */
export function siteTwinRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/{site_id}/twin-template", auth: "user", access: { site: "viewer" }, tags: TAGS,
      summary: "The site's twin template",
      description: "Desired defaults for every device of the site, layered over the tenant's segment template and under each device's own desired document.",
      request: { params: SiteParams },
      responses: { 200: jsonResponse(TwinTemplate, "The template") },
      errors: [404],
    }),
    async (c) => c.json(await getTemplate(c.var.db, { scope: "site", siteId: grantedSite(c).site.siteId }), 200),
  );

  app.openapi(
    apiRoute({
      method: "put", path: "/{site_id}/twin-template", auth: "user", access: { site: "operator" }, tags: TAGS,
      summary: "Replace the site's twin template (operator)",
      description: `Replaces the whole template (an empty object clears it); audited as \`config_updated\`. Every device of the site is recomputed in the site's hub, and each whose effective desired state changed hears of it. ${LIMITS}`,
      request: { params: SiteParams, body: { required: true, content: { "application/json": { schema: Document } } } },
      responses: { 200: jsonResponse(TwinTemplateWritten, "The template as stored") },
      errors: [403, 404],
    }),
    async (c) => {
      const { site } = grantedSite(c);
      return c.json(await putTemplate(c.env, c.var.db, c.var.user!, { scope: "site", siteId: site.siteId }, c.req.valid("json"), c.req.raw), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{site_id}/drift", auth: "user", access: { site: "viewer" }, tags: TAGS,
      summary: "Devices drifting from their desired state",
      description: "Devices whose reported state does not match their effective desired state, longest drifting first, with the differing keys and for how long. A device that never reported drifts from the moment something is desired of it.",
      request: { params: SiteParams },
      responses: { 200: jsonResponse(SiteDrift, "Drift") },
      errors: [404],
    }),
    async (c) => c.json(await siteDrift(c.env, c.var.db, grantedSite(c).site.siteId), 200),
  );

  return app;
}

/** `/api/v1/tenants/{tenant_id}/twin-templates/{segment}`: a tenant's template per device type. */
export function tenantTwinRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/{tenant_id}/twin-templates/{segment}", auth: "user", tags: TAGS,
      summary: "A tenant's twin template for a device type (tenant members)",
      description: "Readable by any member of the tenant and administrators; members of one site only see its effect through their devices' effective documents and sources. An unknown tenant, or one the caller is not a member of, is 404.",
      request: { params: TemplateParams },
      responses: { 200: jsonResponse(TwinTemplate, "The template") },
      errors: [404],
    }),
    async (c) => {
      const { tenant_id, segment } = c.req.valid("param");
      await authorizeTenant(c.var.db, c.var.user!, tenant_id, "viewer");
      return c.json(await getTemplate(c.var.db, { scope: "tenant", tenantId: tenant_id, segment }), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "put", path: "/{tenant_id}/twin-templates/{segment}", auth: "user", tags: TAGS,
      summary: "Replace a tenant's twin template for a device type (tenant owner)",
      description: `The bottom layer of the effective desired state of every device of that type on the tenant's sites. Tenant owners and administrators only (403 for other members); audited as \`config_updated\`. Each of the tenant's sites is recomputed in its hub, one call per site. ${LIMITS}`,
      request: { params: TemplateParams, body: { required: true, content: { "application/json": { schema: Document } } } },
      responses: { 200: jsonResponse(TwinTemplateWritten, "The template as stored") },
      errors: [403, 404],
    }),
    async (c) => {
      const { tenant_id, segment } = c.req.valid("param");
      await authorizeTenant(c.var.db, c.var.user!, tenant_id, "owner");
      return c.json(await putTemplate(c.env, c.var.db, c.var.user!, { scope: "tenant", tenantId: tenant_id, segment }, c.req.valid("json"), c.req.raw), 200);
    },
  );

  return app;
}

/** `/api/v1/agent/twin…`: the device reads its desired state and reports what it runs. */
export function agentTwinRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/twin", auth: "device", tags: TAGS,
      summary: "The device's desired state",
      description: "The effective desired document, its version (the ETag, and the heartbeat's `desired_version`) and the delta against the device's last report. With If-None-Match naming the current version the answer is 304 with no body.",
      request: { headers: z.object({ "If-None-Match": z.string().optional().openapi({ description: 'The ETag last fetched, e.g. "4"' }) }) },
      responses: {
        200: { ...jsonResponse(AgentTwin, "The desired state"), headers: ETagHeader },
        304: { description: "Not modified: the device already has this version", headers: ETagHeader },
      },
    }),
    async (c) => {
      const device = c.var.device!;
      const twin = await deviceTwin(c.env, device.siteId, device.deviceId);
      c.header("ETag", versionTag(twin.effective_version));
      if (noneMatch(c.req.header("If-None-Match"), twin.effective_version)) return c.body(null, 304);
      return c.json({ desired: twin.effective, version: twin.effective_version, delta: twin.delta }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/twin/reported", auth: "device", tags: TAGS,
      summary: "Report what the device runs",
      description: `A JSON merge patch of the device's reported document. Answers the desired state with the delta that remains (empty once the device runs what is desired). ${LIMITS}`,
      request: mergePatchBody("What changed on the device"),
      responses: { 200: { ...jsonResponse(AgentTwin, "The desired state and the remaining delta"), headers: ETagHeader } },
    }),
    async (c) => {
      const device = c.var.device!;
      const twin = await reportTwin(c.env, c.var.db, device, c.req.valid("json"));
      c.header("ETag", versionTag(twin.effective_version));
      return c.json({ desired: twin.effective, version: twin.effective_version, delta: twin.delta }, 200);
    },
  );

  return app;
}
