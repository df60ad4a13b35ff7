import { describe, expect, it } from "vitest";
import bcrypt from "bcryptjs";
import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db, eventually, grantSiteRole, signup, unique } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator, telemetry } from "./device-helpers";
import { flushHub } from "./commands-helpers";
import { installClock } from "./clock";
import type { SiteHub } from "../../durable-objects/site-hub";

/**
 * Alarms also fire on their own in the test runtime; parking the alarm an hour ahead lets
 * runDurableObjectAlarm run it exactly when the test says.
 */
async function parkAlarm(siteId: string) {
  await runInDurableObject(hub(siteId), async (_i, state) => { await state.storage.setAlarm(Date.now() + 3_600_000); });
}

const hub = (siteId: string) => env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId)) as DurableObjectStub<SiteHub>;

describe("device registry", () => {
  it("shows the api_key exactly once and stores only a bcrypt hash", async () => {
    const { owner, siteId } = await siteWithOperator();
    const created = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    expect(created.api_key).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const row = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, created.device_id)).get();
    expect(row!.apiKeyHash).toMatch(/^\$2[aby]\$10\$/);
    expect(row!.apiKeyHash).not.toBe(created.api_key);
    for (const path of [`/api/v1/devices/${created.device_id}`, `/api/v1/devices/sites/${siteId}/devices`, "/api/v1/devices/device"]) {
      const res = await call(path, { token: owner.token });
      expect(res.status).toBe(200);
      expect(res.text).not.toContain(created.api_key);
      expect(res.text).not.toContain(row!.apiKeyHash!);
      expect(res.text).not.toContain("api_key");
    }
  });

  it("generates ids, rejects duplicates with 409 and lists newest first", async () => {
    const { owner, siteId } = await siteWithOperator();
    const typed = await call(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token: owner.token, body: { name: "Tab", type: "tablet" } });
    const first = typed.json;
    expect(first.device_id).toMatch(/^DEVICE-[2-9A-HJKMNP-Z]{4}-[2-9A-HJKMNP-Z]{4}-[2-9A-HJKMNP-Z]{4}$/);
    const second = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    const dup = await call(`/sites/${siteId}/devices`, { method: "POST", token: owner.token, body: { device_id: second.device_id, name: "x" } });
    expect(dup.status).toBe(409);
    const list = await call(`/api/v1/devices/sites/${siteId}/devices`, { token: owner.token });
    expect(list.json.map((d: { device_id: string }) => d.device_id)).toEqual([second.device_id, first.device_id]);
    expect(list.json[1].device_type).toBe("tablet");
    const sim = await registerDevice(owner.token, siteId, { device_source: "simulated" });
    expect(sim.api_key).toBeUndefined();
  });

  it("answers [] for an empty site and 404 with the specified detail for an unknown one", async () => {
    const { owner, siteId } = await siteWithOperator();
    expect((await call(`/api/v1/devices/sites/${siteId}/devices`, { token: owner.token })).json).toEqual([]);
    const missing = await call(`/api/v1/devices/sites/NOPE-${unique()}/devices`, { token: owner.token });
    expect(missing.status).toBe(404);
    expect(missing.json.detail).toMatch(/^Site with ID 'NOPE-.+' not found$/);
  });

  it("requires the operator role to register and access to read; a stranger is told the device does not exist", async () => {
    const { owner, siteId } = await siteWithOperator();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await call(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token: viewer.token, body: { name: "x" } })).status).toBe(403);
    expect((await call(`/api/v1/devices/sites/${siteId}/devices`, { token: viewer.token })).status).toBe(200);
    const stranger = await signup();
    const device = await registerDevice(owner.token, siteId);
    const hidden = await call(`/api/v1/devices/${device.device_id}`, { token: stranger.token });
    expect(hidden.status).toBe(404);
    expect(hidden.json).toEqual({ detail: `Device with ID '${device.device_id}' not found` });
    const hiddenSite = await call(`/api/v1/devices/sites/${siteId}/devices`, { token: stranger.token });
    expect(hiddenSite.status).toBe(404);
    expect(hiddenSite.json).toEqual({ detail: `Site with ID '${siteId}' not found` });
    expect((await call(`/api/v1/devices/device`, { token: stranger.token })).json).toEqual([]);
    expect((await call(`/api/v1/devices/sites/${siteId}/devices`)).status).toBe(401);
  });
});

