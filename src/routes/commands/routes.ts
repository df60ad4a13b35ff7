import type { Context } from "hono";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { unprocessable } from "../../lib/errors";
import { movedTo } from "../../middleware/deprecation";
import { deviceBodyLimit } from "../../middleware/body-limits";
import type { AppEnv } from "../../env";
import { ensureOwnDevice } from "../../services/devices";
import {
  ackCommand, cancelCommand, listDeviceCommands, pollCommands, queueDeviceCommand, readCommand, reportCommand, resultStatus,
} from "../../services/commands";
import * as s from "./schema";
import { ConsentRefusalSchema } from "../devices/permissions-schema";
import type { MountOptions } from "../mount";
import { grantedCommand, grantedDevice } from "../../middleware/access";

const TAGS = ["Commands"];

const LEASE_NOTE = "Commands are delivered at least once: a poll leases what it returns for 60 s; without an ack the command is delivered again with the same command_id (dedupe on it). After 5 deliveries without an ack, or past its TTL, it expires.";

const ACK_DESCRIPTION = "The device confirms it received the command (`delivered` → `acknowledged`); the lease stops. Repeating the ack answers 200 with the same body. A command of another device is 404; an expired or cancelled one 409 (do not run it).";

const STATUS_DESCRIPTION = "The device reports the execution result: `{status: completed | failed, result?, error_message?}` (`success`/`failure` are read as completed/failed). Allowed from pending, delivered or acknowledged. Repeating the same report answers 200 with the same command; a different result for a finished command is 409, as is any result for an expired or cancelled one. A command of another device is 404.";

type StatusInput = { status: string; result?: unknown; error_message?: string | null; device_id?: string };

async function handleStatus(c: Context<AppEnv>, commandId: string, body: StatusInput) {
  const device = c.var.device!;
  ensureOwnDevice(device.deviceId, body.device_id);
  const status = resultStatus(body.status);
  if (!status) throw unprocessable([{ loc: ["body", "status"], msg: "status must be completed or failed", type: "enum" }]);
  return reportCommand(c.env, device, commandId, { status, result: body.result, errorMessage: body.error_message ?? null });
}

/**
 * Command endpoints under `/api/v1/devices` (and the deprecated `/devices`): the device's poll,
 * queueing and listing a device's commands, and the old agents' ack/status paths. Mounted before the
 * device registry so `/pending` is never read as a device id.
 */
