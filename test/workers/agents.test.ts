import { describe, expect, it } from "vitest";
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { and, desc, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db, grantSiteRole, signup } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator, telemetry } from "./device-helpers";
import { agentRow, hub, liveEvents, push, setAgent, simulatedDevice, stepAgent } from "./agents-helpers";
import { healthAt, simulatedDiagnostics } from "../../durable-objects/agent-model";
import type { DiagnosticComponent } from "../../src/shared/vocabulary";

const HEALTH_FIELDS = ["status", "config_version", "last_restart", "response_time_ms", "device_info", "services", "metrics"];

describe("simulated agents", () => {
  it("start idle and online when the device is registered, with a complete health record", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId, { device_type: "pos_terminal" });
    expect(d.api_key).toBeUndefined();

    const device = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    // The health model is a pure function of the agent and the time: the registration check is
    // exactly what it gives, and an unhealthy agent puts its device in error.
    const row = (await agentRow(siteId, d.device_id))!;
    const registered = healthAt(row, row.checked_at_ms!);
    expect(JSON.parse(row.last_health!)).toEqual(registered);
    expect(device!.status).toBe(registered.status === "unhealthy" ? "error" : "online");
    const history = await db().select().from(schema.deviceStateHistory).where(eq(schema.deviceStateHistory.deviceId, d.device_id)).all();
    expect(history[0]).toMatchObject({ previousState: null, changedBy: "system" });

    const res = await call(`/api/v1/agents/${d.device_id}`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ device_id: d.device_id, site_id: siteId, device_type: "pos_terminal", device_source: "simulated", state: "idle", config_version: "1.0.0" });
    const health = res.json.last_health_check;
    for (const field of HEALTH_FIELDS) expect(health, field).toHaveProperty(field);
    expect(Object.keys(health.device_info).sort()).toEqual(["firmware", "memory_mb", "model", "os", "storage_gb", "uptime_hours"]);
    expect(Object.keys(health.services).sort()).toEqual(["database", "network", "payment_gateway", "pos_app"]);
    for (const m of ["cpu_usage_percent", "memory_usage_percent", "disk_usage_percent", "transactions_today", "uptime_seconds"]) expect(typeof health.metrics[m], m).toBe("number");
    expect(health.status === "healthy" ? health.error : typeof health.error).toBe(health.status === "healthy" ? undefined : "string");
    expect(res.json.health_metrics).toMatchObject({ cpu_usage: health.metrics.cpu_usage_percent, transaction_count: health.metrics.transactions_today });
    expect(res.json.uptime).toMatch(/\d+s|\d+m/);
  });
});

