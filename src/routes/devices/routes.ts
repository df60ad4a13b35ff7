import { z } from "@hono/zod-openapi";
import { THROTTLING_DESCRIPTION, apiRoute, jsonBody, jsonResponse, newRouter, serialisedJson } from "../../lib/openapi";
import {
  bootstrapProvision, createSiteDevice, currentEpoch, listAccessibleDevices, siteDevicesBody,
  provisionDevice, rotateDeviceKey, setLifecycle, updateDevice,
} from "../../services/devices";
import { startSimulatedAgent } from "../../services/agents";
import type { Db } from "../../env";
import type { DeviceRow } from "../../services/devices";
import * as s from "./schema";
import type { MountOptions } from "../mount";
import { grantedDevice } from "../../middleware/access";
import { authorizeSite } from "../../services/access";

const TAGS = ["Devices"];

/** The detail form of a device, with its current lifecycle epoch. */
async function detailOf(db: Db, device: DeviceRow) {
  const epoch = await currentEpoch(db, device.deviceId);
  return s.toDeviceDetail(device, epoch?.epochId ?? null);
}

/** `/api/v1/devices/...` and the deprecated `/devices/...`: the device registry. */
export function deviceRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  // Fixed paths first, so they are never read as a device id.
  app.openapi(
    apiRoute({
      method: "get", path: "/device", auth: "user", deprecated, tags: TAGS,
      summary: "Devices the caller may access",
      description: "Every device of every site the caller can read (administrators: all), newest first, paged with `limit` (default 50, max 500) and `offset`. The total is in the `X-Total-Count` header.",
      request: { query: s.AccessibleDevicesQuery },
      responses: { 200: { ...jsonResponse(z.array(s.DeviceListItem), "Devices"), headers: z.object({ "X-Total-Count": z.string() }) } },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const { rows, total } = await listAccessibleDevices(c.var.db, c.var.user!, { siteId: q.site_id, status: q.status, limit: q.limit, offset: q.offset });
      c.header("X-Total-Count", String(total));
      return c.json(rows.map(s.toDeviceListItem), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/provision", auth: "user", deprecated, tags: TAGS,
      summary: "Provision a device (setup wizard)",
      description: "Operator-authenticated provisioning: the operator's token vouches for the device, which receives its api_key once. `enrollment_method` is `provisioned`. A device name already used in the site is 409.",
      request: jsonBody(s.ProvisionBody),
      responses: { 201: jsonResponse(s.ProvisionResponse, "Provisioned") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const body = c.req.valid("json");
      await authorizeSite(c.var.db, c.var.user!, body.site_id, "operator", c.req.raw);
      const r = await provisionDevice(c.env, c.var.db, c.var.user!, body, c.req.raw);
      return c.json(s.provisionAnswer({ ...r, apiKey: r.apiKey! }, body.site_id, r.createdAt), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/bootstrap-provision", auth: "none", deprecated, tags: TAGS,
      summary: "Self-enrolment with a site bootstrap key",
      description: "No user token: the bootstrap key (from `POST /api/v1/sites/{site_id}/bootstrap-key`) is the credential. A wrong, revoked or missing key, or an unknown site, answers the same 401. `enrollment_method` is `self-enrolled` and a lifecycle epoch starts. " +
        "Failed attempts are counted per site (known or not) and per client address: " + THROTTLING_DESCRIPTION + " " +
        "A site enrols at most `BOOTSTRAP_ENROLMENTS_PER_HOUR` devices (default 100) with its key in any rolling hour; beyond that a valid key answers 429 with Retry-After.",
      request: jsonBody(s.BootstrapProvisionBody),
      responses: { 201: jsonResponse(s.ProvisionResponse, "Enrolled") },
      errors: [401, 409, 429],
    }),
    async (c) => {
      const body = c.req.valid("json");
      const r = await bootstrapProvision(c.env, c.var.db, body, c.var.config.enrolment.bootstrapPerHour, c.req.raw);
      return c.json(s.provisionAnswer({ ...r, apiKey: r.apiKey! }, body.site_id, r.createdAt), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}", auth: "user", access: { device: "viewer" }, deprecated, tags: TAGS,
      summary: "Device detail",
      description: "Status, last_seen, enrollment_method, device_source, DNA and the current lifecycle epoch. Never the api_key or its hash.",
      request: { params: s.DeviceParams },
      responses: { 200: jsonResponse(s.DeviceDetail, "The device") },
      errors: [404],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      return c.json(await detailOf(c.var.db, device), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/{device_id}", auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
      summary: "Update a device (operator)",
      description: "Changes name, type, addresses or the expected heartbeat interval; audited as `device_updated`. A retired or archived device is 409.",
      request: { params: s.DeviceParams, ...jsonBody(s.UpdateDeviceBody) },
      responses: { 200: jsonResponse(s.DeviceDetail, "Updated device") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const row = await updateDevice(c.env, c.var.db, c.var.user!, device, c.req.valid("json"), c.req.raw);
      return c.json(await detailOf(c.var.db, row), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/rotate-key", auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
      summary: "Rotate a device's API key (operator)",
      description: "The new key is shown once; the old key is rejected from the next call on. A retired or archived device is 409 (re-enrol a retired one instead).",
      request: { params: s.DeviceParams },
      responses: { 200: jsonResponse(s.RotateKeyResponse, "New key") },
      errors: [400, 403, 404, 409],
    }),
    async (c) => {
      const { device_id } = c.req.valid("param");
      const { device } = grantedDevice(c);
      const { apiKey, rotatedAt } = await rotateDeviceKey(c.env, c.var.db, c.var.user!, device, c.req.raw);
      return c.json({ device_id, api_key: apiKey, rotated_at: rotatedAt }, 200);
    },
  );

  for (const action of ["suspend", "resume"] as const) {
    app.openapi(
      apiRoute({
        method: "post", path: `/{device_id}/${action}`, auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
        summary: action === "suspend" ? "Suspend a device (operator)" : "Resume a suspended device (operator)",
        description: action === "suspend"
          ? "A suspended device's calls answer 403 at once; its data stays. Idempotent. A retired or archived device is 409."
          : "The device may call in again with its existing key. Idempotent. A retired or archived device is 409.",
        request: { params: s.DeviceParams },
        responses: { 200: jsonResponse(s.DeviceDetail, "The device") },
        errors: [403, 404, 409],
      }),
      async (c) => {
        const { device } = grantedDevice(c);
        const row = await setLifecycle(c.env, c.var.db, c.var.user!, device, action === "suspend" ? "suspended" : "active", c.req.raw);
        return c.json(await detailOf(c.var.db, row), 200);
      },
    );
  }

  return app;
}

/**
 * A site's devices: `/api/v1/devices/sites/{site_id}/devices` and the deprecated
 * `/sites/{site_id}/devices`.
 */
export function siteDeviceRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;
  const path = "/{site_id}/devices";

  app.openapi(
    apiRoute({
      method: "get", path, auth: "user", access: { site: "viewer" }, deprecated, tags: TAGS,
      summary: "A site's devices, newest first",
      description: "Served by the site's hub from its own copy of the site's devices, with each device's live `status` and `last_seen` (no database read for the devices). An empty site gives `[]`; an unknown site 404 `Site with ID '<site_id>' not found`.",
      request: { params: s.SiteParams },
      responses: { 200: jsonResponse(z.array(s.DeviceListItem), "Devices") },
      errors: [404],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      return serialisedJson<z.infer<typeof s.DeviceListItem>[]>(c, await siteDevicesBody(c.env, site_id));
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path, auth: "user", access: { site: "operator" }, deprecated, tags: TAGS,
      summary: "Register a device (operator)",
      description: "A real device's response carries its `api_key` exactly once (32 random bytes, base64url); only a bcrypt hash is stored. Simulated devices get no key: their agent runs in the site's hub. A duplicate device_id is 409. `type` is accepted as an alias of `device_type`.",
      request: { params: s.SiteParams, ...jsonBody(s.CreateDeviceBody) },
      responses: { 201: jsonResponse(s.CreateDeviceResponse, "Registered") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      const body = c.req.valid("json");
      const r = await createSiteDevice(c.env, c.var.db, c.var.user!, {
        siteId: site_id,
        deviceId: body.device_id,
        name: body.name,
        deviceType: body.device_type ?? body.type,
        ipAddress: body.ip_address,
        osType: body.os_type,
        osVersion: body.os_version,
        deviceSource: body.device_source,
      }, c.req.raw);
      await startSimulatedAgent(c.env, r.device);
      return c.json({
        message: "Device registered successfully",
        device_id: r.deviceId,
        site_id,
        epoch_id: r.epochId,
        ...(r.apiKey ? { api_key: r.apiKey } : {}),
      }, 201);
    },
  );

  return app;
}