export function deviceCommandRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;
  app.use("/:command_id/status", deviceBodyLimit);
  app.use("/:device_id/commands/:command_id/ack", deviceBodyLimit);
  // The old agents' paths: deprecated in every form, their successors are under /api/v1/commands.
  app.on("POST", "/:device_id/commands/:command_id/ack", movedTo("/api/v1/commands/{command_id}/ack"));
  app.on("PUT", "/:command_id/status", movedTo("/api/v1/commands/{command_id}/status"));

  app.openapi(
    apiRoute({
      method: "get", path: "/pending", auth: "device", deprecated, tags: TAGS,
      summary: "Poll for commands (device)",
      description: `The calling device's pending commands, oldest first, each now \`delivered\`. ${LEASE_NOTE} With \`?wait=N\` (at most 25 s) an empty poll is held open and answers as soon as a command is queued for the device. An empty poll writes nothing anywhere.`,
      request: { query: s.PollQuery },
      responses: { 200: jsonResponse(s.PendingCommands, "Leased commands (possibly none)") },
      errors: [429],
    }),
    async (c) => {
      const { wait } = c.req.valid("query");
      return c.json({ commands: await pollCommands(c.env, c.var.device!, wait) }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/commands", auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
      summary: "Queue a command for a device (operator)",
      description: `Operator role on the device's site (administrators: every site). \`REBOOT\` → \`restart\` and \`UPDATE_CONFIG\` → \`update_config\` in any case. ${LEASE_NOTE} At most 50 open (pending, delivered or acknowledged) commands per device: 429 beyond. A suspended or retired device is 409. A command type needing a permission the device's owner has not granted is 403 with \`required_permissions\` and \`missing_permissions\`. Simulated devices run the command in the site's hub: restart → \`reboot_time_seconds\`, update_config → \`applied_settings\`, ping → \`latency_ms\` (5–50), shutdown → \`powered_off\`; any other type fails on a simulated agent.`,
      request: { params: s.DeviceParams, headers: s.IdempotencyHeaders, ...jsonBody(s.QueueCommandBody) },
      responses: {
        201: jsonResponse(s.CommandSchema, "The queued command (or, for a repeated Idempotency-Key, the one it created)"),
        403: jsonResponse(ConsentRefusalSchema, "A role too low for this action, or the device's owner has not granted what the command type needs (then `required_permissions` and `missing_permissions` say what; docs/original-agents.md maps command types to permissions)"),
      },
      errors: [403, 404, 409, 429],
    }),
    async (c) => {
      const headers = c.req.valid("header");
      const { command } = await queueDeviceCommand(c.env, c.var.user!, grantedDevice(c).device, c.req.valid("json"), headers["idempotency-key"]);
      return c.json(command, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/commands", auth: "user", access: { device: "viewer" }, deprecated, tags: TAGS,
      summary: "A device's commands, newest first",
      description: "Viewer role on the device's site. Filter by `status`; paged with `limit` (default 50, max 500) and `offset`; `total` counts all matches. Finished commands are kept 30 days.",
      request: { params: s.DeviceParams, query: s.CommandListQuery },
      responses: { 200: jsonResponse(s.CommandList, "Commands") },
      errors: [404],
    }),
    async (c) => {
      const q = c.req.valid("query");
      const page = await listDeviceCommands(c.env, grantedDevice(c).device, q);
      return c.json({ ...page, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/commands/{command_id}/ack", auth: "device", deprecated: true, tags: TAGS,
      summary: "Acknowledge a command (compatibility path)",
      description: `Path of the service this one replaces; successor \`POST /api/v1/commands/{command_id}/ack\`. \`device_id\` must be the caller's (403 otherwise). ${ACK_DESCRIPTION}`,
      request: { params: s.DeviceCommandParams },
      responses: { 200: jsonResponse(s.AckResponse, "Acknowledged") },
      errors: [404, 409],
    }),
    async (c) => {
      const { device_id, command_id } = c.req.valid("param");
      ensureOwnDevice(c.var.device!.deviceId, device_id);
      return c.json(await ackCommand(c.env, c.var.device!, command_id), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "put", path: "/{command_id}/status", auth: "device", deprecated: true, tags: TAGS,
      summary: "Report a command's result (compatibility path)",
      description: `Compatibility path (\`PUT /devices/{command_id}/status\`) that existing device agents call; successor \`PUT /api/v1/commands/{command_id}/status\`. ${STATUS_DESCRIPTION}`,
      request: { params: s.CommandParams, ...jsonBody(s.StatusBody) },
      responses: { 200: jsonResponse(s.CommandSchema, "The finished command") },
      errors: [404, 409],
    }),
    async (c) => {
      const { command_id } = c.req.valid("param");
      return c.json(await handleStatus(c, command_id, c.req.valid("json")), 200);
    },
  );

  return app;
}

/** `/api/v1/commands/...` and the deprecated unversioned `/commands/...`. */
export function commandRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;
  app.use("/:command_id/status", deviceBodyLimit);
  app.use("/:command_id/ack", deviceBodyLimit);

  app.openapi(
    apiRoute({
      method: "get", path: "/{command_id}", auth: "user", access: { command: "viewer" }, deprecated, tags: TAGS,
      summary: "A command",
      description: "Viewer role on the command's site. The command is found through a small index of command id → site written when it was queued; its state is read live from the site's hub.",
      request: { params: s.CommandParams },
      responses: { 200: jsonResponse(s.CommandSchema, "The command") },
      errors: [404],
    }),
    async (c) => c.json(await readCommand(c.env, grantedCommand(c)), 200),
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{command_id}/cancel", auth: "user", access: { command: "operator" }, deprecated, tags: TAGS,
      summary: "Cancel a command (operator)",
      description: "Only while `pending` or `delivered` (nothing has started it): 409 once acknowledged or finished. Cancelling a cancelled command answers it again. A device that later acks or reports it gets 409.",
      request: { params: s.CommandParams },
      responses: { 200: jsonResponse(s.CommandSchema, "The cancelled command") },
      errors: [403, 404, 409],
    }),
    async (c) => c.json(await cancelCommand(c.env, c.var.user!, grantedCommand(c)), 200),
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{command_id}/ack", auth: "device", deprecated, tags: TAGS,
      summary: "Acknowledge a command (device)",
      description: ACK_DESCRIPTION,
      request: { params: s.CommandParams },
      responses: { 200: jsonResponse(s.AckResponse, "Acknowledged") },
      errors: [404, 409],
    }),
    async (c) => c.json(await ackCommand(c.env, c.var.device!, c.req.valid("param").command_id), 200),
  );

  app.openapi(
    apiRoute({
      method: "put", path: "/{command_id}/status", auth: "device", deprecated, tags: TAGS,
      summary: "Report a command's result (device)",
      description: STATUS_DESCRIPTION,
      request: { params: s.CommandParams, ...jsonBody(s.StatusBody) },
      responses: { 200: jsonResponse(s.CommandSchema, "The finished command") },
      errors: [404, 409],
    }),
    async (c) => c.json(await handleStatus(c, c.req.valid("param").command_id, c.req.valid("json")), 200),
  );

  return app;
}
