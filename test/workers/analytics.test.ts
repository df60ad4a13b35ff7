import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { and, eq, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { createApp } from "../../src/app";
import { ERROR_FOLD_WINDOW_MS, ERROR_REPORTS_PER_MINUTE, recordError, reportClientKey } from "../../src/services/analytics-errors";
import { admin, call, db, grantSiteRole, signup, unique } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { flushHub } from "./commands-helpers";
import { checkResponse } from "./response-contract";

const A = "/api/v1/analytics";

async function member(ownerToken: string, siteId: string, role: "viewer" | "operator") {
  const user = await signup();
  await grantSiteRole(ownerToken, siteId, user, role);
  return user;
}

const activitiesOf = (userId: number) => db().select().from(schema.userActivities).where(eq(schema.userActivities.userId, userId)).all();
const historyOf = (deviceId: string) => db().select().from(schema.deviceStateHistory).where(eq(schema.deviceStateHistory.deviceId, deviceId)).all();
const outcomesOf = (jobId: string) => db().select().from(schema.jobOutcomes).where(eq(schema.jobOutcomes.jobId, jobId)).all();
const errorsWith = (message: string) => db().select().from(schema.errorLogs).where(eq(schema.errorLogs.errorMessage, message)).all();

describe("POST /analytics/user-activity", () => {
  it("records the signed-in user's activity, by Bearer token or cookie, and answers its integer id", async () => {
    const user = await signup();
    const res = await call(`${A}/user-activity`, {
      method: "POST", token: user.token,
      body: { activity_type: "search", page_url: "/devices", element_id: "search-box", search_query: "till 4", session_id: "s-1", duration_ms: 1200, extra_data: { results: 3 } },
    });
    expect(res.status).toBe(201);
    expect(res.json).toEqual({ message: "Activity logged", activity_id: expect.any(Number) });
    expect(Number.isInteger(res.json.activity_id)).toBe(true);
    const byCookie = await call(`${A}/user-activity`, { method: "POST", cookie: `access_token=${user.token}`, body: { activity_type: "page_view", page_url: "/sites" } });
    expect(byCookie.status).toBe(201);
    const rows = await activitiesOf(user.id);
    expect(rows.map((r) => r.id).sort()).toEqual([res.json.activity_id, byCookie.json.activity_id].sort());
    expect(rows.find((r) => r.id === res.json.activity_id)).toMatchObject({
      activityType: "search", pageUrl: "/devices", elementId: "search-box", searchQuery: "till 4", sessionId: "s-1", durationMs: 1200, extraData: { results: 3 },
    });
  });

  it("answers 401 'Failed to log activity' without a valid token, and records nothing", async () => {
    const user = await signup();
    for (const auth of [{}, { token: "not-a-jwt" }, { cookie: "access_token=garbage" }]) {
      const res = await call(`${A}/user-activity`, { method: "POST", body: { activity_type: "click" }, ...auth });
      expect(res.status).toBe(401);
      expect(res.json).toEqual({ detail: "Failed to log activity" });
    }
    expect(await activitiesOf(user.id)).toEqual([]);
  });

  it("refuses unknown fields, bad enums and oversize extra_data with 422 and bodies over 64 KB with 413", async () => {
    const user = await signup();
    const post = (body: unknown) => call(`${A}/user-activity`, { method: "POST", token: user.token, body });
    const unknownField = await post({ activity_type: "click", page: "/x" });
    expect(unknownField.status).toBe(422);
    expect(unknownField.json.detail[0].type).toBe("unrecognized_keys");
    expect((await post({ activity_type: "scroll" })).status).toBe(422);
    expect((await post({ activity_type: "click", duration_ms: -1 })).status).toBe(422);
    const tooMuch = await post({ activity_type: "click", extra_data: { blob: "x".repeat(8 * 1024) } });
    expect(tooMuch.status).toBe(422);
    expect(tooMuch.json.detail[0].loc).toEqual(["body", "extra_data"]);
    expect((await post({ activity_type: "click", extra_data: { blob: "x".repeat(8 * 1024 - 20) } })).status).toBe(201);
    const huge = await post({ activity_type: "click", page_url: "x".repeat(70 * 1024) });
    expect(huge.status).toBe(413);
    expect(await activitiesOf(user.id)).toHaveLength(1);
  });
});

describe("POST /analytics/error", () => {
  it("needs no credentials, records the user when a token is sent, and folds identical reports into one row", async () => {
    const message = unique("TypeError: x is undefined ");
    const stack = `TypeError: x\n    at render (app.js:10:5)\n    at main (app.js:1:1)`;
    const first = await call(`${A}/error`, { method: "POST", body: { category: "frontend", severity: "error", error_message: message, stack_trace: stack, context: { route: "/sites" } } });
    expect(first.status).toBe(201);
    expect(first.json).toEqual({ message: "Error logged", error_id: expect.any(Number), occurrences: 1, folded: false });
    // Same category, message and first frame (the rest of the trace may differ): the same error.
    const user = await signup();
    const again = await call(`${A}/error`, { method: "POST", token: user.token, body: { category: "frontend", error_message: message, stack_trace: `TypeError: x\n    at render (app.js:10:5)\n    at other (b.js:2:2)` } });
    expect(again.status).toBe(200);
    expect(again.json).toEqual({ message: "Error counted", error_id: first.json.error_id, occurrences: 2, folded: true });
    // Another first frame, or another category: another error.
    const otherFrame = await call(`${A}/error`, { method: "POST", body: { category: "frontend", error_message: message, stack_trace: "TypeError: x\n    at paint (app.js:99:1)" } });
    expect(otherFrame.status).toBe(201);
    const otherCategory = await call(`${A}/error`, { method: "POST", token: user.token, body: { category: "api", error_message: message, stack_trace: stack } });
    expect(otherCategory.status).toBe(201);
    const rows = await errorsWith(message);
    expect(rows).toHaveLength(3);
    expect(rows.find((r) => r.id === first.json.error_id)).toMatchObject({ category: "frontend", severity: "error", occurrences: 2, resolutionStatus: "open", context: { route: "/sites" }, userId: null });
    expect(rows.find((r) => r.id === otherCategory.json.error_id)!.userId).toBe(user.id);
  });

  it("records the cookie's user only when the service's own page (or a listed one) sent the report; another site's report is kept, unattributed", async () => {
    const user = await signup();
    const cookie = `access_token=${user.token}`;
    const report = (headers: Record<string, string>) => {
      const message = unique("ReferenceError ");
      return call(`${A}/error`, { method: "POST", cookie, headers, body: { category: "frontend", error_message: message } })
        .then(async (res) => ({ status: res.status, userId: (await errorsWith(message))[0]?.userId }));
    };
    expect(await report({ Origin: "http://fleet.test" })).toEqual({ status: 201, userId: user.id });
    expect(await report({})).toEqual({ status: 201, userId: user.id });
    expect(await report({ Origin: "https://evil.example.net" })).toEqual({ status: 201, userId: null });
    expect(await report({ "Sec-Fetch-Site": "cross-site" })).toEqual({ status: 201, userId: null });
  });

  it("folds within 5 minutes of the first sighting only, and never into a resolved error", async () => {
    const report = { category: "database" as const, severity: "error" as const, message: unique("deadlock "), stackTrace: "at q (db.ts:1:1)" };
    const t0 = Date.now() - 3_600_000;
    const a = await recordError(env.DB, report, t0);
    const b = await recordError(env.DB, report, t0 + ERROR_FOLD_WINDOW_MS - 1);
    expect(b).toEqual({ recorded: true, id: a.recorded ? a.id : -1, occurrences: 2, folded: true });
    const c = await recordError(env.DB, report, t0 + ERROR_FOLD_WINDOW_MS + 1);
    expect(c).toMatchObject({ recorded: true, folded: false, occurrences: 1 });
    // Resolved: the next identical report is a new row (a regression), not a silent count.
    const boss = await admin();
    const id = c.recorded ? c.id : -1;
    const resolved = await call(`${A}/errors/${id}`, { method: "PATCH", token: boss.token, body: { resolution_status: "resolved" } });
    expect(resolved.status).toBe(200);
    expect(resolved.json).toMatchObject({ id, resolution_status: "resolved", resolved_by: boss.id, occurrences: 1 });
    const d = await recordError(env.DB, report, t0 + ERROR_FOLD_WINDOW_MS + 2);
    expect(d).toMatchObject({ recorded: true, folded: false });
    expect(await errorsWith(report.message)).toHaveLength(3);
  });

  it("counts concurrent identical reports in one row", async () => {
    const message = unique("burst ");
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) =>
      call(`${A}/error`, { method: "POST", body: { category: "frontend", error_message: message, session_id: `burst-${i}` } })));
    expect(answers.filter((r) => r.status === 201)).toHaveLength(1);
    expect(answers.filter((r) => r.status === 200)).toHaveLength(11);
    const rows = await errorsWith(message);
    expect(rows).toHaveLength(1);
    expect(rows[0].occurrences).toBe(12);
  });

  it("limits each client (address and session) per minute: 429 with Retry-After, and nothing is written", async () => {
    const t = Date.now() - 7_200_000;
    const report = { category: "frontend" as const, severity: "warning" as const, message: unique("noisy "), ipAddress: "198.51.100.7", sessionId: unique("s-") };
    for (let i = 0; i < ERROR_REPORTS_PER_MINUTE; i++) expect((await recordError(env.DB, report, t, { rateLimited: true })).recorded).toBe(true);
    const refused = await recordError(env.DB, report, t, { rateLimited: true });
    expect(refused).toEqual({ recorded: false, retryAfterS: 60 - Math.floor((t % 60_000) / 1000) });
    const [row] = await errorsWith(report.message);
    expect(row.occurrences).toBe(ERROR_REPORTS_PER_MINUTE);
    // Another session from the same address is another client; the next minute starts afresh.
    expect((await recordError(env.DB, { ...report, sessionId: unique("s-") }, t, { rateLimited: true })).recorded).toBe(true);
    expect((await recordError(env.DB, report, t + 60_000, { rateLimited: true })).recorded).toBe(true);

    // Over HTTP: this minute's (and the next minute's) window already full for this client.
    const sessionId = unique("http-");
    const key = await reportClientKey("203.0.113.9", sessionId);
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    await db().insert(schema.errorReportWindows).values([0, 60_000].map((d) => ({ clientKey: key, windowStart: new Date(minute + d).toISOString(), reports: ERROR_REPORTS_PER_MINUTE })));
    const message = unique("over the limit ");
    const res = await call(`${A}/error`, { method: "POST", headers: { "CF-Connecting-IP": "203.0.113.9" }, body: { category: "frontend", error_message: message, session_id: sessionId } });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(Number(res.headers.get("Retry-After"))).toBeLessThanOrEqual(60);
    expect(await errorsWith(message)).toEqual([]);
  });

  it("validates category, severity and fields (422) and sizes (413)", async () => {
    const post = (body: unknown) => call(`${A}/error`, { method: "POST", body });
    expect((await post({ category: "kernel", error_message: "x" })).status).toBe(422);
    expect((await post({ category: "api", severity: "fatal", error_message: "x" })).status).toBe(422);
    expect((await post({ category: "api", error_message: "" })).status).toBe(422);
    expect((await post({ category: "api", error_message: "x", user_agent: "y" })).status).toBe(422);
    expect((await post({ category: "api", error_message: "x", context: { big: "y".repeat(9000) } })).status).toBe(422);
    expect((await post({ category: "api", error_message: "x", stack_trace: "z".repeat(80 * 1024) })).status).toBe(413);
  });

  it("lets administrators list errors and set their resolution; nobody else", async () => {
    const message = unique("list me ");
    const posted = await call(`${A}/error`, { method: "POST", body: { category: "validation", severity: "warning", error_message: message } });
    const boss = await admin();
    const list = await call(`${A}/errors?category=validation&resolution_status=open&limit=500`, { token: boss.token });
    expect(list.status).toBe(200);
    expect(list.json.errors.find((e: { id: number }) => e.id === posted.json.error_id)).toMatchObject({ error_message: message, severity: "warning", occurrences: 1, resolution_status: "open" });
    const someone = await signup();
    expect((await call(`${A}/errors`, { token: someone.token })).status).toBe(403);
    expect((await call(`${A}/errors/${posted.json.error_id}`, { method: "PATCH", token: someone.token, body: { resolution_status: "ignored" } })).status).toBe(403);
    expect((await call(`${A}/errors/${posted.json.error_id}`, { method: "PATCH", token: boss.token, body: { resolution_status: "fixed" } })).status).toBe(422);
    expect((await call(`${A}/errors/999999999`, { method: "PATCH", token: boss.token, body: { resolution_status: "ignored" } })).status).toBe(404);
    const ignored = await call(`${A}/errors/${posted.json.error_id}`, { method: "PATCH", token: boss.token, body: { resolution_status: "ignored" } });
    expect(ignored.json).toMatchObject({ resolution_status: "ignored", resolved_by: boss.id });
    // An ignored error keeps counting in its row.
    expect((await call(`${A}/error`, { method: "POST", body: { category: "validation", error_message: message } })).json).toMatchObject({ error_id: posted.json.error_id, folded: true });
    const reopened = await call(`${A}/errors/${posted.json.error_id}`, { method: "PATCH", token: boss.token, body: { resolution_status: "open" } });
    expect(reopened.json).toMatchObject({ resolution_status: "open", resolved_at: null, resolved_by: null, occurrences: 2 });
  });

  it("records the service's own unhandled failures as api errors, folded like any other", async () => {
    const app = createApp();
    const path = `/api/v1/__boom-${unique()}`;
    app.get(path, () => { throw new Error(`kaboom ${path}`); });
    for (let i = 0; i < 2; i++) {
      const ctx = createExecutionContext();
      const res = await app.request(path, {}, { ...env }, ctx);
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(500);
    }
    const rows = await errorsWith(`kaboom ${path}`);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ category: "api", severity: "error", occurrences: 2, context: { method: "GET", path } });
  });
});

