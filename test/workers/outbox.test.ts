import { describe, expect, it } from "vitest";
import { runDurableObjectAlarm } from "cloudflare:test";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator, telemetry } from "./device-helpers";
import { installClock, outboxDepth, siteHubStub, wrapHubDatabase } from "./clock";

const deviceRow = (deviceId: string) => db().select().from(schema.devices).where(eq(schema.devices.deviceId, deviceId)).get();
const auditsOf = (deviceId: string, eventType: string) =>
  db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, deviceId), eq(schema.auditLogs.eventType, eventType))).all();

describe("the hub's outbox: every write to D1, and none lost while D1 is down", () => {
  it("keeps transitions, audits, health checks and the agent projection while D1 fails, and lands them once it recovers", async () => {
    const { owner, siteId } = await siteWithOperator();
    const real = await registerDevice(owner.token, siteId);
    const sim = await registerDevice(owner.token, siteId, { device_source: "simulated" });
    const clock = await installClock(siteId);
    expect((await heartbeat(real.device_id, real.api_key)).status).toBe(200);
    expect((await deviceRow(real.device_id))!.status).toBe("online");

    const outage = await wrapHubDatabase(siteId);
    outage.down = true;
    // While D1 is down: the real device goes offline (3 missed beats), the simulated one is restarted.
    clock.advance(31_000);
    expect(await runDurableObjectAlarm(siteHubStub(siteId))).toBe(true);
    const restart = await call(`/api/v1/devices/${sim.device_id}/restart`, { method: "POST", token: owner.token, body: { reason: "outage drill" } });
    expect(restart.status).toBe(200);
    expect(outage.failedBatches).toBeGreaterThan(0);
    expect(await outboxDepth(siteId)).toBeGreaterThan(0);
    // D1 has not heard of any of it yet.
    expect((await deviceRow(real.device_id))!.status).toBe("online");
    expect(await auditsOf(real.device_id, "device_offline")).toHaveLength(0);
    const restartChecks = async () => (await db().select().from(schema.healthChecks).where(eq(schema.healthChecks.deviceId, sim.device_id)).all())
      .filter((h) => (h.details as { reason?: string }).reason === "restart");
    expect(await restartChecks()).toHaveLength(0);

    // D1 is back: the next alarm delivers everything, once.
    outage.down = false;
    clock.advance(120_000);
    expect(await runDurableObjectAlarm(siteHubStub(siteId))).toBe(true);
    expect(await outboxDepth(siteId)).toBe(0);
    expect((await deviceRow(real.device_id))!.status).toBe("offline");
    expect(await auditsOf(real.device_id, "device_offline")).toHaveLength(1);
    const history = await db().select().from(schema.deviceStateHistory)
      .where(and(eq(schema.deviceStateHistory.deviceId, real.device_id), eq(schema.deviceStateHistory.newState, "offline"))).all();
    expect(history).toHaveLength(1);
    expect(await restartChecks()).toHaveLength(1);
    const projection = await db().select().from(schema.agents).where(eq(schema.agents.deviceId, sim.device_id)).all();
    expect(projection).toHaveLength(1);
    expect(projection[0].state).toBe("ready");
    // A second alarm has nothing left to send: upserts and inserts are not repeated.
    clock.advance(120_000);
    await runDurableObjectAlarm(siteHubStub(siteId));
    expect(await auditsOf(real.device_id, "device_offline")).toHaveLength(1);
    expect(await restartChecks()).toHaveLength(1);
  });
  it("keeps coalesced last_seen and the latest sample while D1 fails, and lands them after it recovers", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const clock = await installClock(siteId);
    // A long interval, so the minutes this test skips do not also take the device offline.
    expect((await heartbeat(device.device_id, device.api_key, { heartbeat_interval_s: 300 })).status).toBe(200);
    const firstSeen = (await deviceRow(device.device_id))!.lastSeen;
    expect(firstSeen).not.toBeNull();
    const latestSample = () => db().select().from(schema.deviceMetrics).where(eq(schema.deviceMetrics.deviceId, device.device_id)).get();

    const outage = await wrapHubDatabase(siteId);
    outage.down = true;
    clock.advance(30_000);
    const seenAt = new Date(clock.now()).toISOString();
    expect((await heartbeat(device.device_id, device.api_key, { heartbeat_interval_s: 300 })).status).toBe(200);
    expect((await telemetry(device.device_id, device.api_key, { cpu_usage: 42, memory_usage: 50, disk_usage: 60 })).status).toBe(200);
    clock.advance(61_000);
    await runDurableObjectAlarm(siteHubStub(siteId));
    expect(outage.failedBatches).toBeGreaterThan(0);
    expect(await outboxDepth(siteId)).toBeGreaterThan(0);
    expect((await deviceRow(device.device_id))!.lastSeen).toBe(firstSeen);
    expect(await latestSample()).toBeUndefined();

    outage.down = false;
    clock.advance(120_000);
    await runDurableObjectAlarm(siteHubStub(siteId));
    expect(await outboxDepth(siteId)).toBe(0);
    expect((await deviceRow(device.device_id))!.lastSeen).toBe(seenAt);
    expect((await latestSample())!.cpuUsage).toBe(42);
  });
});

describe("presence: the heartbeat interval", () => {
  it("uses the interval an operator sets with PATCH, unless the device reports its own", async () => {
    const { owner, siteId } = await siteWithOperator();
    const quiet = await registerDevice(owner.token, siteId);
    const chatty = await registerDevice(owner.token, siteId);
    const clock = await installClock(siteId);
    expect((await heartbeat(quiet.device_id, quiet.api_key)).json.next_heartbeat_s).toBe(10);
    expect((await heartbeat(chatty.device_id, chatty.api_key, { heartbeat_interval_s: 20 })).json.next_heartbeat_s).toBe(20);
    for (const id of [quiet.device_id, chatty.device_id]) {
      const patched = await call(`/api/v1/devices/${id}`, { method: "PATCH", token: owner.token, body: { heartbeat_interval_s: 120 } });
      expect(patched.status).toBe(200);
      expect(patched.json.heartbeat_interval_s).toBe(120);
    }
    // 61 s without a beat: past 3 × 20 s for the device that reports 20 s, well within 3 × 120 s for the other.
    clock.advance(61_000);
    await runDurableObjectAlarm(siteHubStub(siteId));
    expect((await deviceRow(chatty.device_id))!.status).toBe("offline");
    expect((await deviceRow(quiet.device_id))!.status).toBe("online");
    clock.advance(300_000);
    await runDurableObjectAlarm(siteHubStub(siteId));
    expect((await deviceRow(quiet.device_id))!.status).toBe("offline");
    // The next heartbeat is told the configured interval.
    expect((await heartbeat(quiet.device_id, quiet.api_key)).json.next_heartbeat_s).toBe(120);
  });
});
