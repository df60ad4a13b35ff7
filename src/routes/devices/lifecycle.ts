import type { Context } from "hono";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import type { AppEnv } from "../../env";
import { grantedDevice, grantedSite } from "../../middleware/access";
import { authorizeSite } from "../../services/access";
import { startSimulatedAgent } from "../../services/agents";
import { createSiteDevice } from "../../services/devices";
import { onceForKey, purgeDevice, reenrolDevice, retireDevice, transferDevice } from "../../services/device-lifecycle";
import { deviceAuditEvents, deviceErrors, deviceJobExecutions } from "../../services/device-history";
import { deviceStateTimeline } from "../../services/metrics";
import { siteDeviceSummaries, siteWithDevices } from "../../services/device-sites";
import { workerClock } from "../../lib/clock";
import type { LifecycleAction, LifecycleChange } from "../../shared/device-lifecycle";
import { DeviceStateHistory, StateHistoryQuery } from "../metrics/schema";
import * as s from "./schema";
import * as l from "./lifecycle-schema";

const TAGS = ["Devices"];
const IDEMPOTENT = "With an `Idempotency-Key`, a retry by the same user with the same request acts no more and answers the first answer again (header `Idempotent-Replayed: true`), without the one-time `api_key`; the same key with another request is 422. Audited.";
const STATES = "A state that does not allow it is 409 (docs/device-lifecycle.md has the state machine).";

/** Runs a lifecycle action once per Idempotency-Key and answers it. */
async function answerChange(
  c: Context<AppEnv>, action: LifecycleAction, request: unknown, key: string | undefined, run: () => Promise<LifecycleChange>,
) {
  const { change, replayed } = await onceForKey(c.var.db, c.var.user!, grantedDevice(c).device, action, request, key, run);
  if (replayed) c.header("Idempotent-Replayed", "true");
  return change;
}

/**
 * `/api/v1/devices/...`: registering a device with its site in the body, a device's lifecycle
 * beyond suspend and resume (retire, transfer, re-enrol, archive and purge), and its histories.
 */
