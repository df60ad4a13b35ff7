import { beforeAll, describe, expect, it } from "vitest";
import { admin, call, createSite, db, eventually, fetchChecked, signup, unique } from "./helpers";
import * as schema from "../../src/db/schema";
import { deviceHeaders, registerDevice } from "./device-helpers";
import { poll, queueCommand, type Device } from "./commands-helpers";

/**
 * Every operation the OpenAPI document marks deprecated is called on a concrete path built from real
 * objects; its `Link: <…>; rel="successor-version"` must name a documented, non-deprecated operation
 * with the same method that answers the same way.
 */

interface Operation {
  deprecated?: boolean;
  security?: Record<string, unknown>[];
  parameters?: { in: string; name: string }[];
  requestBody?: { content?: { "application/json"?: { schema?: { $ref?: string } } } };
}

interface Documented { method: string; template: string; operation: Operation; pattern: RegExp }

const METHODS = ["get", "post", "put", "patch", "delete"];

const patternOf = (template: string) =>
  new RegExp(`^${template.split(/\{[^}]+\}/).map((part) => part.replace(/[.*+?^$()|[\]\\]/g, "\\$&")).join("[^/]+")}$`);

function operationsOf(document: { paths: Record<string, Record<string, Operation>> }): Documented[] {
  const out: Documented[] = [];
  for (const [template, item] of Object.entries(document.paths)) {
    for (const method of METHODS) {
      const operation = item[method];
      if (operation) out.push({ method, template, operation, pattern: patternOf(template) });
    }
  }
  return out;
}

const successorIn = (link: string | null) => /^<([^>]+)>; rel="successor-version"$/.exec(link ?? "")?.[1];

/** Which credentials an operation declares: a user token, the device headers, or none. */
const authOf = (op: Operation) => {
  const schemes = (op.security ?? []).flatMap((requirement) => Object.keys(requirement));
  if (schemes.includes("bearerAuth")) return "user";
  if (schemes.includes("deviceId")) return "device";
  return "none";
};

let token: string;
let siteId: string;
/** Target of operator calls. */
let target: Device;
/** The device that makes device-side calls; nothing is queued for it but the commands it is given. */
let caller: Device;
let commandId: string;
let jobId: string;
let bootstrapKey: string;
/** For the administrators' operations (audit alerts, integrations, verification, the audit stream). */
let adminToken: string;
let alertId: string;
const ADMIN_ONLY = /^\/audit\/(alerts|integrations|test|verify|events\/stream|export|reports|retention|archives|status|config|performance|statistics\/detailed|optimize)/;

async function newAlert() {
  const res = await call("/api/v1/audit/alerts", { method: "POST", token: adminToken, body: BODIES.AuditAlertRuleCreate!() });
  expect(res.status, res.text).toBe(201);
  return res.json.alert_id as string;
}

async function newIntegration() {
  const res = await call("/api/v1/audit/integrations", { method: "POST", token: adminToken, body: BODIES.AuditIntegrationCreate!() });
  expect(res.status, res.text).toBe(201);
  return res.json.integration_id as string;
}

/** An archive the retention run really wrote: an event three days old, archived after one day. */
let archiveId: string | undefined;
async function anArchive() {
  if (archiveId) return archiveId;
  const policy = { retention_days: 3650, archive_after_days: 1, compress_archives: false, encryption_required: false };
  expect((await call("/api/v1/audit/retention", { method: "POST", token: adminToken, body: policy })).status).toBe(200);
  await db().insert(schema.auditLogs).values({ eventType: "transaction_processed", category: "business_events", createdAt: new Date(Date.now() - 3 * 86_400_000).toISOString() });
  expect((await call("/api/v1/audit/optimize", { method: "POST", token: adminToken })).status).toBe(200);
  const listed = await call("/api/v1/audit/archives", { token: adminToken });
  archiveId = listed.json.archives[0].archive_id as string;
  return archiveId;
}

async function removeIntegrations() {
  const listed = await call("/api/v1/audit/integrations", { token: adminToken });
  for (const { integration_id } of listed.json.integrations as { integration_id: string }[]) {
    expect((await call(`/api/v1/audit/integrations/${integration_id}`, { method: "DELETE", token: adminToken })).status).toBeLessThan(300);
  }
}

async function newJob() {
  const res = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token, body: { action: "ping", target_device_ids: [target.device_id] } });
  expect(res.status, res.text).toBe(201);
  return res.json.job_id as string;
}

/** A command of `device` that the device has already polled (delivered), so it can ack and report it. */
async function deliveredCommand(device: Device) {
  const queued = await queueCommand(token, device.device_id, { command_type: "ping" });
  expect(queued.status, queued.text).toBe(201);
  const polled = await poll(device);
  expect(polled.json.commands.map((c: { command_id: string }) => c.command_id)).toContain(queued.json.command_id);
  return queued.json.command_id as string;
}

