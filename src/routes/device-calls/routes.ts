import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { tooManyRequests } from "../../lib/errors";
import { normaliseTimestamp } from "../../shared/time";
import { ensureOwnDevice, recordDeviceDna } from "../../services/devices";
import { siteHub } from "../../hub/client";
import type { DeviceCredential, Env } from "../../env";
import { admitCredential, admitThroughHub } from "../../services/device-auth";
import { deviceBodyLimit } from "../../middleware/body-limits";
import { deviceAuthTiming } from "../../middleware/auth";
import * as s from "./schema";
import type { MountOptions } from "../mount";
import { currentDate } from "../../lib/clock";
import { deviceChannelState, openDeviceChannel } from "../../services/device-channel";
import {
  CHANNEL_BAD_MESSAGE_BURST, CHANNEL_CLOSE, CHANNEL_MAX_MESSAGE_BYTES, DeviceChannelMessageSchema, HubChannelMessageSchema,
} from "../../shared/device-channel";

const TAGS = ["Device calls"];

const TELEMETRY_DESCRIPTION = "CPU, memory and disk (0–100 %) with optional temperature, latency, transaction count, uptime and error rate. Stored by delta rules: the first sample after a device restart, at least every 5 minutes, and whenever a value moves by more than 5 % (thresholds configurable); the response says what happened. Counts as a sign of life for presence.";

const telemetryRoute = (path: string, deprecated: true | undefined, summary: string) =>
  apiRoute({
    method: "post", path, auth: "device-in-hub", deprecated, tags: TAGS, summary,
    description: TELEMETRY_DESCRIPTION,
    request: jsonBody(s.TelemetryBody),
    responses: { 200: jsonResponse(s.TelemetryResponse, "Storage decision") },
    errors: [429],
  });

type TelemetryInput = z.infer<typeof s.TelemetryBody>;

const CHANNEL_DESCRIPTION = [
  "One WebSocket per device to its site's hub, instead of separate heartbeat, telemetry and command calls. Admitted exactly like every device call (X-Device-ID and X-API-Key; bcrypt only for a key the hub has not seen pass, throttled): 401 for unknown credentials, 403 for a suspended or retired device and 429 while throttled, all before the upgrade.",
  "The hub greets with `hello` (`next_heartbeat_s`). The device sends `heartbeat`, `telemetry` (`samples`: 1–100), `ack` and `result` (`command_id`) and `ping`; each has the same effect and the same per-device rate limit as its HTTP call, and is answered with `heartbeat.ok`, `telemetry.ok`, `ack.ok`, `result.ok` or `pong` (carrying the message's `id` as `ref`). Commands queued for the device arrive at once as `command` (a `notify` command as `push`), leased for 60 s exactly as a poll leases them: without an ack before then the command is delivered again, on the channel or on the next poll. A device may switch between the channel and polling at any time.",
  `A message the hub cannot read gets an \`error\` message (\`code: "bad_message"\`) and the socket stays open; after ${CHANNEL_BAD_MESSAGE_BURST} in a burst it is closed with ${CHANNEL_CLOSE.abuse.code} "${CHANNEL_CLOSE.abuse.reason}". Messages are at most ${CHANNEL_MAX_MESSAGE_BYTES / 1024} KB. The bare text \`ping\` is answered with \`pong\` without waking the hub. The hub closes the channel with ${CHANNEL_CLOSE.credentials.code} when the key is rotated or the device deleted, ${CHANNEL_CLOSE.inactive.code} when it is suspended or retired, and ${CHANNEL_CLOSE.replaced.code} when the device opens another channel.`,
  "Without an `Upgrade: websocket` header the answer is 200: whether the device has a channel open.",
].join("\n\n");