describe("device authentication", () => {
  it("answers one identical 401 for every credential failure", async () => {
    const { owner, siteId } = await siteWithOperator();
    const a = await registerDevice(owner.token, siteId);
    const b = await registerDevice(owner.token, siteId);
    const attempts = [
      await call("/api/v1/agent/heartbeat", { method: "POST", body: {} }),
      await call("/api/v1/agent/heartbeat", { method: "POST", headers: { "X-Device-ID": a.device_id }, body: {} }),
      await heartbeat(a.device_id, "wrong-key"),
      await heartbeat(`UNKNOWN-${unique()}`, a.api_key),
      await heartbeat(a.device_id, b.api_key),
    ];
    for (const res of attempts) {
      expect(res.status).toBe(401);
      expect(res.json).toEqual({ detail: "Invalid device credentials" });
    }
    expect((await heartbeat(a.device_id, a.api_key)).status).toBe(200);
  });

  it("rejects a rotated key at once and accepts the new one", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
    const rotated = await call(`/api/v1/devices/${d.device_id}/rotate-key`, { method: "POST", token: owner.token });
    expect(rotated.status).toBe(200);
    expect(rotated.json.api_key).not.toBe(d.api_key);
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(401);
    expect((await heartbeat(d.device_id, rotated.json.api_key)).status).toBe(200);
  });

  it("admits through the site hub's credential, re-read from D1 at most once a minute", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
    // A change written to D1 behind the hub's back (no invalidation) is picked up by the refresh.
    await db().update(schema.devices).set({ lifecycleState: "suspended" }).where(eq(schema.devices.deviceId, d.device_id));
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
    await runInDurableObject(hub(siteId), (instance) => {
      const records = (instance as unknown as { credentials: { records: Map<string, { fetchedAt: number }> } }).credentials.records;
      records.get(d.device_id)!.fetchedAt -= 61_000;
    });
    const after = await heartbeat(d.device_id, d.api_key);
    expect(after.status).toBe(403);
    expect(after.json.detail).toBe("Device is suspended");
  });

  it("runs no bcrypt for steady calls with a known key", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    for (let i = 0; i < 5; i++) {
      const res = await heartbeat(d.device_id, d.api_key);
      expect(res.headers.get("Server-Timing")).toMatch(/^device-auth;dur=[\d.]+;desc="cached"$/);
    }
    const wrong = await heartbeat(d.device_id, `${d.api_key.slice(0, -1)}x`);
    expect(wrong.status).toBe(401);
    expect((await heartbeat(d.device_id, d.api_key)).headers.get("Server-Timing")).toContain('desc="cached"');
  });

  it("answers 403 to a suspended device and lets it back in on resume", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
    expect((await call(`/api/v1/devices/${d.device_id}/suspend`, { method: "POST", token: owner.token })).json.lifecycle_state).toBe("suspended");
    const denied = await heartbeat(d.device_id, d.api_key);
    expect(denied.status).toBe(403);
    expect((await telemetry(d.device_id, d.api_key, { cpu_usage: 1, memory_usage: 1, disk_usage: 1 })).status).toBe(403);
    await call(`/api/v1/devices/${d.device_id}/resume`, { method: "POST", token: owner.token });
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
  });

  it("refuses a body naming another device", async () => {
    const { owner, siteId } = await siteWithOperator();
    const a = await registerDevice(owner.token, siteId);
    const b = await registerDevice(owner.token, siteId);
    const res = await telemetry(a.device_id, a.api_key, { device_id: b.device_id, cpu_usage: 10, memory_usage: 10, disk_usage: 10 });
    expect(res.status).toBe(403);
    expect(await hub(siteId).storedSampleCount(siteId, b.device_id)).toBe(0);
    expect(await hub(siteId).storedSampleCount(siteId, a.device_id)).toBe(0);
    expect((await heartbeat(a.device_id, a.api_key, { device_id: a.device_id, site_id: "ignored" })).status).toBe(200);
  });

  it("serves every path form of the device calls", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const sample = { cpu_usage: 10, memory_usage: 20, disk_usage: 30 };
    expect((await heartbeat(d.device_id, d.api_key, {}, "/agent/heartbeat")).headers.get("Deprecation")).toBe("true");
    expect((await telemetry(d.device_id, d.api_key, sample, "/agent/telemetry")).status).toBe(200);
    expect((await telemetry(d.device_id, d.api_key, sample, "/api/v1/analytics/device-metrics")).status).toBe(200);
    const dna = await call("/api/v1/agent/device-dna", {
      method: "POST", headers: deviceHeaders(d.device_id, d.api_key),
      body: { mac_address: "00:11:22:33:44:55", local_ip: "10.0.0.7", hostname: "till-1", os_details: "Linux 6.1", firmware: "2.4.1" },
    });
    expect(dna.status).toBe(200);
    const detail = await call(`/api/v1/devices/${d.device_id}`, { token: owner.token });
    expect(detail.json.dna).toMatchObject({ mac_address: "00:11:22:33:44:55", hostname: "till-1", firmware: "2.4.1" });
    expect(detail.json.enrollment_method).toBe("manual");
    expect(detail.json.epoch_id).toBe(d.epoch_id);
  });

  it("rate-limits a looping device by its id with 429 and Retry-After", async () => {
    const { owner, siteId } = await siteWithOperator();
    const looping = await registerDevice(owner.token, siteId);
    const calm = await registerDevice(owner.token, siteId);
    const statuses: number[] = [];
    let limited: Awaited<ReturnType<typeof heartbeat>> | undefined;
    for (let i = 0; i < 80 && !limited; i++) {
      const res = await heartbeat(looping.device_id, looping.api_key);
      statuses.push(res.status);
      if (res.status === 429) limited = res;
    }
    expect(limited).toBeDefined();
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(60);
    expect(Number(limited!.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(limited!.json.detail).toBe("Too many calls from this device");
    expect((await heartbeat(calm.device_id, calm.api_key)).status).toBe(200);
  });

  it("limits device bodies to 64 KB", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const res = await call("/api/v1/agent/device-dna", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), rawBody: JSON.stringify({ hostname: "x".repeat(70_000) }) });
    expect(res.status).toBe(413);
  });
});

