import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { deviceBodyLimit } from "../../middleware/body-limits";
import { grantedDevice } from "../../middleware/access";
import {
  ackPush, admitDeviceCall, admitOwnDeviceCall, listConfigHistory, listDeviceLogs, pendingPushes, recordConfigChange, recordDeviceAuditEvent,
  recordDeviceLog, toConfigChange, toPendingPush,
} from "../../services/device-reports";
import * as s from "./reports-schema";

const TAGS = ["Device calls"];

const BUDGET_NOTE = "Counts against the device's call budget shared with heartbeats and telemetry (429 with Retry-After beyond it).";

/** `/api/v1/agent/...`: what the original agents report about themselves besides presence and telemetry. */
export function deviceReportRoutes() {
  const app = newRouter();
  for (const path of ["/logs", "/audit", "/config-history"]) app.use(path, deviceBodyLimit);

  app.openapi(
    apiRoute({
      method: "post", path: "/logs", auth: "device", tags: TAGS,
      summary: "A line of the device's log",
      description: "Stored in the error log (category `device`) with the device and site; `level` becomes its severity. The device reads its own lines back with `GET /api/v1/agent/{device_id}/logs`. " + BUDGET_NOTE,
      request: jsonBody(s.DeviceLogBody),
      responses: { 200: jsonResponse(s.DeviceLogStored, "Stored") },
      errors: [429],
    }),
    async (c) => {
      const device = c.var.device!;
      const body = c.req.valid("json");
      await admitOwnDeviceCall(c.env, device, body.device_id);
      return c.json({ status: "success" as const, message: "Log stored", data: await recordDeviceLog(c.var.db, device, body) }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/logs", auth: "device", tags: TAGS,
      summary: "The device's own log lines, newest first",
      description: "Only the calling device's own (another device's id is 403). `limit` default 50, max 500. " + BUDGET_NOTE,
      request: { params: s.DeviceParams, query: s.DeviceLogsQuery },
      responses: { 200: jsonResponse(s.DeviceLogsResponse, "Log lines") },
      errors: [429],
    }),
    async (c) => {
      const device = c.var.device!;
      await admitOwnDeviceCall(c.env, device, c.req.valid("param").device_id);
      const lines = await listDeviceLogs(c.var.db, device.deviceId, c.req.valid("query").limit);
      return c.json({ status: "success" as const, message: "Device logs fetched", data: lines }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/audit", auth: "device", tags: TAGS,
      summary: "An audit event recorded on the device",
      description: "Into the audit trail with the device and site, `metadata.reported_by: device`. Only device-side event types (listed in the schema); any other is 422. " + BUDGET_NOTE,
      request: jsonBody(s.DeviceAuditBody),
      responses: { 200: jsonResponse(s.DeviceAuditStored, "Stored") },
      errors: [429],
    }),
    async (c) => {
      const device = c.var.device!;
      const body = c.req.valid("json");
      await admitOwnDeviceCall(c.env, device, body.device_id);
      return c.json({ status: "success" as const, message: "Audit event stored", data: await recordDeviceAuditEvent(c.var.db, device, body, c.req.raw) }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/config-history", auth: "device", tags: TAGS,
      summary: "A configuration change the device made",
      description: "What changed (before and after), whether it worked, the performance before and after, and any rollback. Operators read it with `GET /api/v1/devices/{device_id}/config-history`. " + BUDGET_NOTE,
      request: jsonBody(s.ConfigChangeBody),
      responses: { 200: jsonResponse(s.ConfigChangeStored, "Stored") },
      errors: [429],
    }),
    async (c) => {
      const device = c.var.device!;
      const body = c.req.valid("json");
      await admitOwnDeviceCall(c.env, device, body.device_id);
      const row = await recordConfigChange(c.var.db, device, body);
      return c.json({ status: "success" as const, message: "Push history record stored", data: toConfigChange(row) }, 200);
    },
  );

  return app;
}

/** `GET /api/v1/devices/{device_id}/config-history`: the operators' read of what devices report. */
export function deviceConfigHistoryRoutes() {
  const app = newRouter();
  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/config-history", auth: "user", access: { device: "viewer" }, tags: ["Devices"],
      summary: "Configuration changes a device reported, newest first",
      description: "Viewer role on the device's site. Paged with `limit` (default 50, max 500) and `offset`; `total` counts all.",
      request: { params: s.DeviceParams, query: s.ConfigHistoryQuery },
      responses: { 200: jsonResponse(s.ConfigHistoryPage, "Changes") },
      errors: [404],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const q = c.req.valid("query");
      const { rows, total } = await listConfigHistory(c.var.db, device.deviceId, q);
      return c.json({ device_id: device.deviceId, changes: rows.map(toConfigChange), total, limit: q.limit, offset: q.offset }, 200);
    },
  );
  return app;
}

/** `/api/v1/push/pending` and `/ack`: pushes for devices that poll for them instead of holding a channel. */
export function devicePushPollRoutes() {
  const app = newRouter();
  app.use("/ack", deviceBodyLimit);

  app.openapi(
    apiRoute({
      method: "get", path: "/pending", auth: "device", tags: ["Push"],
      summary: "Pushes waiting for this device (device)",
      description: "The notifications sent to the calling device (`POST /api/v1/push/send`) that it has not answered yet, oldest first, at most 50: the same records push send reports on. `message_id` is the push's command id. " + BUDGET_NOTE,
      responses: { 200: jsonResponse(s.PendingPushes, "Pending pushes") },
      errors: [429],
    }),
    async (c) => {
      const device = c.var.device!;
      await admitDeviceCall(c.env, device);
      return c.json({ device_id: device.deviceId, pushes: (await pendingPushes(c.env, device)).map(toPendingPush) }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/ack", auth: "device", tags: ["Push"],
      summary: "Answer a push (device)",
      description: "`delivered` completes the push's command, `failed` fails it with `error_message`; push send's status read shows it. A message of another device is 404 and changes nothing; a different answer to one already answered is 409. " + BUDGET_NOTE,
      request: jsonBody(s.PushAckBody),
      responses: { 200: jsonResponse(s.PushAckResponse, "Recorded") },
      errors: [404, 409, 429],
    }),
    async (c) => {
      const device = c.var.device!;
      const body = c.req.valid("json");
      await admitOwnDeviceCall(c.env, device, body.device_id);
      const command = await ackPush(c.env, device, body);
      return c.json({ status: "acknowledged" as const, message_id: command.command_id, delivery: command.status === "completed" ? "completed" as const : "failed" as const }, 200);
    },
  );
  return app;
}
