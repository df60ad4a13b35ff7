import { describe, expect, it } from "vitest";
import { abortAllDurableObjects } from "cloudflare:test";
import { and, desc, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db, signup } from "./helpers";
import { siteWithOperator } from "./device-helpers";
import { agentRow, hub, liveEvents, push, setAgent, simulatedDevice, stepAgent } from "./agents-helpers";

const HEALTH_FIELDS = ["status", "config_version", "last_restart", "response_time_ms", "device_info", "services", "metrics"];

describe("simulated agents", () => {
  it("start idle and online when the device is registered, with a complete health record", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await simulatedDevice(owner.token, siteId, { device_type: "pos_terminal" });
    expect(d.api_key).toBeUndefined();

    const device = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(device!.status).toMatch(/^(online|error)$/);
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
