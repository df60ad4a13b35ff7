import type { Context, MiddlewareHandler } from "hono";
import { requireUser } from "../../middleware/auth";
import { requireUserOrDevice } from "../../middleware/user-or-device";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import type { AppEnv } from "../../env";
import { authorizeSite, deviceNotFound } from "../../services/access";
import { findDevice, ensureOwnDevice, type DeviceRow } from "../../services/devices";
import { consentOf, revokePermissionsByOperator, setPermissionsByDevice } from "../../services/consent";
import { admitDeviceCall } from "../../services/device-reports";
import type { Role } from "../../shared/vocabulary";
import * as s from "./permissions-schema";

const TAGS = ["Device consent"];

const MAPPING_NOTE = "docs/original-agents.md lists which permission each command type needs. A device's calls count against its call budget (429 with Retry-After beyond it).";

/**
 * Authenticates the device itself (its own record only: another device's is 403) or a user with
 * `minimum` on the device's site, before the body is read; the handler finds the checked device in
 * `checkedDevice`.
 */
const deviceOrItsOperator = (minimum: Role, auth: "user-or-device" | "user"): MiddlewareHandler<AppEnv> => async (c, next) => {
  const authenticate = auth === "user" ? requireUser : requireUserOrDevice;
  await authenticate(c, async () => {
    const parsed = s.DeviceParams.safeParse(c.req.param());
    // An id the route's schema refuses is left to its validator (422).
    if (parsed.success) checkedDevices.set(c.req.raw, await deviceForCaller(c, parsed.data.device_id, minimum));
    if (c.var.device) await admitDeviceCall(c.env, c.var.device);
    await next();
  });
};

const checkedDevices = new WeakMap<Request, DeviceRow>();

function checkedDevice(c: Context<AppEnv>): DeviceRow {
  const device = checkedDevices.get(c.req.raw);
  if (!device) throw new Error(`${c.req.method} ${c.req.path}: no device was checked`);
  return device;
}

async function deviceForCaller(c: Context<AppEnv>, deviceId: string, minimum: Role): Promise<DeviceRow> {
  if (c.var.device) ensureOwnDevice(c.var.device.deviceId, deviceId);
  const device = await findDevice(c.var.db, deviceId);
  if (!device) throw deviceNotFound(deviceId);
  if (!c.var.device) await authorizeSite(c.var.db, c.var.user!, device.siteId, minimum, c.req.raw, { hiddenAs: () => deviceNotFound(deviceId) });
  return device;
}

const answer = (device: DeviceRow, consent: ReturnType<typeof consentOf>, message: string) => ({
  status: "success" as const,
  data: {
    device_id: device.deviceId, permissions: consent.permissions, capabilities: consent.capabilities,
    configured: consent.configured, updated_at: consent.updatedAt, message,
  },
});

/** `/api/v1/devices/device/{device_id}/permissions…`: what a device's owner allows. */
export function devicePermissionRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/device/{device_id}/permissions", auth: "user-or-device", authenticate: deviceOrItsOperator("viewer", "user-or-device"), tags: TAGS,
      summary: "A device's permissions",
      description: "The device itself (X-Device-ID + X-API-Key; another device's are 403), or a user with the viewer role on its site. " +
        "`permissions` is what the device allows now, `capabilities` what its OS can allow. " + MAPPING_NOTE,
      request: { params: s.DeviceParams },
      responses: { 200: jsonResponse(s.PermissionsResponse, "The device's permissions") },
      errors: [404, 429],
    }),
    async (c) => {
      const device = checkedDevice(c);
      return c.json(answer(device, consentOf(device), "Permissions retrieved"), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/device/{device_id}/permissions", auth: "user-or-device", authenticate: deviceOrItsOperator("operator", "user-or-device"), tags: TAGS,
      summary: "Set a device's permissions",
      description: "The device itself sets what its owner allows; only the permissions named change. Granting what its OS cannot do is 422; a device that is not active is 409. " +
        "A user (operator role on the device's site) may only revoke, as with `.../permissions/admin-override`: naming `true` is 403. " +
        "Every call is audited as `permission_change` with the old and new values. Commands needing a permission no longer granted are refused from the next queueing on. " + MAPPING_NOTE,
      request: { params: s.DeviceParams, ...jsonBody(s.PermissionsBody) },
      responses: {
        200: jsonResponse(s.PermissionsResponse, "The device's permissions now"),
        403: jsonResponse(s.ConsentRefusalSchema, "Another device's permissions, a user's role too low, or a user trying to grant (`permissions` names what)"),
      },
      errors: [404, 409, 429],
    }),
    async (c) => {
      const { permissions } = c.req.valid("json");
      const device = checkedDevice(c);
      const consent = c.var.device
        ? await setPermissionsByDevice(c.var.db, device, permissions, c.req.raw)
        : await revokePermissionsByOperator(c.var.db, c.var.user!, device, permissions, c.req.raw);
      return c.json(answer(device, consent, c.var.device ? "Permissions updated" : "Permissions overridden by operator"), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/device/{device_id}/permissions/admin-override", auth: "user", authenticate: deviceOrItsOperator("operator", "user"), tags: TAGS,
      summary: "Revoke a device's permissions (operator)",
      description: "Operator role on the device's site. Only revocation. A permission named `true` is 403 (with `permissions` listing them) and nothing changes, because the grant is the device owner's to give. " +
        "Audited as `permission_change` with the operator. " + MAPPING_NOTE,
      request: { params: s.DeviceParams, ...jsonBody(s.PermissionsBody) },
      responses: {
        200: jsonResponse(s.PermissionsResponse, "The device's permissions now"),
        403: jsonResponse(s.ConsentRefusalSchema, "A role too low, or a permission named `true` (`permissions` names them)"),
      },
      errors: [403, 404],
    }),
    async (c) => {
      const device = checkedDevice(c);
      const consent = await revokePermissionsByOperator(c.var.db, c.var.user!, device, c.req.valid("json").permissions, c.req.raw);
      return c.json(answer(device, consent, "Permissions overridden by operator"), 200);
    },
  );

  return app;
}
