import type { z } from "@hono/zod-openapi";
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
      return c.json({ status: "ok" as const, device_id: credential.deviceId, device_status: result.status, next_heartbeat_s: result.next_heartbeat_s, server_time: result.server_time }, 200);
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
      const recorded = await recordDeviceDna(c.var.db, device.deviceId, dna);
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
