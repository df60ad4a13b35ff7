import type { Context } from "hono";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { forbidden, notFound, tooManyRequests, unprocessable } from "../../lib/errors";
import type { AppEnv } from "../../env";
import { analyticsCollection } from "../../middleware/analytics-collection";
import { userIfSignedIn } from "../../middleware/user-or-device";
import { authorizeSite, deviceNotFound } from "../../services/access";
import { ensureOwnDevice, findDevice } from "../../services/devices";
import { findJob, jobNotFound } from "../../services/jobs";
import {
  changedByOf, recordDeviceStateChange, recordJobOutcome, recordUserActivity, type Reporter,
} from "../../services/analytics";
import { listErrors, recordError, setErrorResolution, type ErrorRow } from "../../services/analytics-errors";
import * as s from "./schema";
import { workerClock } from "../../lib/clock";

const TAGS = ["Analytics"];

const DISABLED = "With ANALYTICS_ENABLED off, answers 503 and records nothing.";
const SIZES = "Bodies are limited to 64 KB (413 beyond); unknown fields are 422.";

/** The reporter of a device-or-user report: the device itself when it sent its headers, else the operator. */
const reporterOf = (c: Context<AppEnv>): Reporter =>
  c.var.device ? { kind: "device", deviceId: c.var.device.deviceId, siteId: c.var.device.siteId } : { kind: "user", user: c.var.user! };

/**
 * Who may report about a device: the device itself (only about itself: 403 otherwise), or a user
 * with the operator role on the device's site (unknown device, or no role on its site: 404; a lower role: 403). The device is
 * named in the body, so this is checked here, after validation, as for audit events.
 */
async function authorizeDeviceReport(c: Context<AppEnv>, deviceId: string) {
  const reporter = reporterOf(c);
  if (reporter.kind === "device") ensureOwnDevice(reporter.deviceId, deviceId);
  const device = await findDevice(c.var.db, deviceId);
  if (!device) throw deviceNotFound(deviceId);
  if (reporter.kind === "user") await authorizeSite(c.var.db, reporter.user, device.siteId, "operator", c.req.raw, { hiddenAs: () => deviceNotFound(deviceId) });
  return { device, reporter };
}

/**
 * Who may report a job's outcome: a device, for a job of its own site and only its own execution;
 * or a user with the operator role on the job's site, naming (optionally) a device of that site.
 */
async function authorizeJobReport(c: Context<AppEnv>, jobId: string, deviceId: string | null | undefined) {
  const reporter = reporterOf(c);
  const job = await findJob(c.var.db, jobId);
  if (reporter.kind === "device") {
    ensureOwnDevice(reporter.deviceId, deviceId ?? undefined);
    if (job.siteId !== reporter.siteId) throw forbidden("A device may only report outcomes of its own site's jobs");
    return { job, reporter, deviceId: reporter.deviceId };
  }
  await authorizeSite(c.var.db, reporter.user, job.siteId, "operator", c.req.raw, { hiddenAs: () => jobNotFound(jobId) });
  if (deviceId) {
    const device = await findDevice(c.var.db, deviceId);
    if (!device) throw notFound(`Device with ID '${deviceId}' not found`);
    if (device.siteId !== job.siteId) throw unprocessable([{ loc: ["body", "device_id"], msg: "The device is not on the job's site", type: "value_error" }]);
  }
  return { job, reporter, deviceId: deviceId ?? null };
}

const toErrorRecord = (r: ErrorRow) => ({
  id: r.id,
  category: r.category,
  severity: r.severity,
  error_message: r.errorMessage,
  stack_trace: r.stackTrace,
  context: (r.context ?? null) as Record<string, unknown> | null,
  resolution_status: r.resolutionStatus,
  occurrences: r.occurrences,
  first_seen_at: r.createdAt,
  last_seen_at: r.lastSeenAt ?? r.createdAt,
  user_id: r.userId,
  session_id: r.sessionId,
  request_id: r.requestId,
  resolved_at: r.resolvedAt,
  resolved_by: r.resolvedBy,
});

