/**
 * The device channel: one WebSocket per device to its site's hub (`GET /api/v1/agent/channel`),
 * carrying what a device otherwise sends as separate HTTP calls (heartbeat, telemetry, command ack
 * and result) and receiving its commands the moment they are queued. Every message is one JSON
 * text frame; these schemas are the contract both sides and the OpenAPI document use.
 * docs/device-channel.md describes the protocol for device developers.
 */
import { z } from "@hono/zod-openapi";
import { CommandRecordSchema, StoreDecisionSchema } from "./hub-contract";
import { LIVE_STATUSES } from "./vocabulary";
import { TwinDeltaMessageSchema } from "./twin";

// Control characters are never part of an identifier a device sends (they forge log lines).
const NO_CONTROL = /^[^\u0000-\u001f\u007f-\u009f]*$/;
const line = (max: number) => z.string().max(max).regex(NO_CONTROL, "Control characters are not allowed");
const percent = z.number().min(0).max(100);

/** An id the device may put on any message; the hub's answer to it carries it back as `ref`. */
const MessageId = line(128).optional().openapi({ description: "Any id of the device's choosing; the answer to this message carries it as `ref`" });
const Ref = z.string().optional().openapi({ description: "The `id` of the device message this answers, when it had one" });

// ---- device → hub ---------------------------------------------------------------------------------

export const ChannelHeartbeatSchema = z.object({
  type: z.literal("heartbeat"),
  id: MessageId,
  status: z.enum(["online", "healthy", "error", "unhealthy"]).optional().openapi({ description: "What the device says of itself; error/unhealthy marks it in error" }),
  uptime_seconds: z.number().int().min(0).optional(),
  boot_id: line(128).optional(),
  heartbeat_interval_s: z.number().int().min(1).max(3600).optional(),
  timestamp: line(64).optional().openapi({ description: "Device clock; never trusted for presence" }),
});

export const ChannelSampleSchema = z.object({
  cpu_usage: percent,
  memory_usage: percent,
  disk_usage: percent,
  temperature: z.number().min(-50).max(150).optional(),
  network_latency_ms: z.number().min(0).max(600_000).optional(),
  transaction_count: z.number().int().min(0).optional(),
  uptime_seconds: z.number().int().min(0).optional(),
  error_rate: z.number().min(0).max(1).optional(),
  boot_id: line(128).optional(),
  timestamp: line(64).optional(),
});

export const ChannelTelemetrySchema = z.object({
  type: z.literal("telemetry"),
  id: MessageId,
  samples: z.array(ChannelSampleSchema).min(1).max(100).openapi({ description: "One sample or a batch of up to 100, oldest first; stored by the same delta rules as `POST /api/v1/agent/telemetry`" }),
});

export const ChannelAckSchema = z.object({
  type: z.literal("ack"),
  id: MessageId,
  command_id: line(64),
});

export const ChannelResultSchema = z.object({
  type: z.literal("result"),
  id: MessageId,
  command_id: line(64),
  status: z.enum(["completed", "failed", "success", "failure"]).openapi({ description: "completed or failed (success and failure are read the same way)" }),
  result: z.unknown().optional(),
  error_message: z.string().max(4096).nullable().optional(),
});

export const ChannelPingSchema = z.object({ type: z.literal("ping"), id: MessageId });

export const DeviceChannelMessageSchema = z
  .discriminatedUnion("type", [ChannelHeartbeatSchema, ChannelTelemetrySchema, ChannelAckSchema, ChannelResultSchema, ChannelPingSchema])
  .openapi("DeviceChannelMessage", { description: "A message the device sends on its channel (JSON text). The bare text `ping` is also answered with `pong`, without waking the hub." });
export type DeviceChannelMessage = z.infer<typeof DeviceChannelMessageSchema>;

// ---- hub → device ---------------------------------------------------------------------------------

export const CHANNEL_ERROR_CODES = ["bad_message", "rate_limited", "not_found", "conflict", "invalid"] as const;

const HelloSchema = z.object({
  type: z.literal("hello"),
  device_id: z.string(),
  site_id: z.string(),
  next_heartbeat_s: z.number().int().openapi({ description: "How often to send a heartbeat" }),
  server_time: z.string(),
  desired_version: z.number().int().openapi({ description: "The device's effective twin version: fetch the twin when it differs from the one held" }),
});