describe("POST /analytics/device-state-change", () => {
  it("takes the device's own report (changed_by system) and an operator's (changed_by user), as history only", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    expect((await heartbeat(device.device_id, device.api_key)).json.device_status).toBe("online");
    const own = await call(`${A}/device-state-change`, {
      method: "POST", headers: deviceHeaders(device.device_id, device.api_key),
      body: { device_id: device.device_id, previous_state: "online", new_state: "Maintenance", reason: "drawer jammed", extra_data: { drawer: 2 } },
    });
    expect(own.status).toBe(201);
    expect(own.json).toMatchObject({ message: "State change logged", device_id: device.device_id, changed_by: "system", history_id: expect.any(Number) });
    const byOperator = await call(`${A}/device-state-change`, { method: "POST", token: owner.token, body: { device_id: device.device_id, new_state: "offline", changed_by: "user", reason: "taken out" } });
    expect(byOperator.status).toBe(201);
    expect(byOperator.json.changed_by).toBe("user");
    const rows = (await historyOf(device.device_id)).filter((r) => r.source === "reported");
    expect(rows.map((r) => [r.previousState, r.newState, r.changedBy, r.userId, r.reason, r.siteId])).toEqual([
      ["online", "maintenance", "system", null, "drawer jammed", siteId],
      [null, "offline", "user", owner.id, "taken out", siteId],
    ]);
    expect(rows[0].extraData).toEqual({ drawer: 2 });
    // The device's status is still what its presence says, whatever was reported last.
    await flushHub(siteId);
    const [row] = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, device.device_id)).all();
    expect(row.status).toBe("online");
  });

  it("refuses a device reporting about another (403), viewers (403), strangers and unknown devices alike (404), no credentials (401)", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const other = await registerDevice(owner.token, siteId);
    const viewer = await member(owner.token, siteId, "viewer");
    const stranger = await signup();
    const body = { device_id: other.device_id, new_state: "offline" };
    expect((await call(`${A}/device-state-change`, { method: "POST", headers: deviceHeaders(device.device_id, device.api_key), body })).status).toBe(403);
    expect((await call(`${A}/device-state-change`, { method: "POST", headers: deviceHeaders(device.device_id, "wrong-key"), body: { ...body, device_id: device.device_id } })).status).toBe(401);
    expect((await call(`${A}/device-state-change`, { method: "POST", token: viewer.token, body })).status).toBe(403);
    const hidden = await call(`${A}/device-state-change`, { method: "POST", token: stranger.token, body });
    expect([hidden.status, hidden.json]).toEqual([404, { detail: `Device with ID '${other.device_id}' not found` }]);
    expect((await call(`${A}/device-state-change`, { method: "POST", token: owner.token, body: { ...body, device_id: unique("NOPE-") } })).status).toBe(404);
    expect((await call(`${A}/device-state-change`, { method: "POST", body })).status).toBe(401);
    expect((await historyOf(other.device_id)).filter((r) => r.source === "reported")).toEqual([]);
  });

  it("validates state names, changed_by and fields with 422", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const post = (body: unknown) => call(`${A}/device-state-change`, { method: "POST", token: owner.token, body });
    expect((await post({ device_id: device.device_id, new_state: "off line!" })).status).toBe(422);
    expect((await post({ device_id: device.device_id })).status).toBe(422);
    expect((await post({ device_id: device.device_id, new_state: "offline", timestamp: "2026-01-01" })).status).toBe(422);
    const mismatch = await post({ device_id: device.device_id, new_state: "offline", changed_by: "system" });
    expect(mismatch.status).toBe(422);
    expect(mismatch.json.detail[0].loc).toEqual(["body", "changed_by"]);
    expect(await historyOf(device.device_id)).toEqual([]);
  });
});