/** Device-side calls, authenticated by X-Device-ID + X-API-Key. */
export function deviceCallRoutes(mount: MountOptions) {
  const app = newRouter();
  app.use("*", deviceBodyLimit);
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "post", path: "/heartbeat", auth: "device-in-hub", deprecated, tags: TAGS,
      summary: "Heartbeat",
      description: "Keeps the device online. Presence is decided by server time; the device is marked offline after 3 missed intervals (default interval 10 s, so 30 s; clamped 30 s–10 min). No database write per heartbeat: the site's hub keeps presence and writes transitions.",
      request: jsonBody(s.HeartbeatBody),
      responses: { 200: jsonResponse(s.HeartbeatResponse, "Accepted") },
      errors: [429],
    }),
    async (c) => {
      const credential = c.var.deviceCredential!;
      const body = c.req.valid("json");
      const reported = body.status?.toLowerCase();
      await refuseForeignDevice(c.env, credential, [body.device_id]);
      const started = performance.now();
      const { value: result, usedBcrypt } = await admitThroughHub(c.env, credential, async (keyDigest) =>
        await siteHub(c.env, credential.siteId).heartbeat(keyDigest, {
          deviceId: credential.deviceId,
          reportedStatus: reported === "error" || reported === "unhealthy" ? "error" : undefined,
          intervalS: body.heartbeat_interval_s,
          bootId: body.boot_id,
          uptimeS: body.uptime_seconds,
          reportedAt: body.timestamp ? normaliseTimestamp(body.timestamp) : undefined,
        }));
      c.header("Server-Timing", deviceAuthTiming(usedBcrypt, started));
      if ("rateLimited" in result) throw tooManyRequests("Too many calls from this device", result.retryAfterS);
      return c.json({ status: "ok" as const, device_id: credential.deviceId, device_status: result.status, next_heartbeat_s: result.next_heartbeat_s, server_time: result.server_time, desired_version: result.desired_version }, 200);
    },
  );

  app.openapi(telemetryRoute("/telemetry", deprecated, "Telemetry"), async (c) => {
    const { body, usedBcrypt, started } = await ingestTelemetry(c.env, c.var.deviceCredential!, c.req.valid("json"));
    c.header("Server-Timing", deviceAuthTiming(usedBcrypt, started));
    return c.json(body, 200);
  });

  app.openapi(
    apiRoute({
      method: "post", path: "/device-dna", auth: "device", deprecated, tags: TAGS,
      summary: "Device DNA",
      description: "Identity data a device reports at boot: MAC address, local IP, hostname, OS details, firmware (other scalar fields are kept as reported). " +
        "Also takes the original agents' fields: `device_token` (its push token, used for pushes from now on), `device_source`, `wan_ip`, `firmware_version` and `peripherals`. " +
        "Answers the original service's envelope (`status`, `message`, `data`) beside the flat fields.",
      request: jsonBody(s.DnaBody),
      responses: { 200: jsonResponse(s.DnaResponse, "Recorded") },
    }),
    async (c) => {
      const device = c.var.device!;
      const { device_id, site_id: _ignored, ...dna } = c.req.valid("json");
      ensureOwnDevice(device.deviceId, device_id);
      const recorded = await recordDeviceDna(c.env, c.var.db, device, dna);
      return c.json({
        status: "success" as const, message: "Device registered successfully", device_id: device.deviceId, updated_at: recorded.updatedAt,
        data: {
          device_id: device.deviceId, site_id: device.siteId, lifecycle_state: recorded.lifecycleState,
          mac_address: recorded.macAddress, os_details: recorded.osDetails, local_ip: recorded.localIp,
          wan_ip: dna.wan_ip ?? null, peripherals: dna.peripherals ?? null, created: false as const,
        },
      }, 200);
    },
  );

  // ---- the device channel (docs/device-channel.md) ----
  app.openapi(
    apiRoute({
      method: "get", path: "/channel", auth: "device-in-hub", deprecated, tags: TAGS,
      summary: "Device channel (WebSocket)",
      description: CHANNEL_DESCRIPTION,
      responses: {
        101: {
          description: "Switching Protocols: the device's channel. Each message the hub sends is one `HubChannelMessage` as JSON text; the device sends `DeviceChannelMessage`s (the schemas describe messages, not HTTP bodies, hence the media type).",
          content: { "application/x-websocket-message": { schema: z.union([HubChannelMessageSchema, DeviceChannelMessageSchema]) } },
        },
        200: jsonResponse(s.ChannelState, "No upgrade requested: whether the device has a channel open"),
      },
    }),
    async (c) => {
      const credential = c.var.deviceCredential!;
      const upgrade = c.req.header("Upgrade");
      if (upgrade?.toLowerCase() !== "websocket") return c.json(await deviceChannelState(c.env, credential), 200);
      return openDeviceChannel(c.env, credential, upgrade);
    },
  );

  return app;
}

/**
 * `POST /api/v1/analytics/device-metrics`: the same telemetry under the analytics path, which
 * existing device agents call, also in their nested `health_metrics` form.
 */
export function deviceMetricsRoutes() {
  const app = newRouter();
  // Only this path: the analytics reports mounted under the same prefix have their own limit.
  app.use("/device-metrics", deviceBodyLimit);
  const route = apiRoute({
    method: "post", path: "/device-metrics", auth: "device-in-hub", tags: TAGS, summary: "Device metrics (telemetry)",
    description: `${TELEMETRY_DESCRIPTION} Also accepts the original agents' form, with the values under \`health_metrics\` (\`uptime\` in seconds, \`network_latency\` in ms).`,
    request: jsonBody(s.DeviceMetricsBody),
    responses: { 200: jsonResponse(s.TelemetryResponse, "Storage decision") },
    errors: [429],
  });
  app.openapi(route, async (c) => {
    const { body, usedBcrypt, started } = await ingestTelemetry(c.env, c.var.deviceCredential!, s.flattenDeviceMetrics(c.req.valid("json")));
    c.header("Server-Timing", deviceAuthTiming(usedBcrypt, started));
    return c.json(body, 200);
  });
  return app;
}

/**
 * A body naming another device is refused with 403 — but only once the caller has proven its own
 * key, so that a bad key still answers the one 401.
 */
async function refuseForeignDevice(env: Env, credential: DeviceCredential, claimed: (string | undefined)[]) {
  if (claimed.every((id) => id === undefined || id === credential.deviceId)) return;
  await admitCredential(env, credential);
  ensureOwnDevice(credential.deviceId, claimed.find((id) => id !== undefined && id !== credential.deviceId));
}

async function ingestTelemetry(env: Env, credential: DeviceCredential, input: TelemetryInput) {
  const samples = Array.isArray(input) ? input : [input];
  await refuseForeignDevice(env, credential, samples.map((sample) => sample.device_id));
  const started = performance.now();
  const { value: results, usedBcrypt } = await admitThroughHub(env, credential, async (keyDigest) =>
    await siteHub(env, credential.siteId).telemetry(
      keyDigest,
      credential.deviceId,
      samples.map(({ device_id: _d, site_id: _s, ...sample }) => ({ ...sample, timestamp: sample.timestamp ? normaliseTimestamp(sample.timestamp) : undefined })),
    ));
  if ("rateLimited" in results) throw tooManyRequests("Too many calls from this device", results.retryAfterS);
  const serverTime = currentDate().toISOString();
  const body = !Array.isArray(input)
    ? { ...results[0], device_id: credential.deviceId, server_time: serverTime }
    : { device_id: credential.deviceId, results, stored_count: results.filter((r) => r.stored).length, server_time: serverTime };
  return { body, usedBcrypt, started };
}