/** `/api/v1/analytics`: what browsers, operators and devices report (docs/analytics.md). */
export function analyticsRoutes() {
  const app = newRouter();
  for (const path of ["/user-activity", "/error", "/device-state-change", "/job-outcome"]) app.use(path, analyticsCollection);

  app.openapi(
    apiRoute({
      method: "post", path: "/user-activity", auth: "user", tags: TAGS,
      unauthenticatedDetail: "Failed to log activity",
      summary: "Record a user activity",
      description: `A page view, click, search or other interaction of the signed-in user (Bearer token or the \`access_token\` cookie). Without a valid one: 401 \`{"detail": "Failed to log activity"}\`. ${SIZES} ${DISABLED}`,
      request: jsonBody(s.UserActivityBody),
      responses: { 201: jsonResponse(s.UserActivityRecorded, "Recorded") },
      errors: [503],
    }),
    async (c) => {
      const activityId = await recordUserActivity(c.var.db, c.var.user!, c.req.valid("json"));
      return c.json({ message: "Activity logged", activity_id: activityId }, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/error", auth: "none", tags: TAGS,
      summary: "Report an error",
      description: `No credentials needed: a browser reports its own crashes before or after sign-in; a valid token, when sent, records the user. Identical reports (same category, message and first stack frame) within 5 minutes of the first are counted in one row (200, \`folded\`); otherwise a new row (201). At most 30 reports per minute per client (address and \`session_id\`): 429 with Retry-After beyond. Administrators set the resolution with \`PATCH /api/v1/analytics/errors/{error_id}\`. ${SIZES} ${DISABLED}`,
      request: jsonBody(s.ErrorReportBody),
      responses: {
        201: jsonResponse(s.ErrorReportRecorded, "Recorded as a new error"),
        200: jsonResponse(s.ErrorReportRecorded, "Counted in the existing row of the same error"),
      },
      errors: [429, 503],
    }),
    async (c) => {
      const body = c.req.valid("json");
      const user = await userIfSignedIn(c);
      const ipAddress = c.req.header("CF-Connecting-IP") ?? null;
      const outcome = await recordError(c.env.DB, {
        category: body.category, severity: body.severity, message: body.error_message, stackTrace: body.stack_trace,
        context: body.context, sessionId: body.session_id, ipAddress, userId: user?.id ?? null, requestId: c.var.requestId,
      }, workerClock.now(), { rateLimited: true });
      if (!outcome.recorded) throw tooManyRequests("Too many error reports from this client; try again later", outcome.retryAfterS);
      const answer = { message: outcome.folded ? "Error counted" : "Error logged", error_id: outcome.id, occurrences: outcome.occurrences, folded: outcome.folded };
      return outcome.folded ? c.json(answer, 200) : c.json(answer, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/device-state-change", auth: "user-or-device", tags: TAGS,
      summary: "Record a device state change",
      description: `Sent by the device itself (X-Device-ID and X-API-Key; changed_by \`system\`, only about itself) or by a user with the operator role on the device's site (changed_by \`user\`). It joins the device's timeline (\`GET /api/v1/metrics/device-state-history/{device_id}\`) and does not change the device's status, which its presence keeps. ${SIZES} ${DISABLED}`,
      request: jsonBody(s.DeviceStateChangeBody),
      responses: { 201: jsonResponse(s.DeviceStateChangeRecorded, "Recorded") },
      errors: [404, 503],
    }),
    async (c) => {
      const body = c.req.valid("json");
      const { device, reporter } = await authorizeDeviceReport(c, body.device_id);
      if (body.changed_by && body.changed_by !== changedByOf(reporter)) {
        throw unprocessable([{ loc: ["body", "changed_by"], msg: `This caller's changes are changed_by '${changedByOf(reporter)}'`, type: "value_error" }]);
      }
      const row = await recordDeviceStateChange(c.var.db, device, body, reporter);
      return c.json({ message: "State change logged", history_id: row.id, device_id: row.deviceId, changed_by: changedByOf(reporter), timestamp: row.timestamp }, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/job-outcome", auth: "user-or-device", tags: TAGS,
      summary: "Record a job outcome",
      description: `A job's result as its initiator or a device saw it: sent by a device (only its own execution of a job of its site) or by a user with the operator role on the job's site. With a device_id it is that device's execution, without one the whole job's outcome. The site's hub records an outcome for every job and every device execution it runs by itself. ${SIZES} ${DISABLED}`,
      request: jsonBody(s.JobOutcomeBody),
      responses: { 201: jsonResponse(s.JobOutcomeRecorded, "Recorded") },
      errors: [404, 503],
    }),
    async (c) => {
      const body = c.req.valid("json");
      const { job, reporter, deviceId } = await authorizeJobReport(c, body.job_id, body.device_id);
      const { id, scope } = await recordJobOutcome(c.env.DB, c.var.db, job, { ...body, device_id: deviceId }, reporter);
      return c.json({ message: "Job outcome logged", outcome_id: id, job_id: job.jobId, scope }, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/errors", auth: "admin", tags: TAGS,
      summary: "Recorded errors (administrators)",
      description: "Reported errors and the service's own failures, newest first, each with its occurrence count and resolution status.",
      request: { query: s.ErrorListQuery },
      responses: { 200: jsonResponse(s.ErrorPage, "A page of errors") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const { rows, total } = await listErrors(c.var.db, { status: q.resolution_status, category: q.category, severity: q.severity, limit: q.limit, offset: q.offset });
      return c.json({ errors: rows.map(toErrorRecord), total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/errors/{error_id}", auth: "admin", tags: TAGS,
      summary: "Set an error's resolution (administrators)",
      description: "`open`, `resolved` or `ignored`. A resolved error that happens again starts a new row; an ignored one keeps counting in its row.",
      request: { params: s.ErrorParams, ...jsonBody(s.ResolutionBody) },
      responses: { 200: jsonResponse(s.ErrorRecord, "The updated error") },
      errors: [404],
    }),
    async (c) => {
      const { error_id } = c.req.valid("param");
      const row = await setErrorResolution(c.var.db, Number(error_id), c.req.valid("json").resolution_status, c.var.user!.id);
      return c.json(toErrorRecord(row), 200);
    },
  );

  return app;
}
