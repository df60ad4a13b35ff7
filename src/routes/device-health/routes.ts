import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { deviceHealth, restartDevice, runDiagnostics } from "../../services/agents";
import { DeviceParams } from "../devices/schema";
import { ConsentRefusalSchema } from "../devices/permissions-schema";
import * as s from "../agents/schema";
import type { MountOptions } from "../mount";
import { grantedDevice } from "../../middleware/access";

const TAGS = ["Devices"];

/** Restart and health of one device: `/api/v1/devices/{device_id}/...` and the deprecated `/devices/{device_id}/...`. */
export function deviceHealthRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/restart", auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
      summary: "Restart a device (operator)",
      description: "A simulated device reboots at once in simulated time (`reboot_time_seconds`): an update in flight is abandoned, a fault or an incident in progress is cleared, so an unhealthy device comes back healthy; the response carries the fresh health check, which is recorded in health_checks. A real device gets a queued `restart` command (`status: queued`, `command_id`) and the response carries its last reported health; if the device's owner has not granted \`root_access\` it is 403 with \`required_permissions\` and \`missing_permissions\` and nothing is queued. Both are audited as `device_restart` with the optional `reason`. The body may be omitted.",
      request: {
        params: DeviceParams,
        body: { required: false, content: { "application/json": { schema: s.RestartBody } } },
      },
      responses: {
        200: jsonResponse(s.RestartResponse, "Restarted (or queued)"),
        403: jsonResponse(ConsentRefusalSchema, "A role too low, or the device's owner has not granted root_access (`required_permissions`, `missing_permissions`)"),
      },
      errors: [403, 404, 409, 429],
    }),
    async (c) => {
      const body = c.req.header("Content-Type")?.includes("application/json") ? c.req.valid("json") : {};
      const { device } = grantedDevice(c);
      return c.json(s.RestartResponse.parse(await restartDevice(c.env, c.var.db, c.var.user!, device, body?.reason, c.req.raw)), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/health", auth: "user", access: { device: "viewer" }, deprecated, tags: TAGS,
      summary: "A device's health",
      description: "A simulated agent's health is computed on demand at this moment from its model (no health checks run for a site nobody watches); a real device's is built from its presence and latest telemetry (partial). `agent_state` is the lifecycle state.",
      request: { params: DeviceParams },
      responses: { 200: jsonResponse(s.DeviceHealthResponse, "Health") },
      errors: [404, 409],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      return c.json(s.DeviceHealthResponse.parse(await deviceHealth(c.env, device)), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/health", auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
      summary: "Run diagnostics on a device (operator)",
      description: "Takes a health check now (recorded in health_checks, audited as `device_health_check`) and tests the components asked for (`payment`, `printer`, `display`, `network`; default all): each gets `{status: pass|warn|fail|unknown, detail}`. A real device can only be judged on what it reports (network from its heartbeats; other components are `unknown`). `include_logs` adds the agent's recent log (simulated agents).",
      request: {
        params: DeviceParams,
        body: { required: false, content: { "application/json": { schema: s.DiagnosticsBody } } },
      },
      responses: { 200: jsonResponse(s.DiagnosticsResponse, "Diagnostics") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const body = c.req.header("Content-Type")?.includes("application/json") ? c.req.valid("json") : {};
      const { device } = grantedDevice(c);
      return c.json(s.DiagnosticsResponse.parse(await runDiagnostics(c.env, c.var.db, c.var.user!, device, body ?? {}, c.req.raw)), 200);
    },
  );

  return app;
}