describe("POST /analytics/job-outcome", () => {
  async function siteWithJob() {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "update_firmware" } });
    expect(job.status).toBe(201);
    return { owner, siteId, device, jobId: job.json.job_id as string };
  }

  it("takes an operator's outcome of the whole job or of one device, and a device's of its own execution", async () => {
    const { owner, siteId, device, jobId } = await siteWithJob();
    const whole = await call(`${A}/job-outcome`, { method: "POST", token: owner.token, body: { job_id: jobId, status: "completed", duration_ms: 5000, retry_count: 1, metadata: { note: "ok" } } });
    expect(whole.status).toBe(201);
    expect(whole.json).toMatchObject({ message: "Job outcome logged", job_id: jobId, scope: "job", outcome_id: expect.any(Number) });
    const forDevice = await call(`${A}/job-outcome`, { method: "POST", token: owner.token, body: { job_id: jobId, device_id: device.device_id, status: "failed", error_code: "E42" } });
    expect(forDevice.json.scope).toBe("execution");
    const own = await call(`${A}/job-outcome`, { method: "POST", headers: deviceHeaders(device.device_id, device.api_key), body: { job_id: jobId, job_type: "firmware", status: "timeout", duration_ms: 900000 } });
    expect(own.status).toBe(201);
    expect(own.json.scope).toBe("execution");
    const rows = (await outcomesOf(jobId)).filter((r) => [whole.json.outcome_id, forDevice.json.outcome_id, own.json.outcome_id].includes(r.id)).sort((a, b) => a.id - b.id);
    expect(rows.map((r) => [r.scope, r.deviceId, r.jobType, r.status, r.durationMs, r.errorCode, r.retryCount, r.siteId])).toEqual([
      ["job", null, "update_firmware", "completed", 5000, null, 1, siteId],
      ["execution", device.device_id, "update_firmware", "failed", null, "E42", 0, siteId],
      ["execution", device.device_id, "firmware", "timeout", 900000, null, 0, siteId],
    ]);
    expect(rows[0].metadata).toEqual({ note: "ok", reported_by: { user_id: owner.id } });
    expect(rows[2].metadata).toEqual({ reported_by: { device_id: device.device_id } });
  });

  it("refuses what the caller may not report (403), unknown jobs (404), foreign devices (422) and bad values (422)", async () => {
    const { owner, siteId, device, jobId } = await siteWithJob();
    const other = await registerDevice(owner.token, siteId);
    const elsewhere = await siteWithJob();
    const viewer = await member(owner.token, siteId, "viewer");
    const asDevice = (body: unknown) => call(`${A}/job-outcome`, { method: "POST", headers: deviceHeaders(device.device_id, device.api_key), body });
    const asOwner = (body: unknown) => call(`${A}/job-outcome`, { method: "POST", token: owner.token, body });
    expect((await asDevice({ job_id: jobId, device_id: other.device_id, status: "completed" })).status).toBe(403);
    expect((await asDevice({ job_id: elsewhere.jobId, status: "completed" })).status).toBe(403);
    expect((await call(`${A}/job-outcome`, { method: "POST", token: viewer.token, body: { job_id: jobId, status: "completed" } })).status).toBe(403);
    expect((await asOwner({ job_id: elsewhere.jobId, status: "completed" })).json).toEqual({ detail: `Job with ID '${elsewhere.jobId}' not found` });
    expect((await asOwner({ job_id: "job-000000000000", status: "completed" })).status).toBe(404);
    expect((await asOwner({ job_id: jobId, device_id: elsewhere.device.device_id, status: "completed" })).status).toBe(422);
    expect((await asOwner({ job_id: jobId, status: "succeeded" })).status).toBe(422);
    expect((await asOwner({ job_id: jobId, status: "completed", duration_ms: -5 })).status).toBe(422);
    expect((await asOwner({ job_id: jobId, status: "completed", extra: 1 })).status).toBe(422);
    expect(await outcomesOf(jobId)).toEqual([]);
  });
});

