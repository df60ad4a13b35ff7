import { z } from "@hono/zod-openapi";
import { checkConfigUrls } from "../../lib/config-url";
import { lineText, proseText } from "../../lib/text";
import { COMMAND_STATUSES, DEFAULT_COMMAND_TTL_S, MAX_COMMAND_TTL_S } from "../../shared/vocabulary";
import { MAX_PUSH_TARGETS, PUSH_PRIORITIES } from "../../services/push";
import { PUSH_PLATFORM_IDS } from "../../services/push-platforms";
import { DeviceIdSchema } from "../devices/schema";
import { SiteIdSchema } from "../sites/schema";
import { decodeBase64url, isP256PublicKey } from "../../lib/web-push";

const MAX_DATA_BYTES = 16 * 1024;
export const MAX_BULK_NOTIFICATIONS = 100;

export const PushParams = z.object({
  push_id: z.string().min(1).max(64).regex(/^[A-Za-z0-9-]+$/, "Letters, digits and '-' only")
    .openapi({ param: { name: "push_id", in: "path" }, example: "9b2d6f0e-4c1a-4b8e-8f3d-2a7c5e1b0d94" }),
});

export const PushNotificationSchema = z
  .object({
    device_id: DeviceIdSchema.optional().openapi({ description: "One target device" }),
    device_ids: z.array(DeviceIdSchema).min(1).max(MAX_PUSH_TARGETS).optional().openapi({ description: "Several target devices (repeats count once)" }),
    site_id: SiteIdSchema.optional().openapi({ description: "Every active device of the site" }),
    title: lineText().trim().min(1).max(200),
    body: proseText().max(4000).optional(),
    data: z.record(z.string(), z.unknown()).optional().openapi({ description: "Extra data for the device, at most 16 KB" }),
    priority: z.enum(PUSH_PRIORITIES).default("normal"),
    ttl_seconds: z.number().int().min(1).max(MAX_COMMAND_TTL_S).default(DEFAULT_COMMAND_TTL_S)
      .openapi({ description: `How long the notification may wait for the device before it expires (default ${DEFAULT_COMMAND_TTL_S}, max ${MAX_COMMAND_TTL_S})` }),
    platform: z.enum(PUSH_PLATFORM_IDS).optional()
      .openapi({ description: "Default: the device's command queue (`device_channel` and `command_poll` both name it). `fcm` or `apns`, when configured, send through the vendor to the token the device reported in its DNA. Any unavailable platform is 422 with the reason (see GET /api/v1/push/platforms)" }),
  })
  .strict()
  .superRefine((n, ctx) => {
    const selectors = [n.device_id, n.device_ids, n.site_id].filter((v) => v !== undefined).length;
    if (selectors !== 1) ctx.addIssue({ code: "custom", path: [], message: "Name exactly one of device_id, device_ids or site_id" });
    if (n.data && JSON.stringify(n.data).length > MAX_DATA_BYTES) ctx.addIssue({ code: "custom", path: ["data"], message: "data is limited to 16 KB" });
    checkConfigUrls(n.data, ctx, ["data"]);
  })
  .openapi("PushNotification", {
    example: { device_ids: ["POS-001", "POS-002"], title: "Price update", body: "New prices from tomorrow", data: { list: "2026-Q3" }, priority: "high", ttl_seconds: 600 },
  });

export const PushBulkBody = z
  .object({ notifications: z.array(PushNotificationSchema).min(1).max(MAX_BULK_NOTIFICATIONS) })
  .strict()
  .openapi("PushBulkRequest");

export const PushIdempotencyHeaders = z.object({
  "idempotency-key": lineText().min(1).max(255).optional().openapi({
    param: { name: "idempotency-key", in: "header" },
    description: "Makes retries safe: a repeat by the same user with the same key and the same body queues nothing and answers the push it created (with its current status); with a different body, 422",
    example: "5f0c6a3e-2b1d-4c8e-9a77-0d3f1e2a4b6c",
  }),
});