describe("presence", () => {
  it("turns a device online on heartbeat and offline through the hub's alarm, recording it once", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const clock = await installClock(siteId);
    const hb = await heartbeat(d.device_id, d.api_key, { heartbeat_interval_s: 10, timestamp: "2001-01-01T00:00:00" });
    expect(hb.json).toMatchObject({ status: "ok", device_status: "online", next_heartbeat_s: 10 });
    const online = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(online!.status).toBe("online");

    // The hub has an alarm due no later than 3 missed intervals from now; running it early changes nothing.
    // (The first last_seen flush may be running its own alarm right now: wait for the next one to be set.)
    const alarmAt = await eventually(() => runInDurableObject(hub(siteId), (_i, state) => state.storage.getAlarm()));
    expect(alarmAt!).toBeLessThanOrEqual(Date.now() + 30_000);
    await parkAlarm(siteId);
    expect(await runDurableObjectAlarm(hub(siteId))).toBe(true);
    expect((await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get())!.status).toBe("online");

    // 31 s without a heartbeat, then the alarm runs (twice: the second finds nothing new).
    clock.advance(31_000);
    await parkAlarm(siteId);
    expect(await runDurableObjectAlarm(hub(siteId))).toBe(true);
    await parkAlarm(siteId);
    await runDurableObjectAlarm(hub(siteId));

    const row = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(row!.status).toBe("offline");
    const history = await db().select().from(schema.deviceStateHistory).where(eq(schema.deviceStateHistory.deviceId, d.device_id)).all();
    expect(history.map((h) => [h.previousState, h.newState, h.changedBy])).toEqual([[null, "online", "system"], ["online", "offline", "system"]]);
    expect(history[1].reason).toContain("no heartbeat for 30 s");
    const offlineEvents = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "device_offline"))).all();
    expect(offlineEvents).toHaveLength(1);
    expect(offlineEvents[0].severity).toBe("warning");

    // And back online with the next heartbeat.
    expect((await heartbeat(d.device_id, d.api_key)).json.device_status).toBe("online");
    expect((await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get())!.status).toBe("online");
  });

  it("writes nothing to D1 for steady heartbeats and flushes last_seen in a batch", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    await heartbeat(d.device_id, d.api_key);
    // What the first heartbeat owes D1 (its transition, and the first last_seen flush, which is due at
    // once) is written now, so the hub's own alarm cannot land it in the middle of the steady beats.
    await flushHub(siteId);
    await parkAlarm(siteId);
    await runDurableObjectAlarm(hub(siteId));
    const afterFirst = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(afterFirst!.lastSeen).not.toBeNull();
    for (let i = 0; i < 5; i++) await heartbeat(d.device_id, d.api_key);
    const afterSteady = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(afterSteady!.updatedAt).toBe(afterFirst!.updatedAt);
    expect(afterSteady!.lastSeen).toBe(afterFirst!.lastSeen);
    const history = await db().select().from(schema.deviceStateHistory).where(eq(schema.deviceStateHistory.deviceId, d.device_id)).all();
    expect(history).toHaveLength(1);

    await runInDurableObject(hub(siteId), (_i, state) => {
      state.storage.sql.exec("UPDATE meta SET value = '0' WHERE key = 'flushed_at'");
    });
    await parkAlarm(siteId);
    expect(await runDurableObjectAlarm(hub(siteId))).toBe(true);
    const flushed = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(flushed!.lastSeen! > afterFirst!.lastSeen!).toBe(true);
  });

  it("keeps site health consistent with the device list", async () => {
    const { owner, siteId } = await siteWithOperator();
    const a = await registerDevice(owner.token, siteId, { name: "A", ip_address: "10.0.0.1" });
    const b = await registerDevice(owner.token, siteId, { name: "B" });
    await registerDevice(owner.token, siteId, { name: "C" });
    await heartbeat(a.device_id, a.api_key);
    await heartbeat(b.device_id, b.api_key, { status: "error" });
    const health = await call(`/api/v1/sites/${siteId}/health`, { token: owner.token });
    const list = await call(`/api/v1/devices/sites/${siteId}/devices`, { token: owner.token });
    expect(health.json).toMatchObject({ site_id: siteId, total_devices: 3, healthy_devices: 1, offline_devices: 1, error_devices: 1 });
    expect(health.json.health_percentage).toBeCloseTo(33.3, 1);
    const statusOf = (items: { device_id: string; status: string }[]) => Object.fromEntries(items.map((d) => [d.device_id, d.status]));
    expect(statusOf(health.json.devices)).toEqual(statusOf(list.json));
    const devA = health.json.devices.find((d: { device_id: string }) => d.device_id === a.device_id);
    expect(devA).toMatchObject({ name: "A", type: "pos_terminal", ip_address: "10.0.0.1", status: "online" });
    expect(devA.last_seen).toMatch(/Z$/);
  });
});

