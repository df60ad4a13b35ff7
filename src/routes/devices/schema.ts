import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { SiteIdSchema, SiteParams } from "../sites/schema";
import type { DeviceRow } from "../../services/devices";
import { LIFECYCLE_STATES } from "../../shared/device-lifecycle";

export const DeviceIdSchema = z.string().min(1).max(128).regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]*$/, "Letters, digits, '.', '_', ':' and '-' only");

export const DeviceParams = z.object({ device_id: DeviceIdSchema.openapi({ param: { name: "device_id", in: "path" }, example: "POS-001" }) });
export { SiteParams };

const DEVICE_TYPE = lineText().min(1).max(64).openapi({ description: "e.g. pos_terminal, tablet, virtual_terminal, mobile_scanner, POS", example: "pos_terminal" });

export const CreateDeviceBody = z
  .object({
    device_id: DeviceIdSchema.optional().openapi({ description: "Generated as DEVICE-XXXX-XXXX-XXXX when absent" }),
    name: lineText().trim().min(1).max(200).optional(),
    device_type: DEVICE_TYPE.optional(),
    type: DEVICE_TYPE.optional().openapi({ description: "Alias of device_type" }),
    ip_address: lineText().max(64).nullish(),
    os_type: lineText().max(64).nullish(),
    os_version: lineText().max(64).nullish(),
    device_source: z.enum(["real", "simulated"]).default("real"),
  })
  .openapi("CreateDeviceRequest");

export const CreateDeviceResponse = z
  .object({
    message: z.string(),
    device_id: z.string(),
    site_id: z.string(),
    api_key: z.string().optional().openapi({ description: "Real devices only, shown exactly once; store it on the device" }),
    epoch_id: z.string(),
  })
  .openapi("CreateDeviceResponse");

export const DeviceListItem = z
  .object({
    site_id: z.string(),
    device_id: z.string(),
    name: z.string(),
    device_type: z.string(),
    status: z.string(),
    ip_address: z.string().nullable(),
    device_source: z.enum(["real", "simulated"]),
    enrollment_method: z.string(),
    lifecycle_state: z.enum(LIFECYCLE_STATES).openapi({ description: "active; suspended (calls refused, data kept); retired (key revoked, kept for history); archived (read-only). docs/device-lifecycle.md" }),
    last_seen: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .openapi("DeviceListItem");

export const DeviceDetail = DeviceListItem.extend({
  os_type: z.string().nullable(),
  os_version: z.string().nullable(),
  heartbeat_interval_s: z.number().int(),
  dna: z.object({
    mac_address: z.string().nullable(),
    local_ip: z.string().nullable(),
    hostname: z.string().nullable(),
    os_details: z.string().nullable(),
    firmware: z.string().nullable(),
    reported: z.record(z.string(), z.unknown()).nullable(),
    updated_at: z.string().nullable(),
  }),
  epoch_id: z.string().nullable(),
}).openapi("Device");

export const UpdateDeviceBody = z
  .object({
    name: lineText().trim().min(1).max(200).optional(),
    device_type: DEVICE_TYPE.optional(),
    ip_address: lineText().max(64).nullish(),
    os_type: lineText().max(64).nullish(),
    os_version: lineText().max(64).nullish(),
    heartbeat_interval_s: z.number().int().min(5).max(3600).optional(),
  })
  .refine((b) => Object.values(b).some((v) => v !== undefined), "Nothing to update")
  .openapi("UpdateDeviceRequest");

export const RotateKeyResponse = z.object({ device_id: z.string(), api_key: z.string(), rotated_at: z.string() }).openapi("RotatedKey");

export const AccessibleDevicesQuery = z.object({
  site_id: SiteIdSchema.optional(),
  status: z.enum(["online", "offline", "error"]).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const ProvisionBody = z
  .object({
    site_id: SiteIdSchema,
    device_name: lineText().trim().min(1).max(200),
    device_type: DEVICE_TYPE.optional(),
    os_details: lineText().max(500).optional(),
  })
  .openapi("ProvisionRequest");

export const BootstrapProvisionBody = ProvisionBody.extend({ bootstrap_key: lineText().min(1).max(256) }).openapi("BootstrapProvisionRequest");

const ProvisionedDevice = { device_id: z.string(), api_key: z.string(), site_id: z.string(), epoch_id: z.string() };

export const ProvisionResponse = z
  .object({
    ...ProvisionedDevice,
    status: z.literal("success").openapi({ description: "Envelope the original service's agents parse" }),
    message: z.string(),
    data: z.object({ ...ProvisionedDevice, created_at: z.string() })
      .openapi({ description: "The same values again, with the device's creation time: where the original service's agents read them" }),
  })
  .openapi("ProvisionResponse", { description: "The new device's credentials, flat and again under `data` (the original service's envelope); the api_key is shown only here" });

/** A provisioning answer in both forms: the fields flat, and the original service's envelope. */
export const provisionAnswer = (r: { deviceId: string; apiKey: string; epochId: string }, siteId: string, createdAt: string, message = "Device provisioned successfully") => {
  const fields = { device_id: r.deviceId, api_key: r.apiKey, site_id: siteId, epoch_id: r.epochId };
  return { ...fields, status: "success" as const, message, data: { ...fields, created_at: createdAt } };
};

export const toDeviceListItem = (d: DeviceRow) => ({
  site_id: d.siteId,
  device_id: d.deviceId,
  name: d.name,
  device_type: d.deviceType,
  status: d.status,
  ip_address: d.ipAddress,
  device_source: d.deviceSource,
  enrollment_method: d.enrollmentMethod,
  lifecycle_state: d.lifecycleState,
  last_seen: d.lastSeen,
  created_at: d.createdAt,
  updated_at: d.updatedAt,
});

export const toDeviceDetail = (d: DeviceRow, epochId: string | null) => ({
  ...toDeviceListItem(d),
  os_type: d.osType,
  os_version: d.osVersion,
  heartbeat_interval_s: d.heartbeatIntervalS,
  dna: {
    mac_address: d.macAddress,
    local_ip: d.localIp,
    hostname: d.hostname,
    os_details: d.osDetails,
    firmware: d.firmware,
    reported: (d.dna as Record<string, unknown> | null) ?? null,
    updated_at: d.dnaUpdatedAt,
  },
  epoch_id: epochId,
});