export function deviceLifecycleRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "post", path: "/", auth: "user", tags: TAGS,
      summary: "Register a device in the site named in the body (operator)",
      description: "The same as `POST /api/v1/devices/sites/{site_id}/devices` with `site_id` in the body: operator role on that site (an unknown or invisible site is 404). A real device's `api_key` is shown exactly once; a duplicate device_id is 409.",
      request: jsonBody(l.CreateDeviceWithSiteBody),
      responses: { 201: jsonResponse(s.CreateDeviceResponse, "Registered") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const body = c.req.valid("json");
      await authorizeSite(c.var.db, c.var.user!, body.site_id, "operator", c.req.raw);
      const r = await createSiteDevice(c.env, c.var.db, c.var.user!, {
        siteId: body.site_id, deviceId: body.device_id, name: body.name, deviceType: body.device_type ?? body.type,
        ipAddress: body.ip_address, osType: body.os_type, osVersion: body.os_version, deviceSource: body.device_source,
      }, c.req.raw);
      await startSimulatedAgent(c.env, r.device);
      return c.json({
        message: "Device registered successfully", device_id: r.deviceId, site_id: body.site_id, epoch_id: r.epochId,
        ...(r.apiKey ? { api_key: r.apiKey } : {}),
      }, 201);
    },
  );

  for (const action of ["retire", "reenrol"] as const) {
    app.openapi(
      apiRoute({
        method: "post", path: `/{device_id}/${action}`, auth: "user", access: { device: "operator" }, tags: TAGS,
        summary: action === "retire" ? "Retire a device (operator)" : "Re-enrol a device with a new key (operator)",
        description: (action === "retire"
          ? "The device is out of service for good and kept for history: its key is destroyed at once (its next call is 401 from any isolate), its open commands are cancelled with the reason, its simulated agent stops and its presence is forgotten; its epoch ends. Only re-enrolment brings it back. "
          : "For a device that was wiped or repaired (active, suspended or retired): a new epoch and a new `api_key`, shown once; the old key stops working at once; the device is active again. Simulated devices get no key; their agent starts again. ") +
          `${STATES} ${IDEMPOTENT}`,
        request: {
          params: s.DeviceParams, headers: l.LifecycleIdempotencyHeaders,
          body: { required: false, description: "May be omitted", content: { "application/json": { schema: l.ReasonBody } } },
        },
        responses: { 200: jsonResponse(l.LifecycleChangeSchema, "What changed (for a repeated Idempotency-Key, the first answer)") },
        errors: [403, 404, 409],
      }),
      async (c) => {
        const { device } = grantedDevice(c);
        const body = c.req.header("Content-Type")?.includes("application/json") ? c.req.valid("json") : {};
        const reason = body.reason ?? null;
        const change = await answerChange(c, action, body, c.req.valid("header")["idempotency-key"], () => action === "retire"
          ? retireDevice(c.env, c.var.db, c.var.user!, device, "retire", reason, c.req.raw)
          : reenrolDevice(c.env, c.var.db, c.var.user!, device, reason, c.req.raw));
        return c.json(change, 200);
      },
    );
  }

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/transfer", auth: "user", access: { device: "operator" }, tags: TAGS,
      summary: "Move a device to another site (operator on both)",
      description: "Operator role on the device's site and on `target_site_id` (an unknown or invisible target is 404, a lower role there 403; the device's own site is 409). " +
        "The device gets a new lifecycle epoch and a new `api_key`, shown once (simulated devices: none); the old key stops working at once. " +
        "In the old site's hub its open commands are cancelled with the reason, and its metrics history and simulated-agent state are dropped: it starts afresh in the new site, whose hub learns of it at once. " +
        "Its state history, audit events and health checks keep the site they were written for; both sites' audit trails record the move. " +
        `${STATES} ${IDEMPOTENT}`,
      request: { params: s.DeviceParams, headers: l.LifecycleIdempotencyHeaders, ...jsonBody(l.TransferBody) },
      responses: { 200: jsonResponse(l.LifecycleChangeSchema, "What changed (for a repeated Idempotency-Key, the first answer)") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const body = c.req.valid("json");
      const change = await answerChange(c, "transfer", body, c.req.valid("header")["idempotency-key"],
        () => transferDevice(c.env, c.var.db, c.var.user!, device, body, c.req.raw));
      return c.json(change, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "delete", path: "/{device_id}", auth: "user", access: { device: "operator" }, tags: TAGS,
      summary: "Archive or purge a device (operator)",
      description: "`confirm=true` is required. `mode=archive`: the device is kept read-only — its key is destroyed, its open commands cancelled, its agent stopped; it can no longer be changed, commanded, transferred or re-enrolled, only purged. " +
        "`mode=purge`: its key is destroyed first, then its state in the site's hub (commands, metrics, agent, presence) and its rows in the database (device, epochs, state history, health checks, latest metrics, agent, command index, job executions, errors naming it) are removed; the audit trail keeps its events and records the purge. " +
        `${STATES} ${IDEMPOTENT} A purge repeated after it succeeded finds no device: 404.`,
      request: { params: s.DeviceParams, headers: l.LifecycleIdempotencyHeaders, query: l.DeleteDeviceQuery },
      responses: { 200: jsonResponse(l.LifecycleChangeSchema, "What changed (for a repeated Idempotency-Key, the first answer)") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const q = c.req.valid("query");
      const reason = q.reason ?? null;
      const action = q.mode === "purge" ? "purge" : "archive";
      const change = await answerChange(c, action, q, c.req.valid("header")["idempotency-key"], () => action === "purge"
        ? purgeDevice(c.env, c.var.db, c.var.user!, device, reason, c.req.raw)
        : retireDevice(c.env, c.var.db, c.var.user!, device, "archive", reason, c.req.raw));
      return c.json(change, 200);
    },
  );

  // ---- histories (viewer on the device's site) ---------------------------------------------------

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/audit-logs", auth: "user", access: { device: "viewer" }, tags: TAGS,
      summary: "A device's audit events, newest first",
      description: "Every audit event naming the device (registration, lifecycle, commands, presence). Paged with `limit` (default 50, max 500) and `offset`; `total` counts them all.",
      request: { params: s.DeviceParams, query: l.HistoryQuery },
      responses: { 200: jsonResponse(l.DeviceAuditPage, "Events") },
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const q = c.req.valid("query");
      const { rows, total } = await deviceAuditEvents(c.var.db, device.deviceId, q);
      const events = rows.map((r) => ({
        id: r.id, event_type: r.eventType, category: r.category, severity: r.severity, description: r.description, user_id: r.userId,
        job_id: r.jobId, site_id: r.siteId, event_metadata: (r.eventMetadata ?? {}) as Record<string, unknown>, ip_address: r.ipAddress, created_at: r.createdAt,
      }));
      return c.json({ device_id: device.deviceId, events, total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/jobs", auth: "user", access: { device: "viewer" }, tags: TAGS,
      summary: "Jobs that targeted a device, newest first",
      description: "Each job the device took part in, with the job's status and the device's own execution (status, command, result, error). Paged with `limit` (default 50, max 500) and `offset`; `total` counts them all.",
      request: { params: s.DeviceParams, query: l.HistoryQuery },
      responses: { 200: jsonResponse(l.DeviceJobPage, "Jobs") },
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const q = c.req.valid("query");
      const { rows, total } = await deviceJobExecutions(c.var.db, device.deviceId, q);
      const list = rows.map(({ job, execution }) => ({
        job_id: job.jobId, site_id: job.siteId, action: job.action, priority: job.priority, job_status: job.status, execution_status: execution.status,
        command_id: execution.commandId, result: execution.result ?? null, error_message: execution.errorMessage, created_at: execution.createdAt,
        completed_at: execution.completedAt,
      }));
      return c.json({ device_id: device.deviceId, jobs: list, total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/error-logs", auth: "user", access: { device: "viewer" }, tags: TAGS,
      summary: "Errors reported about a device, newest first",
      description: "Error reports whose context names the device (`context.device_id`), folded as in the error log. Paged with `limit` (default 50, max 500) and `offset`; `total` counts them all.",
      request: { params: s.DeviceParams, query: l.HistoryQuery },
      responses: { 200: jsonResponse(l.DeviceErrorPage, "Errors") },
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      const q = c.req.valid("query");
      const { rows, total } = await deviceErrors(c.var.db, device.deviceId, q);
      const errors = rows.map((r) => ({
        id: r.id, category: r.category, severity: r.severity, error_message: r.errorMessage, context: (r.context ?? null) as Record<string, unknown> | null,
        resolution_status: r.resolutionStatus, occurrences: r.occurrences, first_seen_at: r.createdAt, last_seen_at: r.lastSeenAt ?? r.createdAt,
      }));
      return c.json({ device_id: device.deviceId, errors, total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}/state-history", auth: "user", access: { device: "viewer" }, tags: TAGS,
      summary: "A device's state changes, newest first",
      description: "The same timeline as `GET /api/v1/metrics/device-state-history/{device_id}`: the last `hours` (1–720, default 24) of presence transitions, lifecycle changes (suspend, resume, retire, transfer, re-enrol, archive) and reported changes, with who and why. Paged (`limit` ≤ 500) with `total`.",
      request: { params: s.DeviceParams, query: StateHistoryQuery },
      responses: { 200: jsonResponse(DeviceStateHistory, "The timeline") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      return c.json(await deviceStateTimeline(c.var.db, grantedDevice(c).device, { ...q, now: workerClock.now() }), 200);
    },
  );

  return app;
}

/** `/api/v1/devices/sites` and `/api/v1/devices/sites/{site_id}`: the caller's sites seen from the device registry. */
export function deviceSiteSummaryRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/", auth: "user", tags: TAGS,
      summary: "The caller's sites with device counts",
      description: "Every site the caller can read (administrators: all), oldest first, each with its devices counted by last known status and by lifecycle state. Paged with `limit` (default 100, max 500) and `offset`; `total` counts the sites.",
      request: { query: l.SitePageQuery },
      responses: { 200: jsonResponse(l.SiteDeviceSummaryPage, "Sites") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const { rows, total } = await siteDeviceSummaries(c.var.db, c.var.user!, q);
      return c.json({ sites: rows, total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{site_id}", auth: "user", access: { site: "viewer" }, tags: TAGS,
      summary: "A site with its devices",
      description: "The site, its device counts by status and lifecycle state, and all its devices, newest first. An unknown site (or one the caller cannot read) is 404.",
      request: { params: s.SiteParams },
      responses: { 200: jsonResponse(l.SiteWithDevices, "The site") },
    }),
    async (c) => {
      const { site, devices } = await siteWithDevices(c.var.db, grantedSite(c).site);
      return c.json({ ...site, devices: devices.map(s.toDeviceListItem) }, 200);
    },
  );

  return app;
}