describe("update lifecycle (driven by the hub's alarm)", () => {
  it("moves idle → downloading → updating → restarting → health_check → ready, projecting every step", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    await setAgent(siteId, d.device_id, { failure_rate: 0 });
    const before = (await liveEvents(siteId)).at(-1)?.seq ?? 0;

    const res = await push(owner.token, d.device_id, { message: "Spring release", priority: "high", action: "update", config_version: "2.0.0" });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ device_id: d.device_id, response: { status: "accepted", device_id: d.device_id, target_version: "2.0.0" } });
    expect(res.json.response.timestamp).toMatch(/Z$/);

    const projected = async () => db().select().from(schema.agents).where(eq(schema.agents.deviceId, d.device_id)).get();
    expect(await projected()).toMatchObject({ state: "downloading", configVersion: "1.0.0", targetVersion: "2.0.0", source: "simulated", siteId });
    expect((await agentRow(siteId, d.device_id))!.next_at_ms).toBeGreaterThan(Date.now());

    const seen: string[] = [];
    for (const expected of ["updating", "restarting", "health_check", "ready"]) {
      const row = await stepAgent(siteId, d.device_id);
      expect(row.state).toBe(expected);
      seen.push(row.state);
      expect((await projected())!.state).toBe(expected);
    }
    const row = (await agentRow(siteId, d.device_id))!;
    expect(row).toMatchObject({ config_version: "2.0.0", next_at_ms: null, plan: null, boot_count: 1, fault: null });
    expect(await projected()).toMatchObject({ state: "ready", configVersion: "2.0.0", targetVersion: null, healthStatus: "healthy" });

    const detail = await call(`/agents/${d.device_id}`, { token: owner.token });
    expect(detail.status).toBe(200);
    expect(detail.headers.get("Deprecation")).toBe("true");
    expect(detail.json).toMatchObject({ state: "ready", config_version: "2.0.0", last_health_check: { config_version: "2.0.0" } });

    // Published in order on the live channel.
    const states = (await liveEvents(siteId, before)).filter((e) => e.type === "agent.state" && e.data.device_id === d.device_id);
    expect(states.map((e) => [e.data.previous, e.data.state])).toEqual([
      ["idle", "downloading"], ["downloading", "updating"], ["updating", "restarting"], ["restarting", "health_check"], ["health_check", "ready"],
    ]);
    // The post-update check is recorded, and the new config audited.
    const checks = await db().select().from(schema.healthChecks).where(eq(schema.healthChecks.deviceId, d.device_id)).orderBy(desc(schema.healthChecks.id)).all();
    expect(checks[0]).toMatchObject({ status: "healthy", siteId });
    expect((checks[0].details as { reason: string }).reason).toBe("update_completed");
    const audit = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "config_updated"))).all();
    expect(audit).toHaveLength(1);
    // Telemetry goes through the metrics delta path: the first contact is stored, and the first sample
    // after the update's reboot is stored as a first sample again (15 s later in simulated time).
    const history = () => hub(siteId).metricsHistory(siteId, d.device_id, "2000-01-01T00:00:00Z");
    expect((await history())[0].reason).toBe("first_sample");
    await setAgent(siteId, d.device_id, { sim_at_ms: Date.now() - 16_000 });
    await call(`/api/v1/agents/${d.device_id}`, { token: owner.token });
    expect((await history()).at(-1)).toMatchObject({ reason: "first_sample", uptime_s: expect.any(Number) });
    expect((await history()).length).toBeGreaterThanOrEqual(2);
  });

  it("fails with a configurable rate: back to idle, unhealthy with the error, audited, device in error", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    await setAgent(siteId, d.device_id, { failure_rate: 1 });
    expect((await push(owner.token, d.device_id, { config: { receipt_printer: "disabled" } })).json.response.status).toBe("accepted");
    const plan = JSON.parse((await agentRow(siteId, d.device_id))!.plan!);
    expect(["downloading", "updating", "health_check"]).toContain(plan.fail_at);
    expect(plan.target_version).toMatch(/^cfg-[0-9a-f]{12}$/);

    let row = (await agentRow(siteId, d.device_id))!;
    const passed: string[] = [row.state];
    while (row.state !== "idle") {
      row = await stepAgent(siteId, d.device_id);
      passed.push(row.state);
    }
    expect(passed.at(-2)).toBe(plan.fail_at);
    expect(row).toMatchObject({ config_version: "1.0.0", fault: plan.error, plan: null });

    const health = await call(`/api/v1/devices/${d.device_id}/health`, { token: owner.token });
    expect(health.status).toBe(200);
    expect(health.json).toMatchObject({ device_id: d.device_id, agent_state: "idle", health: { status: "unhealthy", error: plan.error, config_version: "1.0.0" } });
    expect(health.json.last_updated).toMatch(/Z$/);

    const failed = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "agent_update_failed"))).all();
    expect(failed).toHaveLength(1);
    expect(failed[0].severity).toBe("error");
    const device = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(device!.status).toBe("error");
    const check = await db().select().from(schema.healthChecks).where(eq(schema.healthChecks.deviceId, d.device_id)).orderBy(desc(schema.healthChecks.id)).get();
    expect(check).toMatchObject({ status: "unhealthy" });
    expect((await db().select().from(schema.agents).where(eq(schema.agents.deviceId, d.device_id)).get())).toMatchObject({ state: "idle", healthStatus: "unhealthy" });

    // The errors series shows the failure.
    const errors = await call(`/api/v1/agents/${d.device_id}/errors?period=24h`, { token: owner.token });
    expect(errors.status).toBe(200);
    expect(errors.json.total_errors).toBeGreaterThanOrEqual(1);
    expect(errors.json.recent.some((e: { kind: string; message: string }) => e.kind === "update_failed" && e.message === plan.error)).toBe(true);
  });

  it("keeps the agent's state across a Durable Object restart and carries on", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    await setAgent(siteId, d.device_id, { failure_rate: 0 });
    await push(owner.token, d.device_id, { config_version: "3.1.0" });
    expect((await stepAgent(siteId, d.device_id)).state).toBe("updating");

    await abortAllDurableObjects();

    const after = await call(`/api/v1/agents/${d.device_id}`, { token: owner.token });
    expect(after.json).toMatchObject({ state: "updating", config_version: "1.0.0", target_version: "3.1.0" });
    for (const s of ["restarting", "health_check", "ready"]) expect((await stepAgent(siteId, d.device_id)).state).toBe(s);
    expect((await call(`/api/v1/agents/${d.device_id}`, { token: owner.token })).json).toMatchObject({ state: "ready", config_version: "3.1.0" });
  });
});