describe("POST /analytics/device-metrics", () => {
  it("takes the original agents' nested health_metrics form onto the same delta storage", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const send = (m: Record<string, number>) => call(`${A}/device-metrics`, {
      method: "POST", headers: deviceHeaders(device.device_id, device.api_key),
      body: { device_id: device.device_id, health_metrics: { cpu_usage: 20, memory_usage: 40, disk_usage: 60, temperature: 41, transaction_count: 7, ...m } },
    });
    const first = await send({ uptime: 3600, network_latency: 100 });
    expect(first.status).toBe(200);
    expect(first.json).toMatchObject({ stored: true, reason: "first_sample", device_id: device.device_id });
    expect((await send({ uptime: 3615, network_latency: 101 })).json).toMatchObject({ stored: false, reason: "unchanged" });
    // network_latency is the latency: doubling it is a change worth storing.
    expect((await send({ uptime: 3630, network_latency: 200 })).json).toMatchObject({ stored: true, reason: "changed" });
    // uptime is the uptime: going down means the device restarted.
    expect((await send({ uptime: 12, network_latency: 200 })).json).toMatchObject({ stored: true, reason: "first_sample" });
    expect((await send({ uptime: 12, network_latency: 200, cpu_usage: 130 })).status).toBe(422);
  });
});

