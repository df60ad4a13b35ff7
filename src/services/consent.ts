import { eq } from "drizzle-orm";
import type { AuthUser, Db } from "../env";
import { auditLogs, devices } from "../db/schema";
import { ApiError, conflict, forbidden, unprocessable } from "../lib/errors";
import { auditRow } from "../shared/audit-row";
import { currentDate } from "../lib/clock";
import {
  PERMISSIONS, capabilitiesFor, consentRefusal, effectivePermissions, missingPermissions, requiredPermissions,
  type Permission, type PermissionSet,
} from "../shared/consent";
import type { DeviceRow } from "./devices";

/** What the device runs, as consent reads it: its OS type, else the OS details it reported. */
const osOf = (device: Pick<DeviceRow, "osType" | "osDetails">) => [device.osType, device.osDetails].filter(Boolean).join(" ");

export function consentOf(device: Pick<DeviceRow, "osType" | "osDetails" | "permissions" | "permissionsUpdatedAt">) {
  const capabilities = capabilitiesFor(osOf(device));
  return {
    permissions: effectivePermissions(device.permissions, capabilities),
    capabilities,
    configured: device.permissions !== null,
    updatedAt: device.permissionsUpdatedAt,
  };
}

export type PermissionChanges = Partial<Record<Permission, boolean>>;

/**
 * The device (its owner, at the till) sets what it allows: only the permissions named change, and
 * nothing beyond what its OS can do may be granted (422). Audited as `permission_change`.
 */
export async function setPermissionsByDevice(db: Db, device: DeviceRow, changes: PermissionChanges, request?: Request) {
  if (device.lifecycleState !== "active") throw conflict(`Device ${device.deviceId} is ${device.lifecycleState}; only active devices set permissions`);
  const { capabilities } = consentOf(device);
  const beyond = PERMISSIONS.filter((p) => changes[p] === true && !capabilities[p]);
  if (beyond.length) {
    throw unprocessable(beyond.map((p) => ({ loc: ["body", "permissions", p], msg: `Permission '${p}' is not supported by this device's OS`, type: "value_error" })));
  }
  return applyChanges(db, device, changes, { by: "device", userId: null }, request);
}

/**
 * An operator may only take permissions away, never grant one: the grant is the device owner's to
 * give. A `true` anywhere is 403 and changes nothing. Audited as `permission_change` with the operator.
 */
export async function revokePermissionsByOperator(db: Db, user: AuthUser, device: DeviceRow, changes: PermissionChanges, request?: Request) {
  const granting = PERMISSIONS.filter((p) => changes[p] === true);
  if (granting.length) {
    throw new ApiError(403, `Only the device owner can grant permissions; an operator may only revoke (asked to grant: ${granting.join(", ")})`, {}, { permissions: granting });
  }
  return applyChanges(db, device, changes, { by: "operator", userId: user.id }, request);
}

async function applyChanges(db: Db, device: DeviceRow, changes: PermissionChanges, actor: { by: "device" | "operator"; userId: number | null }, request?: Request) {
  const before = consentOf(device);
  const next: PermissionSet = { ...before.permissions };
  for (const p of PERMISSIONS) if (changes[p] !== undefined) next[p] = changes[p] === true && before.capabilities[p];
  const at = currentDate().toISOString();
  const changed = PERMISSIONS.filter((p) => next[p] !== before.permissions[p]);
  const [[row]] = await db.batch([
    db.update(devices).set({ permissions: next, permissionsUpdatedAt: at, updatedAt: at }).where(eq(devices.deviceId, device.deviceId)).returning(),
    db.insert(auditLogs).values(auditRow({
      eventType: "permission_change",
      description: `Permissions of ${device.deviceId} ${actor.by === "operator" ? "revoked by an operator" : "set by the device"}` +
        (changed.length ? `: ${changed.map((p) => `${p} ${next[p] ? "granted" : "revoked"}`).join(", ")}` : " (no change)"),
      userId: actor.userId, siteId: device.siteId, deviceId: device.deviceId,
      metadata: { changed_by: actor.by, old_values: before.permissions, new_values: next, configured_before: before.configured },
      request,
    })),
  ]);
  return consentOf(row);
}

/**
 * Refuses (403, naming `required_permissions` and `missing_permissions`) a command the device's owner
 * has not allowed. Simulated devices have no owner to ask and are never refused.
 */
export function ensureCommandAllowed(device: DeviceRow, commandType: string, payload?: Record<string, unknown> | null) {
  if (device.deviceSource === "simulated") return;
  const required = requiredPermissions(commandType, payload);
  const missing = missingPermissions(required, consentOf(device).permissions);
  if (missing.length) throw forbiddenWithPermissions(required, missing);
}

const forbiddenWithPermissions = (required: Permission[], missing: Permission[]) => {
  const refusal = forbidden(consentRefusal(missing));
  return new ApiError(refusal.status, refusal.detail, {}, { required_permissions: required, missing_permissions: missing });
};