describe("telemetry", () => {
  const sample = { cpu_usage: 40, memory_usage: 50, disk_usage: 60, network_latency_ms: 20, uptime_seconds: 100 };

  it("stores by delta rules and says why", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    expect((await telemetry(d.device_id, d.api_key, sample)).json).toMatchObject({ stored: true, reason: "first_sample" });
    expect((await telemetry(d.device_id, d.api_key, { ...sample, uptime_seconds: 110 })).json).toMatchObject({ stored: false, reason: "unchanged" });
    expect((await telemetry(d.device_id, d.api_key, { ...sample, cpu_usage: 43, uptime_seconds: 120 })).json).toMatchObject({ stored: true, reason: "changed" });
    // uptime went down: the device restarted
    expect((await telemetry(d.device_id, d.api_key, { ...sample, cpu_usage: 43, uptime_seconds: 5 })).json).toMatchObject({ stored: true, reason: "first_sample" });
    const batch = await telemetry(d.device_id, d.api_key, [{ ...sample, cpu_usage: 43, uptime_seconds: 15 }, { ...sample, cpu_usage: 80, uptime_seconds: 25 }]);
    expect(batch.json.results).toEqual([{ stored: false, reason: "unchanged" }, { stored: true, reason: "changed" }]);
    expect(batch.json.stored_count).toBe(1);
    expect(await hub(siteId).storedSampleCount(siteId, d.device_id)).toBe(4);
  });

  it("treats a boot_id change seen by a heartbeat as a restart", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    await heartbeat(d.device_id, d.api_key, { boot_id: "boot-1", uptime_seconds: 50 });
    await telemetry(d.device_id, d.api_key, { ...sample, uptime_seconds: 60 });
    expect((await telemetry(d.device_id, d.api_key, { ...sample, uptime_seconds: 70 })).json.reason).toBe("unchanged");
    await heartbeat(d.device_id, d.api_key, { boot_id: "boot-2", uptime_seconds: 80 });
    expect((await telemetry(d.device_id, d.api_key, { ...sample, uptime_seconds: 90 })).json.reason).toBe("first_sample");
  });

  it("stores at most 2 of 100 steady samples and a 6 % jump at once", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    // 100 samples in batches of 10, as a terminal uploads what it buffered.
    for (let batch = 0; batch < 10; batch++) {
      const samples = Array.from({ length: 10 }, (_, j) => {
        const i = batch * 10 + j;
        return { ...sample, cpu_usage: 40 + (i % 5) * 0.1, uptime_seconds: 100 + i * 15 }; // jitter < 1 % of 40
      });
      expect((await telemetry(d.device_id, d.api_key, samples)).status).toBe(200);
    }
    expect(await hub(siteId).storedSampleCount(siteId, d.device_id)).toBeLessThanOrEqual(2);
    const jump = await telemetry(d.device_id, d.api_key, { ...sample, cpu_usage: 40 * 1.06, uptime_seconds: 2000 });
    expect(jump.json).toMatchObject({ stored: true, reason: "changed" });
  });

  it("rejects out-of-range values with 422 and stores nothing", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    for (const bad of [{ ...sample, cpu_usage: 101 }, { ...sample, disk_usage: -1 }, { memory_usage: 5, disk_usage: 5 }, { ...sample, cpu_usage: "high" }, []]) {
      const res = await telemetry(d.device_id, d.api_key, bad);
      expect(res.status).toBe(422);
      expect(Array.isArray(res.json.detail)).toBe(true);
    }
    expect(await hub(siteId).storedSampleCount(siteId, d.device_id)).toBe(0);
  });
});