describe("restart and device health", () => {
  it("turns an unhealthy simulated device healthy with a fresh, recorded and audited health check", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    await setAgent(siteId, d.device_id, { fault: "POS application not responding (watchdog timeout)", fault_at_ms: Date.now() });
    const sick = await call(`/devices/${d.device_id}/health`, { token: owner.token });
    expect(sick.json.health).toMatchObject({ status: "unhealthy", error: "POS application not responding (watchdog timeout)", services: { pos_app: "error" } });
    expect(sick.headers.get("Deprecation")).toBe("true");
    expect((await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get())!.status).toBe("error");
    const bootsBefore = (await agentRow(siteId, d.device_id))!.boot_count;

    const res = await call(`/api/v1/devices/${d.device_id}/restart`, { method: "POST", token: owner.token, body: { reason: "frozen till" } });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ device_id: d.device_id, response: { status: "success", device_id: d.device_id, previous_status: "unhealthy", health_check: { status: "healthy" } } });
    expect(res.json.message).toEqual(expect.any(String));
    expect(res.json.response.health_check.error).toBeUndefined();
    expect(res.json.response.health_check.metrics.uptime_seconds).toBeLessThan(5);
    expect(Date.parse(res.json.response.health_check.checked_at)).toBeGreaterThan(Date.now() - 10_000);
    expect(res.json.response.reboot_time_seconds).toBeGreaterThan(0);
    expect((await agentRow(siteId, d.device_id))!).toMatchObject({ state: "ready", fault: null, boot_count: bootsBefore + 1 });

    const after = await call(`/api/v1/devices/${d.device_id}/health`, { token: owner.token });
    expect(after.json).toMatchObject({ agent_state: "ready", health: { status: "healthy" } });
    const audit = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "device_restart"))).all();
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ userId: owner.id, siteId, category: "device_management" });
    expect(audit[0].eventMetadata).toMatchObject({ reason: "frozen till", previous_health: "unhealthy", health: "healthy" });
    const check = await db().select().from(schema.healthChecks).where(eq(schema.healthChecks.deviceId, d.device_id)).orderBy(desc(schema.healthChecks.id)).get();
    expect(check).toMatchObject({ status: "healthy" });
    expect((check!.details as { reason: string }).reason).toBe("restart");
    expect((await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get())!.status).toBe("online");
  });

  it("restarts without a body, on the legacy path, for operators only", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    const res = await call(`/devices/${d.device_id}/restart`, { method: "POST", token: owner.token });
    expect(res.status).toBe(200);
    expect(res.headers.get("Deprecation")).toBe("true");
    expect(res.json.response.status).toBe("success");
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await call(`/api/v1/devices/${d.device_id}/health`, { token: viewer.token })).status).toBe(200);
    expect((await call(`/api/v1/devices/${d.device_id}/restart`, { method: "POST", token: viewer.token })).status).toBe(403);
    const hidden = await call(`/api/v1/devices/${d.device_id}/restart`, { method: "POST", token: (await signup()).token });
    expect([hidden.status, hidden.json]).toEqual([404, { detail: `Device with ID '${d.device_id}' not found` }]);
    expect((await call("/api/v1/devices/NO-SUCH-DEVICE/restart", { method: "POST", token: owner.token })).status).toBe(404);
    expect((await call(`/api/v1/devices/${d.device_id}/restart`, { method: "POST", token: owner.token, body: { reason: 7 } })).status).toBe(422);
  });

  it("queues a restart command for a real device and reports its last known health", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    await heartbeat(d.device_id, d.api_key);
    const res = await call(`/api/v1/devices/${d.device_id}/restart`, { method: "POST", token: owner.token, body: { reason: "nightly" } });
    expect(res.status).toBe(200);
    expect(res.json.response).toMatchObject({ status: "queued", device_id: d.device_id, health_check: { status: "healthy" }, command_id: expect.any(String) });
    const polled = await call("/api/v1/devices/pending", { headers: deviceHeaders(d.device_id, d.api_key) });
    expect(JSON.stringify(polled.json)).toContain(res.json.response.command_id);
    const audit = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "device_restart"))).all();
    expect(audit[0].eventMetadata).toMatchObject({ reason: "nightly", command_id: res.json.response.command_id, queued: true });
  });

  it("runs diagnostics on the components asked for, with logs, recorded and audited", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    const res = await call(`/devices/${d.device_id}/health`, {
      method: "POST", token: owner.token,
      body: { force_check: true, diagnostic_mode: "comprehensive", include_logs: true, test_components: ["payment", "printer", "display", "network"] },
    });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ device_id: d.device_id, diagnostic_mode: "comprehensive", agent_state: "idle" });
    // Health and diagnostics are the deterministic model's at the time of the check.
    const components: DiagnosticComponent[] = ["payment", "printer", "display", "network"];
    const row = (await agentRow(siteId, d.device_id))!;
    const checkedAt = Date.parse(res.json.timestamp);
    const expected = healthAt(row, checkedAt);
    expect(res.json.health).toEqual(expected);
    expect(res.json.diagnostics).toEqual(simulatedDiagnostics(row, expected, components, checkedAt));
    for (const result of Object.values(res.json.diagnostics) as { status: string; detail: string }[]) {
      expect(result.detail.length).toBeGreaterThan(5);
    }
    expect(res.json.logs.some((l: { kind: string }) => l.kind === "created")).toBe(true);
    expect(res.json.timestamp).toMatch(/Z$/);

    const only = await call(`/api/v1/devices/${d.device_id}/health`, { method: "POST", token: owner.token, body: { test_components: ["network"] } });
    expect(Object.keys(only.json.diagnostics)).toEqual(["network"]);
    expect(only.json.logs).toBeUndefined();
    const checks = await db().select().from(schema.healthChecks).where(eq(schema.healthChecks.deviceId, d.device_id)).all();
    expect(checks.filter((c) => (c.details as { reason: string }).reason === "diagnostic")).toHaveLength(2);
    const audits = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "device_health_check"))).all();
    expect(audits).toHaveLength(2);

    expect((await call(`/api/v1/devices/${d.device_id}/health`, { method: "POST", token: owner.token, body: { test_components: ["toaster"] } })).status).toBe(422);
    expect((await call(`/api/v1/devices/${d.device_id}/health`, { method: "POST", token: owner.token, body: { diagnostic_mode: "thorough" } })).status).toBe(422);
  });

  it("builds a real device's health from what it reports", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const never = await call(`/api/v1/devices/${d.device_id}/health`, { token: owner.token });
    expect(never.json).toMatchObject({ agent_state: "idle", health: { status: "unhealthy", error: "The device has not called in yet" } });
    await heartbeat(d.device_id, d.api_key, { uptime_seconds: 3600 });
    await telemetry(d.device_id, d.api_key, { cpu_usage: 41, memory_usage: 52, disk_usage: 63, network_latency_ms: 18, transaction_count: 77, uptime_seconds: 3600 });
    const res = await call(`/api/v1/devices/${d.device_id}/health`, { token: owner.token });
    expect(res.json).toMatchObject({
      agent_state: "ready",
      health: { status: "healthy", response_time_ms: 18, metrics: { cpu_usage_percent: 41, memory_usage_percent: 52, disk_usage_percent: 63, transactions_today: 77, uptime_seconds: 3600 }, services: { network: "connected" } },
    });
    const diag = await call(`/api/v1/devices/${d.device_id}/health`, { method: "POST", token: owner.token, body: { test_components: ["network", "printer"] } });
    expect(diag.json.diagnostics).toMatchObject({ network: { status: "pass" }, printer: { status: "unknown" } });
  });
});

