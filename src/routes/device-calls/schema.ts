import { z } from "@hono/zod-openapi";
import { StoreDecisionSchema } from "../../shared/hub-contract";
import { lineText } from "../../lib/text";

const percent = (name: string) => z.number().min(0).max(100).openapi({ description: `${name}, 0–100 %` });

const DeviceEcho = {
  device_id: lineText().max(128).optional().openapi({ description: "Must equal X-Device-ID when present (403 otherwise)" }),
  site_id: lineText().max(64).optional().openapi({ description: "Ignored: the device's site is known" }),
};

export const HeartbeatBody = z
  .object({
    ...DeviceEcho,
    status: z.string().regex(/^(online|healthy|error|unhealthy)$/i, "online, healthy, error or unhealthy (any letter case)").optional()
      .openapi({ description: "What the device says of itself, in any letter case (the original agents send `ONLINE`); error/unhealthy marks it in error" }),
    uptime_seconds: z.number().int().min(0).optional(),
    boot_id: lineText().max(128).optional().openapi({ description: "Changes when the device reboots" }),
    heartbeat_interval_s: z.number().int().min(1).max(3600).optional().openapi({ description: "The device's own interval; offline after 3 missed (clamped 30 s–10 min)" }),
    timestamp: lineText().max(64).optional().openapi({ description: "Device clock; stored, never trusted for presence" }),
  })
  .openapi("Heartbeat");

export const HeartbeatResponse = z
  .object({
    status: z.literal("ok"),
    device_id: z.string(),
    device_status: z.string(),
    next_heartbeat_s: z.number().int(),
    server_time: z.string(),
    desired_version: z.number().int().openapi({ description: "The version of the device's effective desired state (its twin); when it differs from the one the device last fetched, GET /api/v1/agent/twin" }),
  })
  .openapi("HeartbeatResponse");

export const TelemetrySample = z
  .object({
    ...DeviceEcho,
    cpu_usage: percent("CPU usage"),
    memory_usage: percent("Memory usage"),
    disk_usage: percent("Disk usage"),
    temperature: z.number().min(-50).max(150).optional().openapi({ description: "Celsius" }),
    network_latency_ms: z.number().min(0).max(600_000).optional(),
    transaction_count: z.number().int().min(0).optional(),
    uptime_seconds: z.number().int().min(0).optional(),
    error_rate: z.number().min(0).max(1).optional().openapi({ description: "Share of failed operations, 0–1" }),
    boot_id: lineText().max(128).optional(),
    timestamp: lineText().max(64).optional().openapi({ description: "Device clock; kept with the sample" }),
  })
  .openapi("TelemetrySample");

export const TelemetryBody = z
  .union([TelemetrySample, z.array(TelemetrySample).min(1).max(100)])
  .openapi("Telemetry", { description: "One sample, or a batch of up to 100 (oldest first)" });

/** The form the original agents send to device-metrics: the values nested under `health_metrics`. */
export const NestedHealthMetrics = z
  .object({
    ...DeviceEcho,
    boot_id: z.string().max(128).optional(),
    timestamp: z.string().max(64).optional().openapi({ description: "Device clock; kept with the sample" }),
    health_metrics: z.object({
      cpu_usage: percent("CPU usage"),
      memory_usage: percent("Memory usage"),
      disk_usage: percent("Disk usage"),
      temperature: z.number().min(-50).max(150).optional().openapi({ description: "Celsius" }),
      uptime: z.number().min(0).optional().openapi({ description: "Seconds since boot (stored as uptime_seconds)" }),
      network_latency: z.number().min(0).max(600_000).optional().openapi({ description: "ms (stored as network_latency_ms)" }),
      transaction_count: z.number().int().min(0).optional(),
      error_rate: z.number().min(0).max(1).optional().openapi({ description: "Share of failed operations, 0–1" }),
    }),
  })
  .openapi("NestedHealthMetrics");

export const DeviceMetricsBody = z
  .union([TelemetrySample, NestedHealthMetrics, z.array(TelemetrySample).min(1).max(100)])
  .openapi("DeviceMetrics", { description: "One sample (flat, or nested under `health_metrics` as the original agents send it), or a batch of up to 100 flat samples (oldest first)" });

/** The nested form as the flat sample the delta storage takes. */
export function flattenDeviceMetrics(body: z.infer<typeof DeviceMetricsBody>): z.infer<typeof TelemetryBody> {
  if (Array.isArray(body) || !("health_metrics" in body)) return body;
  const { health_metrics: m, ...rest } = body;
  return {
    ...rest,
    cpu_usage: m.cpu_usage,
    memory_usage: m.memory_usage,
    disk_usage: m.disk_usage,
    temperature: m.temperature,
    network_latency_ms: m.network_latency,
    transaction_count: m.transaction_count,
    uptime_seconds: m.uptime === undefined ? undefined : Math.floor(m.uptime),
    error_rate: m.error_rate,
  };
}


export const TelemetryResponse = z
  .union([
    StoreDecisionSchema.extend({ device_id: z.string(), server_time: z.string() }),
    z.object({ device_id: z.string(), results: z.array(StoreDecisionSchema), stored_count: z.number().int(), server_time: z.string() }),
  ])
  .openapi("TelemetryResult", { description: "What happened to the sample (per sample for a batch): stored as first after restart, as the periodic snapshot, because it changed by more than the threshold, or not stored because unchanged" });

export const DnaBody = z
  .object({
    ...DeviceEcho,
    mac_address: lineText().max(64).optional(),
    local_ip: lineText().max(64).optional(),
    hostname: lineText().max(255).optional(),
    os_details: lineText().max(500).optional(),
    os_type: lineText().max(64).optional(),
    os_version: lineText().max(64).optional(),
    firmware: lineText().max(128).optional(),
    device_token: lineText().max(4096).optional().openapi({ description: "The device's vendor push token (FCM or APNs); pushes to the device use it from now on" }),
    device_source: z.enum(["physical", "emulator", "simulation"]).optional()
      .openapi({ description: "What the original service's agents say they run on; kept with the DNA. It never makes a device simulated: an emulator calling in is a real caller" }),
    wan_ip: lineText().max(64).optional(),
    firmware_version: lineText().max(128).optional().openapi({ description: "The original agents' name for `firmware`; stored there when `firmware` is absent" }),
    peripherals: z.record(lineText().max(128), z.union([lineText().max(500), z.number(), z.boolean(), z.null()])).optional()
      .refine((p) => p === undefined || Object.keys(p).length <= 50, "At most 50 peripherals")
      .openapi({ description: "Attached devices, as the original agents report them: name → value (at most 50)" }),
  })
  .catchall(z.union([lineText().max(500), z.number(), z.boolean(), z.null()]))
  .openapi("DeviceDna");

export const DnaResponse = z
  .object({
    status: z.literal("success"),
    message: z.string(),
    device_id: z.string(),
    updated_at: z.string(),
    data: z.object({
      device_id: z.string(),
      site_id: z.string(),
      lifecycle_state: z.string(),
      mac_address: z.string().nullable(),
      os_details: z.string().nullable(),
      local_ip: z.string().nullable(),
      wan_ip: z.string().nullable(),
      peripherals: z.record(z.string(), z.unknown()).nullable(),
      created: z.literal(false).openapi({ description: "Always false: DNA describes a device that is already enrolled" }),
    }).openapi({ description: "The original service's envelope: the device as recorded" }),
  })
  .openapi("DnaResponse");

export const ChannelState = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    connected: z.boolean().openapi({ description: "The device has a channel socket open to its hub now" }),
  })
  .openapi("DeviceChannelState");