export const ReplayHeaders = z.object({
  "Idempotent-Replayed": z.literal("true").optional().openapi({ description: "Present when the answer repeats an earlier request with the same Idempotency-Key" }),
});

export const PushTargetResult = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    notification: z.number().int().openapi({ description: "Index of the notification in the request (0 for a single send)" }),
    status: z.enum(["delivered", "queued", "failed"]).openapi({
      description: "`queued`: waiting in the device's command queue; `delivered`: the device (or a simulated agent) has taken it; `failed`: it will not arrive — `reason` says why",
    }),
    channel: z.enum(["device_channel", "command_poll", "simulated_agent", "fcm", "apns"]).nullable()
      .openapi({ description: "How it goes out; null when it was never sent" }),
    command_id: z.string().nullable().openapi({ description: "The notify command carrying it (GET /api/v1/commands/{command_id})" }),
    command_status: z.enum(COMMAND_STATUSES).nullable(),
    reason: z.string().nullable(),
  })
  .openapi("PushTargetResult");

export const PushResult = z
  .object({
    push_id: z.string(),
    kind: z.enum(["send", "bulk"]),
    created_by: z.string(),
    created_at: z.string(),
    total: z.number().int(),
    counts: z.object({ delivered: z.number().int(), queued: z.number().int(), failed: z.number().int() }),
    results: z.array(PushTargetResult),
  })
  .openapi("PushResult");

export const PushPlatform = z
  .object({
    id: z.enum(PUSH_PLATFORM_IDS),
    name: z.string(),
    available: z.boolean(),
    reason: z.string().openapi({ description: "How it delivers, or why it cannot" }),
  })
  .openapi("PushPlatform");

export const PushPlatformList = z
  .object({ platforms: z.array(PushPlatform), total: z.number().int() })
  .openapi("PushPlatformList");

// ---- Web Push subscriptions -------------------------------------------------------------------

const base64urlBytes = (length: number, what: string) =>
  z.string().max(200).refine((v) => {
    const bytes = decodeBase64url(v);
    return bytes?.length === length && (length !== 65 || isP256PublicKey(bytes));
  }, `${what} (base64url)`);

export const SubscriptionBody = z
  .object({
    endpoint: z.string().min(1).max(2048).openapi({ example: "https://fcm.googleapis.com/fcm/send/dGhpcyBpcyBhbiBleGFtcGxl" }),
    keys: z.object({
      p256dh: base64urlBytes(65, "An uncompressed P-256 public key, 65 bytes"),
      auth: base64urlBytes(16, "A 16-byte authentication secret"),
    }),
    expirationTime: z.number().nullable().optional().openapi({ description: "Given by browsers; ignored" }),
  })
  .openapi("WebPushSubscriptionRequest");

export const SubscriptionParams = z.object({
  subscription_id: z.string().min(1).max(64).regex(/^[A-Za-z0-9-]+$/, "Letters, digits and '-' only")
    .openapi({ param: { name: "subscription_id", in: "path" }, example: "2c1f0b9e-7d4a-4e3b-9a8f-5b6c7d8e9f01" }),
});

export const Subscription = z
  .object({ subscription_id: z.string(), endpoint: z.string(), created_at: z.string(), last_sent_at: z.string().nullable() })
  .openapi("WebPushSubscription");

export const SubscriptionList = z
  .object({ subscriptions: z.array(Subscription), total: z.number().int() })
  .openapi("WebPushSubscriptionList");

export const VapidPublicKey = z.object({ public_key: z.string() }).openapi("VapidPublicKey");

export const WebPushResult = z
  .object({
    subscription_id: z.string(),
    status: z.enum(["sent", "expired", "failed"]),
    http_status: z.number().int().nullable().openapi({ description: "The push service's answer, when it gave one" }),
    reason: z.string().nullable(),
  })
  .openapi("WebPushResult");