describe("push", () => {
  it("accepts every body form of the specification", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    await setAgent(siteId, d.device_id, { failure_rate: 0 });

    const notification = await push(owner.token, d.device_id, { title: "Price update", body: "New prices from tomorrow", data: { list: "2026-Q3" } });
    expect(notification.status).toBe(200);
    expect(notification.json).toMatchObject({ device_id: d.device_id, response: { status: "delivered", device_id: d.device_id } });
    expect(Object.keys(notification.json.response)).toEqual(expect.arrayContaining(["status", "message", "device_id", "timestamp"]));
    expect(typeof notification.json.message).toBe("string");

    const message = await push(owner.token, d.device_id, { message: "Please restart at close", priority: "low" });
    expect(message.json.response.status).toBe("delivered");

    const config = await push(owner.token, d.device_id, { config: { log_level: "debug" } });
    expect(config.json.response).toMatchObject({ status: "accepted", target_version: expect.stringMatching(/^cfg-/) });
    // The same settings again while it installs: already in progress; another version: 409 unless forced.
    expect((await push(owner.token, d.device_id, { config: { log_level: "debug" } })).json.response.status).toBe("in_progress");
    const busy = await push(owner.token, d.device_id, { message: "v9", action: "update", config_version: "9.0.0", priority: "high" });
    expect(busy.status).toBe(409);
    expect(busy.json.detail).toContain("force");
    const forced = await push(owner.token, d.device_id, { action: "update", config_version: "9.0.0", force: true, backup_data: true });
    expect(forced.json.response).toMatchObject({ status: "accepted", target_version: "9.0.0" });
    let row = (await agentRow(siteId, d.device_id))!;
    expect(JSON.parse(row.plan!)).toMatchObject({ target_version: "9.0.0", backup: true });
    while (row.state !== "ready") row = await stepAgent(siteId, d.device_id);
    expect(row.config_version).toBe("9.0.0");
    expect((await push(owner.token, d.device_id, { config_version: "9.0.0" })).json.response.status).toBe("up_to_date");

    const restart = await push(owner.token, d.device_id, { action: "restart", force: true, backup_data: true });
    expect(restart.json.response).toMatchObject({ status: "completed", health_check: { status: "healthy" }, result: { reboot_time_seconds: expect.any(Number) } });
    const ping = await push(owner.token, d.device_id, { action: "PING" }, "/agents");
    expect(ping.headers.get("Deprecation")).toBe("true");
    expect(ping.json.response.result.latency_ms).toBeGreaterThanOrEqual(5);
    expect(ping.json.response.result.latency_ms).toBeLessThanOrEqual(50);
    for (const [action, status] of [["health_check", "completed"], ["backup", "completed"], ["clear_cache", "completed"], ["notify", "delivered"]]) {
      expect((await push(owner.token, d.device_id, { action })).json.response.status, action).toBe(status);
    }
    const pushes = (await liveEvents(siteId)).filter((e) => e.type === "agent.push" && e.data.device_id === d.device_id);
    expect(pushes.length).toBeGreaterThanOrEqual(10);
    const audits = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "agent_push"))).all();
    expect(audits.length).toBe(pushes.length);
  });

  it("refuses bad bodies with 422 and non-operators with 403", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    const bad: unknown[] = [
      {}, { data: { a: 1 } }, { force: true }, { title: 5 }, { title: "" }, { action: "explode" }, { config: "x" }, { config: [1] },
      { config_version: "bad version!" }, { priority: "asap", message: "m" }, { message: "m", colour: "red" }, { action: "update" }, [],
    ];
    for (const body of bad) {
      const res = await push(owner.token, d.device_id, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(Array.isArray(res.json.detail), JSON.stringify(body)).toBe(true);
    }
    expect((await call(`/api/v1/agents/${d.device_id}/push`, { method: "POST", token: owner.token, rawBody: "{nope" })).status).toBe(400);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await push(viewer.token, d.device_id, { title: "hi" })).status).toBe(403);
    expect((await push(owner.token, "NO-SUCH-DEVICE", { title: "hi" })).status).toBe(404);
  });

  it("queues a push to a real device as a command", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const res = await push(owner.token, d.device_id, { config: { log_level: "debug" }, config_version: "2.0.0" });
    expect(res.status).toBe(200);
    expect(res.json.response).toMatchObject({ status: "accepted", device_id: d.device_id, command_id: expect.any(String) });
    const polled = await call("/api/v1/devices/pending", { headers: deviceHeaders(d.device_id, d.api_key) });
    const command = JSON.stringify(polled.json);
    expect(command).toContain(res.json.response.command_id);
    expect(command).toContain("update_config");
    expect(command).toContain("2.0.0");
  });
});

