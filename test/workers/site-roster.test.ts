import { describe, expect, it } from "vitest";
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { desc, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, createSite, db } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { hub, runAlarm } from "./agents-helpers";
import { installClock, type ManualClock } from "./clock";
import { ROSTER_RESYNC_MS } from "../../durable-objects/roster";
import { serialiseHealth } from "../../durable-objects/site-view";
import { offlineAfterMs } from "../../durable-objects/presence";
import type { PresenceRow } from "../../durable-objects/presence";

/** What the site's device list must say: D1's rows for the site, newest first, with live presence laid over. */
async function expectedDevices(siteId: string) {
  const rows = await db().select().from(schema.devices).where(eq(schema.devices.siteId, siteId))
    .orderBy(desc(schema.devices.createdAt), desc(schema.devices.id)).all();
  // Presence as the hub holds it (steady sightings reach its storage only at the minute flush).
  const presence = await runInDurableObject(hub(siteId), (instance) => (instance as unknown as { presence: { all(): PresenceRow[] } }).presence.all());
  const live = new Map(presence.map((p) => [p.device_id, p]));
  return rows.map((d) => {
    const p = live.get(d.deviceId);
    return {
      site_id: d.siteId, device_id: d.deviceId, name: d.name, device_type: d.deviceType,
      status: p ? p.status : d.status,
      ip_address: d.ipAddress, device_source: d.deviceSource, enrollment_method: d.enrollmentMethod, lifecycle_state: d.lifecycleState,
      last_seen: p ? new Date(p.last_seen_ms).toISOString() : d.lastSeen,
      created_at: d.createdAt, updated_at: d.updatedAt,
    };
  });
}

/**
 * The device list and the site health (both paths) agree with D1 + presence. D1 and presence are
 * read after the list: reading a site brings its simulated agents up to now, which may move them.
 */
async function expectRosterMatches(siteId: string, token: string) {
  const list = await call(`/api/v1/devices/sites/${siteId}/devices`, { token });
  expect(list.status).toBe(200);
  expect(list.headers.get("Content-Type")).toBe("application/json");
  const expected = await expectedDevices(siteId);
  expect(list.json).toEqual(expected);
  // The body checked once per change is sent again while the site is unchanged: byte for byte the same.
  const again = await call(`/api/v1/devices/sites/${siteId}/devices`, { token });
  expect(again.text).toBe(list.text);
  for (const path of [`/api/v1/sites/${siteId}/health`, `/sites/${siteId}/health`]) {
    const health = await call(path, { token });
    expect(health.status).toBe(200);
    expect(health.json.devices).toEqual(expected.map((d) => ({
      device_id: d.device_id, name: d.name, type: d.device_type, status: d.status, ip_address: d.ip_address, last_seen: d.last_seen,
    })));
    expect(health.json.total_devices).toBe(expected.length);
    expect(health.json.healthy_devices).toBe(expected.filter((d) => d.status === "online" || d.status === "healthy").length);
    expect(health.json.offline_devices).toBe(expected.filter((d) => d.status === "offline").length);
  }
  return expected;
}