const HeartbeatOkSchema = z.object({
  type: z.literal("heartbeat.ok"),
  ref: Ref,
  device_status: z.enum(LIVE_STATUSES),
  next_heartbeat_s: z.number().int(),
  server_time: z.string(),
  desired_version: z.number().int().openapi({ description: "As in the HTTP heartbeat's answer" }),
});

const TelemetryOkSchema = z.object({
  type: z.literal("telemetry.ok"),
  ref: Ref,
  results: z.array(StoreDecisionSchema),
  stored_count: z.number().int(),
  server_time: z.string(),
});

const CommandMessageSchema = z.object({
  type: z.literal("command"),
  command: CommandRecordSchema.openapi({ description: "The same view a poll returns; now `delivered` and leased for 60 s: ack it (or report its result) before then, or it is delivered again" }),
});

const PushMessageSchema = z.object({
  type: z.literal("push"),
  command: CommandRecordSchema.openapi({ description: "A `notify` command (title, body and data in `payload`), leased and acknowledged like any other command" }),
});

const AckOkSchema = z.object({
  type: z.literal("ack.ok"),
  ref: Ref,
  command_id: z.string(),
  acknowledged_at: z.string().nullable(),
});

const ResultOkSchema = z.object({
  type: z.literal("result.ok"),
  ref: Ref,
  command: CommandRecordSchema,
});

const PongSchema = z.object({ type: z.literal("pong"), ref: Ref, server_time: z.string() });

const ChannelErrorSchema = z.object({
  type: z.literal("error"),
  ref: Ref,
  code: z.enum(CHANNEL_ERROR_CODES),
  detail: z.string(),
  retry_after_s: z.number().int().positive().optional(),
});

export const HubChannelMessageSchema = z
  .discriminatedUnion("type", [HelloSchema, HeartbeatOkSchema, TelemetryOkSchema, CommandMessageSchema, PushMessageSchema, AckOkSchema, ResultOkSchema, PongSchema, ChannelErrorSchema, TwinDeltaMessageSchema])
  .openapi("HubChannelMessage", { description: "A message the hub sends to the device on its channel (JSON text)." });
export type HubChannelMessage = z.infer<typeof HubChannelMessageSchema>;
export type ChannelErrorCode = (typeof CHANNEL_ERROR_CODES)[number];

// ---- close codes --------------------------------------------------------------------------------

/** Why the hub closes a device's channel; the device reconnects only where the table in docs says so. */
export const CHANNEL_CLOSE = {
  /** The key no longer opens the device (rotated, or the device was deleted): reconnect with the new key. */
  credentials: { code: 4401, reason: "credentials no longer valid" },
  /** The device was suspended or retired: do not reconnect until an operator resumes it. */
  inactive: { code: 4403, reason: "device not active" },
  /** Another channel for the same device opened; this older one is closed. */
  replaced: { code: 4409, reason: "replaced by a newer connection" },
  /** Too many messages the hub could not understand: a looping or broken client. */
  abuse: { code: 4429, reason: "too many bad messages" },
} as const;

/** Bad messages a socket may send in a burst before it is closed, and how fast that allowance comes back. */
export const CHANNEL_BAD_MESSAGE_BURST = 10;
export const CHANNEL_BAD_MESSAGE_REFILL_MS = 6_000;
/** The largest message the hub reads; device bodies over HTTP have the same limit. */
export const CHANNEL_MAX_MESSAGE_BYTES = 64 * 1024;

/** The hibernation tag that marks a socket as a device's channel, not a live-channel subscriber. */
export const DEVICE_SOCKET_TAG = "device";

/** How the Worker hands an admitted device's upgrade to its hub. */
export const DEVICE_CHANNEL_HEADER = "X-Fleet-Device-Channel";
export const DeviceChannelOpenSchema = z.object({ device_id: z.string(), key_digest: z.string() });
/** Marks the hub's answer to an upgrade whose key it has not admitted (the body is a NotAdmitted). */
export const NOT_ADMITTED_HEADER = "X-Fleet-Not-Admitted";