describe("agents list", () => {
  it("serves the projection, filtered to accessible sites, by site, type and status", async () => {
    const { owner, siteId } = await siteWithOperator();
    const other = await siteWithOperator();
    const sim = await simulatedDevice(owner.token, siteId, { device_type: "tablet" });
    const real = await registerDevice(owner.token, siteId, { device_type: "pos_terminal" });
    const foreign = await simulatedDevice(other.owner.token, other.siteId);
    await setAgent(siteId, sim.device_id, { failure_rate: 0 });
    await push(owner.token, sim.device_id, { config_version: "5.0.0" });

    const mine = await call("/api/v1/agents", { token: owner.token });
    expect(mine.status).toBe(200);
    const ids = mine.json.agents.map((a: { device_id: string }) => a.device_id);
    expect(ids).toEqual(expect.arrayContaining([sim.device_id, real.device_id]));
    expect(ids).not.toContain(foreign.device_id);
    expect(mine.json.total).toBe(2);
    const simItem = mine.json.agents.find((a: { device_id: string }) => a.device_id === sim.device_id);
    expect(simItem).toMatchObject({ site_id: siteId, device_type: "tablet", device_source: "simulated", state: "downloading", config_version: "1.0.0", target_version: "5.0.0" });
    // The projection carries the hub's last check, which is the model's at its time.
    const simRow = (await agentRow(siteId, sim.device_id))!;
    expect(simItem.last_health_check).toEqual(JSON.parse(simRow.last_health!));
    expect(simItem.last_health_check.status).toBe(healthAt(simRow, simRow.checked_at_ms!).status);
    expect(simItem.uptime).toEqual(expect.any(String));
    const realItem = mine.json.agents.find((a: { device_id: string }) => a.device_id === real.device_id);
    expect(realItem).toMatchObject({ device_source: "real", status: "offline", state: "idle", health_status: "unhealthy" });
    // The list and the detail view of a real device come from the one real-device rule.
    const realDetail = await call(`/api/v1/agents/${real.device_id}`, { token: owner.token });
    const { checked_at: _listAt, ...listHealth } = realItem.last_health_check;
    const { checked_at: _detailAt, ...detailHealth } = realDetail.json.last_health_check;
    expect(listHealth).toEqual(detailHealth);
    expect(listHealth).toMatchObject({ status: "unhealthy", error: "The device has not called in yet" });

    const legacy = await call(`/agents?site_id=${siteId}&device_type=TABLET`, { token: owner.token });
    expect(legacy.headers.get("Deprecation")).toBe("true");
    expect(legacy.json.agents.map((a: { device_id: string }) => a.device_id)).toEqual([sim.device_id]);
    expect((await call("/api/v1/agents?status=downloading", { token: owner.token })).json.agents.map((a: { device_id: string }) => a.device_id)).toEqual([sim.device_id]);
    expect((await call("/api/v1/agents?status=offline", { token: owner.token })).json.agents.map((a: { device_id: string }) => a.device_id)).toEqual([real.device_id]);
    await heartbeat(real.device_id, real.api_key);
    expect((await call("/api/v1/agents?status=ready", { token: owner.token })).json.agents.map((a: { device_id: string }) => a.device_id)).toEqual([real.device_id]);
    expect((await call(`/api/v1/agents?site_id=${other.siteId}`, { token: owner.token })).json).toEqual({ agents: [], total: 0 });
    expect((await call("/api/v1/agents?status=sleeping", { token: owner.token })).status).toBe(422);
    expect((await call("/api/v1/agents", {})).status).toBe(401);
    const nobody = await signup();
    expect((await call("/api/v1/agents", { token: nobody.token })).json).toEqual({ agents: [], total: 0 });
    const hidden = await call(`/api/v1/agents/${sim.device_id}`, { token: nobody.token });
    expect([hidden.status, hidden.json]).toEqual([404, { detail: `Device with ID '${sim.device_id}' not found` }]);
  });
});

