import { z } from "@hono/zod-openapi";
import { PERMISSIONS } from "../../shared/consent";
import { DeviceParams } from "./schema";

export { DeviceParams };

const PermissionName = z.enum(PERMISSIONS);

const permissionFlags = (description: string) =>
  z.object(Object.fromEntries(PERMISSIONS.map((p) => [p, z.boolean()])) as Record<(typeof PERMISSIONS)[number], z.ZodBoolean>)
    .openapi({ description });

export const PermissionsBody = z
  .object({
    permissions: z.object(Object.fromEntries(PERMISSIONS.map((p) => [p, z.boolean().optional()])) as Record<(typeof PERMISSIONS)[number], z.ZodOptional<z.ZodBoolean>>)
      .strict()
      .openapi({ description: "Only the permissions named change" }),
  })
  .openapi("PermissionsUpdate");

export const PermissionsResponse = z
  .object({
    status: z.literal("success"),
    data: z.object({
      device_id: z.string(),
      permissions: permissionFlags("What the device allows now (never more than its capabilities)"),
      capabilities: permissionFlags("What the device's OS can allow"),
      configured: z.boolean().openapi({ description: "false until the device first sets its permissions; until then it is not restricted beyond its OS" }),
      updated_at: z.string().nullable(),
      message: z.string(),
    }),
  })
  .openapi("DevicePermissions", { description: "The original service's envelope, which its agents read `data.permissions` from" });

export const ConsentRefusalSchema = z
  .object({
    detail: z.string(),
    required_permissions: z.array(PermissionName).optional().openapi({ description: "What the command type needs" }),
    missing_permissions: z.array(PermissionName).optional().openapi({ description: "What of that the device's owner has not granted" }),
    permissions: z.array(PermissionName).optional().openapi({ description: "Permissions an operator asked to grant (only the device may)" }),
  })
  .openapi("ConsentRefusal");