describe("bootstrap self-enrolment", () => {
  it("enrols with the current key and refuses wrong, revoked and duplicate-name attempts", async () => {
    const { owner, siteId } = await siteWithOperator();
    const created = await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: owner.token });
    expect(created.status).toBe(201);
    const key = created.json.bootstrap_key;
    const body = { site_id: siteId, bootstrap_key: key, device_name: "Till 7", device_type: "pos_terminal", os_details: "Android 14" };

    const enrolled = await call("/devices/bootstrap-provision", { method: "POST", body });
    expect(enrolled.status).toBe(201);
    expect(enrolled.json).toMatchObject({ site_id: siteId });
    expect(enrolled.json.epoch_id).toMatch(/^[0-9a-f-]{36}$/);
    expect((await heartbeat(enrolled.json.device_id, enrolled.json.api_key)).status).toBe(200);
    const detail = await call(`/api/v1/devices/${enrolled.json.device_id}`, { token: owner.token });
    expect(detail.json.enrollment_method).toBe("self-enrolled");
    const epoch = await db().select().from(schema.lifecycleEpochs).where(eq(schema.lifecycleEpochs.epochId, enrolled.json.epoch_id)).get();
    expect(epoch!.deviceId).toBe(enrolled.json.device_id);

    expect((await call("/api/v1/devices/bootstrap-provision", { method: "POST", body })).status).toBe(409);
    const wrong = await call("/api/v1/devices/bootstrap-provision", { method: "POST", body: { ...body, device_name: "Till 8", bootstrap_key: "bk_wrong" } });
    expect(wrong.status).toBe(401);

    // A new key replaces the old one; revoking stops enrolment.
    const replaced = await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: owner.token });
    expect((await call("/api/v1/devices/bootstrap-provision", { method: "POST", body: { ...body, device_name: "Till 9" } })).status).toBe(401);
    expect((await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "DELETE", token: owner.token })).status).toBe(200);
    const revoked = await call("/api/v1/devices/bootstrap-provision", { method: "POST", body: { ...body, device_name: "Till 10", bootstrap_key: replaced.json.bootstrap_key } });
    expect(revoked.status).toBe(401);
    expect(revoked.json).toEqual(wrong.json);

    const stats = await call(`/api/v1/sites/${siteId}/stats`, { token: owner.token });
    expect(stats.json).toMatchObject({ site_id: siteId, total_devices: 1, by_enrollment_method: { "self-enrolled": 1, "pre-provisioned": 0 } });
  });

  it("provisions through the setup wizard for operators only (a stranger's site does not exist for them)", async () => {
    const { owner, siteId } = await siteWithOperator();
    const res = await call("/api/v1/devices/provision", { method: "POST", token: owner.token, body: { site_id: siteId, device_name: "Kiosk", device_type: "tablet" } });
    expect(res.status).toBe(201);
    expect((await heartbeat(res.json.device_id, res.json.api_key)).status).toBe(200);
    const stranger = await signup();
    const notFound = { detail: `Site with ID '${siteId}' not found` };
    const provision = await call("/api/v1/devices/provision", { method: "POST", token: stranger.token, body: { site_id: siteId, device_name: "K2" } });
    expect([provision.status, provision.json]).toEqual([404, notFound]);
    const bootstrapKey = await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: stranger.token });
    expect([bootstrapKey.status, bootstrapKey.json]).toEqual([404, notFound]);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await call("/api/v1/devices/provision", { method: "POST", token: viewer.token, body: { site_id: siteId, device_name: "K3" } })).status).toBe(403);
    expect((await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: viewer.token })).status).toBe(403);
  });
});