describe("the site roster behind site health and the site device list", () => {
  it("matches D1 and presence after every kind of change, including one made while the hub was restarted", async () => {
    const { owner, siteId } = await siteWithOperator();
    const token = owner.token;
    let clock: ManualClock = await installClock(siteId);
    await expectRosterMatches(siteId, token);

    // Registration by an operator, a simulated device, provisioning, bootstrap enrolment and an intent claim.
    const till = await registerDevice(token, siteId, { name: "Till 1", ip_address: "10.0.0.1" });
    await registerDevice(token, siteId, { name: "Sim", device_source: "simulated" });
    expect((await call("/api/v1/devices/provision", { method: "POST", token, body: { site_id: siteId, device_name: "Kiosk" } })).status).toBe(201);
    const bootstrapKey = (await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token })).json.bootstrap_key;
    const enrolled = await call("/api/v1/devices/bootstrap-provision", { method: "POST", body: { site_id: siteId, bootstrap_key: bootstrapKey, device_name: "Till 2" } });
    expect(enrolled.status).toBe(201);
    const intent = await call(`/api/v1/sites/${siteId}/enrolment-intents`, { method: "POST", token, body: {} });
    expect((await call(`/api/v1/sites/${siteId}/enrolment-intents/${intent.json.intent_id}`, { method: "PUT", token, body: { status: "approved" } })).status).toBe(200);
    const claimed = await call(`/api/v1/enrolment-intents/${intent.json.intent_id}/claim`, { method: "POST", body: { claim_token: intent.json.claim_token, device_name: "Till 3" } });
    expect(claimed.status).toBe(201);
    expect(await expectRosterMatches(siteId, token)).toHaveLength(5);

    // Presence: online, then offline after missed heartbeats (the alarm), then back.
    expect((await heartbeat(till.device_id, till.api_key)).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)?.status).toBe("online");
    clock.advance(offlineAfterMs(10) + 1000);
    await runAlarm(siteId);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)?.status).toBe("offline");
    expect((await heartbeat(till.device_id, till.api_key)).status).toBe(200);

    // Metadata and DNA.
    expect((await call(`/api/v1/devices/${till.device_id}`, { method: "PATCH", token, body: { name: "Till One", ip_address: "10.0.0.9" } })).status).toBe(200);
    expect((await call("/api/v1/agent/device-dna", { method: "POST", headers: deviceHeaders(till.device_id, till.api_key), body: { hostname: "till-one" } })).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)).toMatchObject({ name: "Till One", ip_address: "10.0.0.9" });

    // Lifecycle and key rotation.
    expect((await call(`/api/v1/devices/${enrolled.json.device_id}/suspend`, { method: "POST", token })).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === enrolled.json.device_id)?.lifecycle_state).toBe("suspended");
    expect((await call(`/api/v1/devices/${enrolled.json.device_id}/resume`, { method: "POST", token })).status).toBe(200);
    expect((await call(`/api/v1/devices/${till.device_id}/rotate-key`, { method: "POST", token })).status).toBe(200);
    await expectRosterMatches(siteId, token);

    // The hub is evicted; a change made now reaches the restarted hub.
    await abortAllDurableObjects();
    clock = await installClock(siteId);
    expect((await call(`/api/v1/devices/${claimed.json.device_id}`, { method: "PATCH", token, body: { name: "Till Three" } })).status).toBe(200);
    await registerDevice(token, siteId, { name: "Till 4" });
    expect(await expectRosterMatches(siteId, token)).toHaveLength(6);
  });

  it("reuses the list and health it worked out while nothing changed, and works them out afresh after every change", async () => {
    const { owner, siteId } = await siteWithOperator();
    const token = owner.token;
    const clock = await installClock(siteId);
    const till = await registerDevice(token, siteId, { name: "Till 1" });
    await registerDevice(token, siteId, { name: "Till 2" });
    await expectRosterMatches(siteId, token);
    const [first, second] = await runInDurableObject(hub(siteId), async (instance) =>
      [await instance.siteHealth(siteId), await instance.siteHealth(siteId)]);
    expect(second.devices).toBe(first.devices);

    expect((await heartbeat(till.device_id, till.api_key)).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)?.status).toBe("online");
    clock.advance(offlineAfterMs(10) + 1000);
    await runAlarm(siteId);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)?.status).toBe("offline");
    expect((await call(`/api/v1/devices/${till.device_id}`, { method: "PATCH", token, body: { name: "Till One" } })).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)?.name).toBe("Till One");
    expect((await call(`/api/v1/devices/${till.device_id}/suspend`, { method: "POST", token })).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === till.device_id)?.lifecycle_state).toBe("suspended");
    await registerDevice(token, siteId, { name: "Till 3" });
    expect(await expectRosterMatches(siteId, token)).toHaveLength(3);
    const health = await call(`/api/v1/sites/${siteId}/health`, { token });
    expect(health.json.last_updated).toBe(new Date(clock.now()).toISOString());
  });

  it("serialises health around last_updated even when a device's name holds the text that marks it", () => {
    const mark = "\u0000last_updated\u0000";
    const health = {
      site_id: "S", total_devices: 1, healthy_devices: 0, offline_devices: 1, error_devices: 0, health_percentage: 0,
      status_summary: "0 of 1 devices healthy, 1 offline",
      devices: [{ device_id: "D", name: mark, type: "pos_terminal", status: "offline", ip_address: null, last_seen: null }],
      last_updated: "2026-01-01T00:00:00.000Z", twin_in_sync_devices: 0, twin_drifted_devices: 0,
    };
    const { head, tail } = serialiseHealth(health);
    const at = "2026-02-02T00:00:00.000Z";
    expect(JSON.parse(`${head}${JSON.stringify(at)}${tail}`)).toEqual({ ...health, last_updated: at });
  });

  it("answers from the hub without reading D1, and the alarm's re-sync repairs a change the hub was never told about", async () => {
    const { owner, siteId } = await siteWithOperator();
    const clock = await installClock(siteId);
    const till = await registerDevice(owner.token, siteId, { name: "Till 1" });
    await expectRosterMatches(siteId, owner.token);

    // Written behind the service's back: no notification reaches the hub.
    await db().update(schema.devices).set({ name: "Renamed in D1", updatedAt: new Date().toISOString() }).where(eq(schema.devices.deviceId, till.device_id));
    const stale = await call(`/api/v1/devices/sites/${siteId}/devices`, { token: owner.token });
    expect(stale.json[0].name).toBe("Till 1");
    expect((await call(`/api/v1/sites/${siteId}/health`, { token: owner.token })).json.devices[0].name).toBe("Till 1");

    clock.advance(ROSTER_RESYNC_MS);
    await runAlarm(siteId);
    const [repaired] = await expectRosterMatches(siteId, owner.token);
    expect(repaired.name).toBe("Renamed in D1");
  });

  it("keeps the re-sync on the hub's alarm only while the site is being read", async () => {
    const { owner, siteId } = await siteWithOperator();
    const clock = await installClock(siteId);
    await registerDevice(owner.token, siteId);
    await expectRosterMatches(siteId, owner.token);
    const due = await runInDurableObject(hub(siteId), (_hub, state) => state.storage.getAlarm());
    expect(due).not.toBeNull();
    expect(due!).toBeLessThanOrEqual(clock.now() + ROSTER_RESYNC_MS);
  });
  it("follows the device lifecycle: retire, re-enrol, transfer out and in, archive and purge", async () => {
    const { owner, siteId } = await siteWithOperator();
    const token = owner.token;
    const target = await createSite(token);
    const [a, b, c] = [await registerDevice(token, siteId), await registerDevice(token, siteId), await registerDevice(token, siteId)];
    for (const d of [a, b, c]) expect((await heartbeat(d.device_id, d.api_key)).status).toBe(200);
    await expectRosterMatches(siteId, token);
    await expectRosterMatches(target, token);

    const act = (path: string, method = "POST", body: Record<string, unknown> = {}) => call(path, { method, token, body: method === "DELETE" ? undefined : body });
    expect((await act(`/api/v1/devices/${a.device_id}/retire`)).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === a.device_id)?.lifecycle_state).toBe("retired");
    expect((await act(`/api/v1/devices/${a.device_id}/reenrol`)).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === a.device_id)?.lifecycle_state).toBe("active");

    expect((await act(`/api/v1/devices/${b.device_id}/transfer`, "POST", { target_site_id: target, reason: "Moved" })).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).map((d) => d.device_id)).not.toContain(b.device_id);
    expect((await expectRosterMatches(target, token)).map((d) => d.device_id)).toContain(b.device_id);

    expect((await act(`/api/v1/devices/${c.device_id}?mode=archive&confirm=true`, "DELETE")).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).find((d) => d.device_id === c.device_id)?.lifecycle_state).toBe("archived");
    expect((await act(`/api/v1/devices/${a.device_id}?mode=purge&confirm=true`, "DELETE")).status).toBe(200);
    expect((await expectRosterMatches(siteId, token)).map((d) => d.device_id)).not.toContain(a.device_id);
  });
});