describe("ANALYTICS_ENABLED=false", () => {
  it("answers every report 503 and writes nothing: no activity, error, state change, outcome or request log", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "ping" } });
    const app = createApp();
    const off = { ...env, ANALYTICS_ENABLED: "false" };
    const message = unique("while off ");
    const requestId = unique("off-");
    const reports: [string, unknown, Record<string, string>][] = [
      ["/user-activity", { activity_type: "click" }, { Authorization: `Bearer ${owner.token}` }],
      ["/error", { category: "frontend", error_message: message }, {}],
      ["/device-state-change", { device_id: device.device_id, new_state: "offline" }, { Authorization: `Bearer ${owner.token}` }],
      ["/job-outcome", { job_id: job.json.job_id, status: "completed" }, { Authorization: `Bearer ${owner.token}` }],
    ];
    for (const [path, body, headers] of reports) {
      const ctx = createExecutionContext();
      const request = new Request(`http://fleet.test${A}${path}`, { method: "POST", headers: { "Content-Type": "application/json", "X-Request-Id": requestId, ...headers }, body: JSON.stringify(body) });
      const res = await app.request(request, undefined, off, ctx);
      await waitOnExecutionContext(ctx);
      await checkResponse(request, res.clone());
      expect(res.status, path).toBe(503);
      expect(await res.json()).toEqual({ detail: "Analytics collection is switched off on this service (ANALYTICS_ENABLED); nothing was recorded" });
    }
    expect(await activitiesOf(owner.id)).toEqual([]);
    expect(await errorsWith(message)).toEqual([]);
    expect(await historyOf(device.device_id)).toEqual([]);
    expect(await outcomesOf(job.json.job_id)).toEqual([]);
    const logged = await db().select({ n: sql<number>`count(*)` }).from(schema.apiRequestLogs).where(and(eq(schema.apiRequestLogs.requestId, requestId))).get();
    expect(logged!.n).toBe(0);
  });
});