describe("device authentication: a key this isolate never issued", () => {
  it("costs one bcrypt on the first call, then the hub's remembered digest admits it", async () => {
    const { siteId } = await siteWithOperator();
    // Written straight to D1, as another isolate (or an import) would have: nothing in this isolate knows the key.
    const deviceId = unique("D1-");
    const apiKey = `key-${crypto.randomUUID()}`;
    await db().insert(schema.devices).values({ deviceId, siteId, name: "Imported till", apiKeyHash: await bcrypt.hash(apiKey, 10) });

    const wrong = await heartbeat(deviceId, `${apiKey}-not`);
    expect(wrong.status).toBe(401);
    const first = await heartbeat(deviceId, apiKey);
    expect(first.status).toBe(200);
    expect(first.headers.get("Server-Timing")).toMatch(/^device-auth;dur=[\d.]+;desc="bcrypt"$/);
    const second = await heartbeat(deviceId, apiKey);
    expect(second.status).toBe(200);
    expect(second.headers.get("Server-Timing")).toMatch(/^device-auth;dur=[\d.]+;desc="cached"$/);
    // A wrong key does not displace the remembered one.
    expect((await heartbeat(deviceId, `${apiKey}-not`)).status).toBe(401);
    expect((await heartbeat(deviceId, apiKey)).headers.get("Server-Timing")).toContain('desc="cached"');
  });
});

describe("viewers cannot change devices or enrolment", () => {
  it("answers 403 to a viewer on every operator action, and nothing changes", async () => {
    const { owner, siteId } = await siteWithOperator();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const d = await registerDevice(owner.token, siteId);
    expect((await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: owner.token })).status).toBe(201);
    const before = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();

    const attempts: [string, string][] = [
      ["POST", `/api/v1/devices/${d.device_id}/rotate-key`],
      ["POST", `/api/v1/devices/${d.device_id}/suspend`],
      ["POST", `/api/v1/devices/${d.device_id}/resume`],
      ["POST", `/api/v1/devices/${d.device_id}/health`],
      ["POST", `/api/v1/sites/${siteId}/bootstrap-key`],
      ["DELETE", `/api/v1/sites/${siteId}/bootstrap-key`],
    ];
    for (const [method, path] of attempts) {
      const res = await call(path, { method, token: viewer.token });
      expect(res.status, `${method} ${path}`).toBe(403);
    }
    // Reading stays allowed.
    expect((await call(`/api/v1/devices/${d.device_id}`, { token: viewer.token })).status).toBe(200);

    const after = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(after).toEqual(before);
    expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
    const keys = await db().select().from(schema.siteBootstrapKeys).where(eq(schema.siteBootstrapKeys.siteId, siteId)).all();
    expect(keys.map((k) => k.revokedAt)).toEqual([null]);
    // Each refusal is audited, and it is all the viewer left behind.
    const audited = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.siteId, siteId), eq(schema.auditLogs.userId, viewer.id))).all();
    expect(audited.map((a) => a.eventType)).toEqual(attempts.map(() => "permission_denied"));
  });
});

