import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { normaliseTimestamp } from "../../shared/time";
import { DEVICE_AUDIT_EVENT_TYPES } from "../../services/device-reports";
import { DeviceParams } from "../devices/schema";

export { DeviceParams };

const MAX_OBJECT_BYTES = 8 * 1024;

/** A JSON object a device sends along, at most 8 KB. */
const boundedObject = (description: string) =>
  z.record(z.string().max(128), z.unknown())
    .refine((o) => JSON.stringify(o).length <= MAX_OBJECT_BYTES, `At most ${MAX_OBJECT_BYTES / 1024} KB`)
    .openapi({ description: `${description} (a JSON object, at most ${MAX_OBJECT_BYTES / 1024} KB)` });

const boundedValue = (description: string) =>
  z.unknown().refine((v) => v === undefined || JSON.stringify(v).length <= MAX_OBJECT_BYTES, `At most ${MAX_OBJECT_BYTES / 1024} KB`)
    .openapi({ description: `${description} (any JSON, at most ${MAX_OBJECT_BYTES / 1024} KB)` });

const timestamp = (description: string) =>
  lineText().max(64).refine((t) => normaliseTimestamp(t) !== undefined, "An ISO 8601 date and time").openapi({ description });

const deviceEcho = lineText().max(128).optional().openapi({ description: "Must equal X-Device-ID when present (403 otherwise)" });

export const DeviceLogBody = z
  .object({
    device_id: deviceEcho,
    message: z.string().min(1).max(4000),
    level: lineText().max(32).optional().openapi({ description: "info (default), warning or warn, error, critical; any other level is kept as info" }),
    category: lineText().max(64).optional().openapi({ description: "The device's own category (device, push, network…); default device" }),
    timestamp: timestamp("Device clock; kept beside the server's time").optional(),
    context: boundedObject("What else the device says about the line").optional(),
  })
  .openapi("DeviceLogLine");

export const DeviceLogStored = z
  .object({ status: z.literal("success"), message: z.string(), data: z.object({ id: z.number().int(), created_at: z.string(), severity: z.string() }) })
  .openapi("DeviceLogStored");

export const DeviceLogsQuery = z.object({ limit: z.coerce.number().int().min(1).max(500).default(50) });

export const DeviceLogsResponse = z
  .object({
    status: z.literal("success"),
    message: z.string(),
    data: z.array(z.object({
      id: z.number().int(), timestamp: z.string(), category: z.string(), severity: z.string(),
      error_code: z.string().nullable(), error_message: z.string(), resolved: z.boolean(),
    })),
  })
  .openapi("DeviceLogs");

export const DeviceAuditBody = z
  .object({
    device_id: deviceEcho,
    event_type: z.enum(DEVICE_AUDIT_EVENT_TYPES).openapi({ description: "Something that happened on the device; events of operators and of the service itself cannot be claimed by a device" }),
    description: lineText().min(1).max(1000),
    timestamp: timestamp("Device clock; kept in the event's metadata").optional(),
    metadata: boundedObject("Details").optional(),
  })
  .openapi("DeviceAuditEvent");

export const DeviceAuditStored = z
  .object({ status: z.literal("success"), message: z.string(), data: z.object({ id: z.number().int(), created_at: z.string() }) })
  .openapi("DeviceAuditStored");

export const ConfigChangeBody = z
  .object({
    device_id: deviceEcho,
    action: lineText().min(1).max(64).openapi({ description: "What the device did (update, rollback, …)" }),
    parameter_name: lineText().min(1).max(200),
    old_value: boundedValue("The value before").optional(),
    new_value: boundedValue("The value after").optional(),
    success: z.boolean().optional().openapi({ description: "Default true" }),
    change_reason: lineText().max(1000).optional(),
    timestamp: timestamp("When the device made the change; default now").optional(),
    performance_before: boundedObject("Measurements before the change").optional(),
    performance_after: boundedObject("Measurements after the change").optional(),
    was_rolled_back: z.boolean().optional().openapi({ description: "Default false" }),
    rollback_reason: lineText().max(1000).optional(),
    rollback_success: z.boolean().optional(),
    rollback_performance: boundedObject("Measurements after the rollback").optional(),
    rolled_back_at: timestamp("When it was rolled back").optional(),
  })
  .openapi("DeviceConfigChange");

export const ConfigChangeSchema = z
  .object({
    id: z.number().int(), device_id: z.string(), site_id: z.string(), action: z.string(), parameter_name: z.string(),
    old_value: z.unknown(), new_value: z.unknown(), success: z.boolean(), change_reason: z.string().nullable(),
    performance_before: z.unknown(), performance_after: z.unknown(), was_rolled_back: z.boolean(),
    rollback_reason: z.string().nullable(), rollback_success: z.boolean().nullable(), rollback_performance: z.unknown(),
    rolled_back_at: z.string().nullable(), timestamp: z.string(), created_at: z.string(),
  })
  .openapi("ConfigChange");

export const ConfigChangeStored = z
  .object({ status: z.literal("success"), message: z.string(), data: ConfigChangeSchema })
  .openapi("ConfigChangeStored");

export const ConfigHistoryQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const ConfigHistoryPage = z
  .object({ device_id: z.string(), changes: z.array(ConfigChangeSchema), total: z.number().int(), limit: z.number().int(), offset: z.number().int() })
  .openapi("ConfigHistoryPage");

export const PendingPushes = z
  .object({
    device_id: z.string(),
    pushes: z.array(z.object({
      message_id: z.string().openapi({ description: "The push's command id; answer it with POST /api/v1/push/ack" }),
      provider: z.string(),
      payload: z.unknown(),
      sent_at: z.string(),
      status: z.literal("sent"),
    })),
  })
  .openapi("PendingPushes");

export const PushAckBody = z
  .object({
    message_id: lineText().min(1).max(64),
    device_id: deviceEcho,
    received_at: timestamp("When the device got it; default now").optional(),
    status: z.enum(["delivered", "failed"]).default("delivered"),
    error_message: lineText().max(1000).optional(),
  })
  .openapi("PushAck");

export const PushAckResponse = z
  .object({ status: z.literal("acknowledged"), message_id: z.string(), delivery: z.enum(["completed", "failed"]) })
  .openapi("PushAckResult");