/** Request bodies by request schema: fresh names for anything that creates, so both calls succeed. */
const BODIES: Record<string, () => unknown> = {
  CreateSiteRequest: () => ({ site_id: unique("SITE-"), name: "Store" }),
  CreateDeviceRequest: () => ({ name: unique("Till "), device_type: "pos_terminal" }),
  CommandStatusReport: () => ({ status: "completed", result: { ok: true } }),
  QueueCommandRequest: () => ({ command_type: "ping" }),
  CreateJobRequest: () => ({ action: "ping", target_device_ids: [target.device_id] }),
  ProvisionRequest: () => ({ site_id: siteId, device_name: unique("Till ") }),
  BootstrapProvisionRequest: () => ({ site_id: siteId, bootstrap_key: bootstrapKey, device_name: unique("Till ") }),
  UpdateDeviceRequest: () => ({ name: "Till by the door" }),
  RestartRequest: () => ({ reason: "successor check" }),
  DiagnosticsRequest: () => ({}),
  AgentPush: () => ({ action: "ping" }),
  Heartbeat: () => ({}),
  Telemetry: () => ({ cpu_usage: 10, memory_usage: 20, disk_usage: 30 }),
  DeviceDna: () => ({ hostname: "till-1" }),
  CustomAuditEvent: () => ({ event_type: "transaction_processed" }),
  AuditAlertRuleCreate: () => ({ alert_name: unique("Rule "), event_types: ["never_recorded"], threshold: 3, time_window: 60, notification: { webhook: "https://hooks.example.com/fleet" } }),
  AuditAlertRulePatch: () => ({ threshold: 4 }),
  // A period that ended before this test began: both calls read the same events.
  AuditExportRequest: () => ({ format: "ndjson", period: { start: "2020-01-01T00:00:00Z", end: "2020-01-02T00:00:00Z" } }),
  AuditReportRequest: () => ({ report_type: "summary", period: { start: "2020-01-01T00:00:00Z", end: "2020-01-02T00:00:00Z" } }),
  AuditRetentionPolicyRequest: () => ({ retention_days: 3650, archive_after_days: 1, compress_archives: false, encryption_required: false }),
  // Critical business events only: nothing this test records is forwarded (the pool has no network).
  AuditIntegrationCreate: () => ({ type: "syslog", destination: "tls://syslog.example.com:6514", filter: { severities: ["critical"], categories: ["business_events"] } }),
};

/**
 * Path parameter values for one operation. Reads share the fixtures; calls that change what they
 * touch get their own object, so the deprecated call and its successor find it in the same state
 * (a suspended or re-keyed device, an acknowledged or cancelled command would answer differently).
 */
async function paramsFor(method: string, template: string, op: Operation): Promise<Record<string, string>> {
  const names = (op.parameters ?? []).filter((p) => p.in === "path").map((p) => p.name);
  const reads = method === "get";
  const deviceSide = authOf(op) === "device";
  const device = deviceSide
    ? caller
    : !reads && /\/(rotate-key|suspend|resume)$/.test(template) ? await registerDevice(token, siteId) : target;
  const values: Record<string, string> = {};
  for (const name of names) {
    if (name === "site_id") values[name] = siteId;
    else if (name === "device_id") values[name] = device.device_id;
    else if (name === "command_id") values[name] = reads ? commandId : await deliveredCommand(deviceSide ? caller : target);
    else if (name === "job_id") values[name] = reads ? jobId : await newJob();
    else if (name === "alert_id") values[name] = reads ? alertId : await newAlert();
    else if (name === "integration_id") values[name] = await newIntegration();
    else if (name === "archive_id") values[name] = await anArchive();
    else throw new Error(`no value for path parameter ${name} of ${method.toUpperCase()} ${template}`);
  }
  return values;
}

/** Fields stamped with the moment of the answer (health computed now, a period ending now). */
const ANSWER_TIME = new Set(["last_updated", "checked_at", "generated_at", "since", "from", "to"]);
const isTimestamp = (v: unknown) => typeof v === "string" && /^\d{4}-\d\d-\d\dT[\d:.]+Z$/.test(v);

/** Counts of the caller's own requests, which each of these calls adds to (the request log). */
const OWN_CALLS = new Set(["api_access_count"]);