describe("PATCH /api/v1/devices/{device_id}", () => {
  const patch = (deviceId: string, token: string | undefined, body: unknown) =>
    call(`/api/v1/devices/${deviceId}`, { method: "PATCH", token, body });

  it("changes exactly the fields given, and audits them as device_updated", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId, { name: "Till", ip_address: "10.0.0.5", os_type: "android", os_version: "13" });
    const before = (await call(`/api/v1/devices/${d.device_id}`, { token: owner.token })).json;

    const res = await patch(d.device_id, owner.token, { name: "  Front till  ", device_type: "tablet", heartbeat_interval_s: 30, ip_address: null });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({
      ...before,
      name: "Front till",
      device_type: "tablet",
      heartbeat_interval_s: 30,
      ip_address: null,
      updated_at: expect.stringMatching(/Z$/),
    });
    expect((await call(`/api/v1/devices/${d.device_id}`, { token: owner.token })).json).toEqual(res.json);

    const second = await patch(d.device_id, owner.token, { os_version: "14" });
    expect(second.json).toEqual({ ...res.json, os_version: "14", updated_at: expect.stringMatching(/Z$/) });

    const audit = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.deviceId, d.device_id), eq(schema.auditLogs.eventType, "device_updated"))).all();
    expect(audit.map((a) => a.eventMetadata)).toEqual([
      { changed: { name: "Front till", device_type: "tablet", heartbeat_interval_s: 30, ip_address: null } },
      { changed: { os_version: "14" } },
    ]);
    expect(audit[0]).toMatchObject({ userId: owner.id, siteId });
  });

  it("refuses invalid input with 422 and changes nothing", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const before = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    const bad: [unknown, string][] = [
      [{}, ""],
      [{ name: "   " }, "name"],
      [{ name: "x".repeat(201) }, "name"],
      [{ heartbeat_interval_s: 4 }, "heartbeat_interval_s"],
      [{ heartbeat_interval_s: 3601 }, "heartbeat_interval_s"],
      [{ heartbeat_interval_s: 12.5 }, "heartbeat_interval_s"],
      [{ heartbeat_interval_s: "30" }, "heartbeat_interval_s"],
      [{ device_type: "" }, "device_type"],
      [{ ip_address: "1".repeat(65) }, "ip_address"],
    ];
    for (const [body, field] of bad) {
      const res = await patch(d.device_id, owner.token, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      const locs = (res.json.detail as { loc: (string | number)[] }[]).map((i) => i.loc.join("."));
      expect(locs, JSON.stringify(body)).toContain(field ? `body.${field}` : "body");
    }
    expect(await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get()).toEqual(before);
  });

  it("is for operators of the device's site: 403 for a viewer, 404 for a stranger as for an unknown device, 401 without a token", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId, { name: "Till" });
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const stranger = await signup();
    expect((await patch(d.device_id, viewer.token, { name: "Renamed" })).status).toBe(403);
    const hidden = await patch(d.device_id, stranger.token, { name: "Renamed" });
    expect(hidden.status).toBe(404);
    expect(hidden.json).toEqual({ detail: `Device with ID '${d.device_id}' not found` });
    expect((await patch(d.device_id, undefined, { name: "Renamed" })).status).toBe(401);
    const missing = await patch(`NOPE-${unique()}`, owner.token, { name: "Renamed" });
    expect(missing.status).toBe(404);
    expect(missing.json.detail).toMatch(/^Device with ID 'NOPE-.+' not found$/);
    expect((await call(`/api/v1/devices/${d.device_id}`, { token: owner.token })).json.name).toBe("Till");
  });
});