describe("series", () => {
  it("serves metrics, transactions and errors from the stored history, in regular buckets", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId);
    // Registered three hours ago and nobody looked since: the next read generates what the agent
    // reported meanwhile (every 5 minutes for a gap this long) through the metrics delta path.
    const created = Date.now() - 3 * 3_600_000;
    await setAgent(siteId, d.device_id, { sim_at_ms: created, created_ms: created, boot_ms: created });
    await runInDurableObject(hub(siteId), (_i, state) => {
      state.storage.sql.exec("DELETE FROM metrics_history WHERE device_id = ?", d.device_id);
      state.storage.sql.exec("DELETE FROM metrics_state WHERE device_id = ?", d.device_id);
    });
    const metrics = await call(`/api/v1/agents/${d.device_id}/metrics?period=24h`, { token: owner.token });
    expect(metrics.status).toBe(200);
    expect(metrics.json).toMatchObject({ device_id: d.device_id, period: "24h", bucket_seconds: 3600 });
    expect(metrics.json.series.length).toBeGreaterThanOrEqual(24);
    const filled = metrics.json.series.filter((b: { samples: number }) => b.samples > 0);
    expect(filled.length).toBeGreaterThanOrEqual(3);
    expect(metrics.json.samples).toBeGreaterThanOrEqual(36); // every 5 minutes at least
    for (const b of filled) {
      expect(b.cpu_usage_avg).toBeGreaterThan(0);
      expect(b.cpu_usage_max).toBeGreaterThanOrEqual(b.cpu_usage_avg);
      expect(b.memory_usage_avg).toBeGreaterThan(0);
    }
    expect(metrics.json.series.find((b: { samples: number }) => b.samples === 0)).toMatchObject({ cpu_usage_avg: null });
    const stored = await hub(siteId).storedSampleCount(siteId, d.device_id);
    expect(stored).toBe(metrics.json.samples);

    const week = await call(`/agents/${d.device_id}/transactions?period=7d`, { token: owner.token });
    expect(week.json).toMatchObject({ period: "7d", bucket_seconds: 21600 });
    expect(week.json.series.length).toBeGreaterThanOrEqual(28);
    expect(week.json.total).toBe(week.json.series.reduce((n: number, b: { transactions: number }) => n + b.transactions, 0));
    // transactions_today is the counter of the latest stored sample.
    const [latest] = await runInDurableObject(hub(siteId), (_i, state) => state.storage.sql.exec<{ transaction_count: number }>(
      "SELECT transaction_count FROM metrics_history WHERE device_id = ? AND transaction_count IS NOT NULL ORDER BY recorded_at DESC, seq DESC LIMIT 1", d.device_id).toArray());
    expect(week.json.transactions_today).toBe(latest.transaction_count);

    const day = await call(`/api/v1/agents/${d.device_id}/errors?period=1d`, { token: owner.token });
    expect(day.json).toMatchObject({ period: "1d", bucket_seconds: 3600 });
    expect(day.json.total_errors).toBe(day.json.series.reduce((n: number, b: { errors: number }) => n + b.errors, 0));
    expect(day.json.series.some((b: { error_rate_avg: number | null }) => b.error_rate_avg !== null)).toBe(true);

    for (const period of ["0h", "91d", "1w", "soon"]) {
      expect((await call(`/api/v1/agents/${d.device_id}/metrics?period=${period}`, { token: owner.token })).status, period).toBe(422);
    }
  });

  it("model: deterministic per device, busier at lunch than at night, incidents make it unhealthy", async () => {
    const { healthAt, seedOf, loadAt, incidentAt, incidentsBetween } = await import("../../durable-objects/agent-model");
    const agent = (id: string) => ({ device_id: id, device_type: "pos_terminal", seed: seedOf(id), boot_ms: Date.UTC(2026, 0, 1), created_ms: Date.UTC(2026, 0, 1), config_version: "1.0.0", state: "idle" as const, fault: null });
    const t = Date.UTC(2026, 2, 4, 12, 30);
    expect(healthAt(agent("POS-A"), t)).toEqual(healthAt(agent("POS-A"), t));
    expect(healthAt(agent("POS-A"), t).metrics).not.toEqual(healthAt(agent("POS-B"), t).metrics);
    const seed = seedOf("POS-A");
    expect(loadAt(seed, Date.UTC(2026, 2, 4, 12, 30))).toBeGreaterThan(3 * loadAt(seed, Date.UTC(2026, 2, 4, 3, 30)));
    // Find an incident in the device's first 60 days: unhealthy with an error while it lasts, and a reboot clears it.
    const incidents = incidentsBetween(seed, Date.UTC(2026, 0, 1), Date.UTC(2026, 2, 1));
    expect(incidents.length).toBeGreaterThan(5);
    const inc = incidents[0];
    const during = inc.start_ms + 30_000;
    expect(incidentAt(seed, Date.UTC(2026, 0, 1), during)).toMatchObject({ kind: inc.kind });
    expect(healthAt(agent("POS-A"), during)).toMatchObject({ status: "unhealthy", error: inc.error });
    expect(healthAt({ ...agent("POS-A"), boot_ms: inc.start_ms + 1000 }, during).status).toBe("healthy");
  });
});