/** JSON paths where two answers differ, leaving out the moment each was given and the calls' own traces. */
function differences(a: unknown, b: unknown, at = "$"): string[] {
  const key = at.slice(at.lastIndexOf(".") + 1);
  if (ANSWER_TIME.has(key) && isTimestamp(a) && isTimestamp(b)) return [];
  if (OWN_CALLS.has(key) && typeof a === "number" && typeof b === "number") return [];
  // Latencies measured on each request (the audit trail's performance figures) differ by nature.
  if (at.includes(".query_latency_ms.") && typeof a === "number" && typeof b === "number") return [];
  if (a !== null && b !== null && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    return [...keys].flatMap((k) => differences((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${at}.${k}`));
  }
  return Object.is(a, b) ? [] : [`${at}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`];
}

const fill = (template: string, values: Record<string, string>) =>
  template.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeURIComponent(values[name]!));

describe("deprecated paths", () => {
  beforeAll(async () => {
    const owner = await signup();
    token = owner.token;
    siteId = await createSite(token);
    target = await registerDevice(token, siteId);
    caller = await registerDevice(token, siteId);
    commandId = (await queueCommand(token, target.device_id, { command_type: "ping" })).json.command_id;
    jobId = await newJob();
    // A job moves from queued to sent on its own shortly after creation; reads must not race that.
    await eventually(async () => (await call(`/api/v1/jobs/${jobId}`, { token })).json.status === "sent");
    bootstrapKey = (await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token })).json.bootstrap_key;
    adminToken = (await admin()).token;
    alertId = await newAlert();
  });

  it("each names a live, documented successor that answers the same", { timeout: 180_000 }, async () => {
    const document = (await call("/openapi.json")).json;
    const documented = operationsOf(document);
    // Reads first: the writes below change state that some reads show (jobs, audit events, devices).
    const deprecated = documented.filter((d) => d.operation.deprecated)
      .sort((a, b) => Number(a.method !== "get") - Number(b.method !== "get"));
    expect(deprecated.length).toBeGreaterThan(40);

    const problems: string[] = [];
    for (const { method, template, operation } of deprecated) {
      const label = `${method.toUpperCase()} ${template}`;
      const auth = authOf(operation);
      const values = await paramsFor(method, template, operation);
      const schema = operation.requestBody?.content?.["application/json"]?.schema?.$ref?.split("/").pop();
      if (schema && !BODIES[schema]) throw new Error(`no request body for schema ${schema} (${label})`);
      const as = ADMIN_ONLY.test(template) ? adminToken : token;
      // An event stream never ends: its status and headers are compared, its body is dropped.
      const streams = template.endsWith("/events/stream");
      const send = streams
        ? async (path: string) => {
          const res = await fetchChecked(new Request(`http://fleet.test${path}`, { headers: { Authorization: `Bearer ${as}` } }));
          await res.body?.cancel();
          return { status: res.status, headers: res.headers, json: {}, text: "{}" };
        }
        : (path: string) => call(path, {
          method: method.toUpperCase(),
          token: auth === "user" ? as : undefined,
          headers: auth === "device" ? deviceHeaders(caller.device_id, caller.api_key) : {},
          body: schema ? BODIES[schema]!() : undefined,
        });

      // A test event goes to every integration, and tests never reach outside: none are left to send to.
      if (template === "/audit/test") await removeIntegrations();
      const path = fill(template, values);
      const old = await send(path);
      if (old.status >= 400) problems.push(`${label}: ${path} answered ${old.status} ${old.text}`);
      if (old.headers.get("Deprecation") !== "true") problems.push(`${label}: no Deprecation: true`);
      const successor = successorIn(old.headers.get("Link"));
      if (!successor) {
        problems.push(`${label}: no successor Link (${old.headers.get("Link")})`);
        continue;
      }

      // The first documented operation that matches serves the path: routes are registered (and
      // documented) in the order they are tried, so `/devices/pending` wins over `/devices/{device_id}`.
      const serving = documented.find((d) => d.method === method && d.pattern.test(successor));
      if (!serving) {
        problems.push(`${label}: successor ${successor} is not a documented ${method.toUpperCase()} operation`);
        continue;
      }
      if (serving.operation.deprecated) problems.push(`${label}: successor ${successor} (${serving.template}) is itself deprecated`);

      // A deletion consumes its object: the successor deletes a fresh one of its own.
      let fresh = await send(method === "delete" ? fill(serving.template, await paramsFor(method, template, operation)) : successor);
      let oldText = old.text;
      if (method === "get") {
        // A read may see state move between the two calls (a bucket boundary, a hub write landing);
        // it must settle on the same answer.
        for (let attempt = 0; attempt < 3 && fresh.text !== oldText; attempt++) {
          oldText = (await send(path)).text;
          fresh = await send(successor);
        }
      }
      if (fresh.headers.get("Deprecation") !== null) problems.push(`${label}: successor ${successor} answers Deprecation: ${fresh.headers.get("Deprecation")}`);
      if (fresh.status !== old.status) problems.push(`${label}: ${path} answered ${old.status}, successor ${successor} ${fresh.status} ${fresh.text}`);
      else if (method === "get") {
        const diff = differences(JSON.parse(oldText), fresh.json);
        if (diff.length) problems.push(`${label}: successor ${successor} answered a different body: ${diff.join("; ")}`);
      }
    }
    expect(problems).toEqual([]);
  });
});
