import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, db, fetchChecked, grantSiteRole, signup, unique } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { auditOfType, hub, hubSql, liveEvents } from "./commands-helpers";
import { ManualClock, installClock } from "./clock";
import { openSocket } from "./live-helpers";

type Device = { device_id: string; api_key: string };

const twinOf = (token: string, deviceId: string) => call(`/api/v1/devices/${deviceId}/twin`, { token });
const patchDesired = (token: string, deviceId: string, body: unknown, ifMatch?: string) =>
  call(`/api/v1/devices/${deviceId}/twin/desired`, { method: "PATCH", token, body, headers: ifMatch === undefined ? {} : { "If-Match": ifMatch } });
const deviceTwin = (d: Device, headers: Record<string, string> = {}) => call("/api/v1/agent/twin", { headers: { ...deviceHeaders(d.device_id, d.api_key), ...headers } });
const report = (d: Device, body: unknown) => call("/api/v1/agent/twin/reported", { method: "PATCH", headers: deviceHeaders(d.device_id, d.api_key), body });
const inSyncRow = (deviceId: string) => db().select().from(schema.deviceTwins).where(eq(schema.deviceTwins.deviceId, deviceId)).get();

async function setup() {
  const { owner, siteId } = await siteWithOperator();
  const device = await registerDevice(owner.token, siteId);
  return { owner, siteId, device };
}

describe("device twins: desired state and concurrency", () => {
  it("patches the desired document by merge patch with If-Match, bumps the version and audits the changed keys", async () => {
    const { owner, siteId, device } = await setup();
    const first = await twinOf(owner.token, device.device_id);
    expect(first.status).toBe(200);
    expect(first.headers.get("ETag")).toBe('"0"');
    expect(first.json).toMatchObject({ desired: {}, reported: {}, delta: {}, version: 0, in_sync: true, last_reported_at: null });

    const one = await patchDesired(owner.token, device.device_id, { display: { brightness: 80, theme: "dark" }, printers: ["a", "b"] }, '"0"');
    expect(one.status).toBe(200);
    expect(one.headers.get("ETag")).toBe('"1"');
    const two = await patchDesired(owner.token, device.device_id, { display: { theme: null }, printers: ["c"] }, '"1"');
    expect(two.status).toBe(200);
    expect(two.json).toMatchObject({
      desired: { display: { brightness: 80 }, printers: ["c"] }, effective: { display: { brightness: 80 }, printers: ["c"] },
      version: 2, in_sync: false, delta: { display: { brightness: 80 }, printers: ["c"] },
      sources: { "/display/brightness": "device", "/printers": "device" },
    });
    expect(Object.keys(two.json.desired_updated_at).sort()).toEqual(["display", "printers"]);

    const audits = await auditOfType(siteId, "config_updated");
    expect(audits.map((a) => (a.eventMetadata as { changed_keys: string[] }).changed_keys)).toEqual([["display", "printers"], ["display", "printers"]]);
    expect(await inSyncRow(device.device_id)).toMatchObject({ version: 2, inSync: false, desired: JSON.stringify({ display: { brightness: 80 }, printers: ["c"] }) });
    expect((await liveEvents(siteId, "device.twin")).at(-1)).toMatchObject({ device_id: device.device_id, version: 2, in_sync: false });
  });

  it("needs If-Match (428), refuses a stale one (412) and a malformed one (400), changing nothing", async () => {
    const { owner, device } = await setup();
    const without = await patchDesired(owner.token, device.device_id, { a: 1 });
    expect(without.status).toBe(428);
    expect(without.json.detail).toMatch(/If-Match/);
    expect((await patchDesired(owner.token, device.device_id, { a: 1 }, "3")).status).toBe(400);
    const stale = await patchDesired(owner.token, device.device_id, { a: 1 }, '"7"');
    expect(stale.status).toBe(412);
    expect(stale.json.detail).toMatch(/version is 0/);
    expect((await twinOf(owner.token, device.device_id)).json).toMatchObject({ desired: {}, version: 0 });
  });

  it("two PATCHes with the same ETag: one 200, one 412", async () => {
    const { owner, device } = await setup();
    const results = await Promise.all([
      patchDesired(owner.token, device.device_id, { mode: "kiosk" }, '"0"'),
      patchDesired(owner.token, device.device_id, { mode: "till" }, '"0"'),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 412]);
    const winner = results.find((r) => r.status === 200)!;
    const twin = await twinOf(owner.token, device.device_id);
    expect(twin.json).toMatchObject({ version: 1, desired: winner.json.desired });
  });

  it("refuses documents over the limits: 413 for size, 422 for depth and keys", async () => {
    const { owner, device } = await setup();
    expect((await patchDesired(owner.token, device.device_id, { blob: "x".repeat(17 * 1024) }, '"0"')).status).toBe(413);
    // Within the limit alone, but too large once merged into what is there.
    expect((await patchDesired(owner.token, device.device_id, { a: "x".repeat(9000) }, '"0"')).status).toBe(200);
    const merged = await patchDesired(owner.token, device.device_id, { b: "x".repeat(9000) }, '"1"');
    expect(merged.status).toBe(413);
    let deep: Record<string, unknown> = { leaf: 1 };
    for (let i = 0; i < 9; i++) deep = { level: deep };
    const tooDeep = await patchDesired(owner.token, device.device_id, deep, '"1"');
    expect(tooDeep.status).toBe(422);
    const badKey = await patchDesired(owner.token, device.device_id, { "has space": 1 }, '"1"');
    expect(badKey.status).toBe(422);
    expect(badKey.json.detail[0].loc).toEqual(["body", "has space"]);
    expect((await patchDesired(owner.token, device.device_id, [1, 2], '"1"')).status).toBe(422);
    const d = device;
    expect((await report(d, { "bad key": 1 })).status).toBe(422);
    expect((await report(d, { blob: "x".repeat(17 * 1024) })).status).toBe(413);
    expect((await twinOf(owner.token, device.device_id)).json).toMatchObject({ version: 1, reported: {} });
  });
});

describe("device twins: the device's side", () => {
  it("fetches its effective desired state, gets 304 for the version it has, and a report clears the delta", async () => {
    const { owner, siteId, device } = await setup();
    await patchDesired(owner.token, device.device_id, { display: { brightness: 80 }, app: "2.1" }, '"0"');
    const fetched = await deviceTwin(device);
    expect(fetched.status).toBe(200);
    expect(fetched.json).toEqual({ desired: { display: { brightness: 80 }, app: "2.1" }, version: 1, delta: { display: { brightness: 80 }, app: "2.1" } });
    expect(fetched.headers.get("ETag")).toBe('"1"');
    const again = await deviceTwin(device, { "If-None-Match": '"1"' });
    expect(again.status).toBe(304);
    expect(again.text).toBe("");
    expect((await deviceTwin(device, { "If-None-Match": '"0"' })).status).toBe(200);

    const partial = await report(device, { app: "2.1", uptime: 5 });
    expect(partial.status).toBe(200);
    expect(partial.json.delta).toEqual({ display: { brightness: 80 } });
    const full = await report(device, { display: { brightness: 80 } });
    expect(full.json.delta).toEqual({});
    const twin = (await twinOf(owner.token, device.device_id)).json;
    expect(twin).toMatchObject({ in_sync: true, reported_version: 2, reported: { app: "2.1", uptime: 5, display: { brightness: 80 } }, drift_since: null });
    expect(twin.last_reported_at).toEqual(expect.any(String));
    expect(await inSyncRow(device.device_id)).toMatchObject({ inSync: true });
    expect((await liveEvents(siteId, "device.twin")).at(-1)).toMatchObject({ in_sync: true, delta_keys: [] });
  });

  it("a device offline during a change learns of it from its next heartbeat and converges", async () => {
    const { owner, device } = await setup();
    const before = await heartbeat(device.device_id, device.api_key);
    expect(before.json.desired_version).toBe(0);
    // The device is away while the operator changes its desired state twice.
    await patchDesired(owner.token, device.device_id, { volume: 3 }, '"0"');
    await patchDesired(owner.token, device.device_id, { locale: "fr" }, '"1"');
    const beat = await heartbeat(device.device_id, device.api_key);
    expect(beat.json.desired_version).toBe(2);
    const fetched = await deviceTwin(device, { "If-None-Match": `"${before.json.desired_version}"` });
    expect(fetched.status).toBe(200);
    expect(fetched.json.delta).toEqual({ volume: 3, locale: "fr" });
    expect((await report(device, fetched.json.delta)).json.delta).toEqual({});
    expect((await twinOf(owner.token, device.device_id)).json.in_sync).toBe(true);
  });

  it("takes a patch sent as application/merge-patch+json", async () => {
    const { owner, device } = await setup();
    const response = await fetchChecked(new Request(`http://fleet.test/api/v1/devices/${device.device_id}/twin/desired`, {
      method: "PATCH",
      headers: { Authorization: `Bearer ${owner.token}`, "Content-Type": "application/merge-patch+json", "If-Match": '"0"' },
      body: JSON.stringify({ volume: 2 }),
    }));
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ desired: { volume: 2 }, version: 1 });
  });

  it("is told of a change at once on its channel, and of changes made while away when it connects", async () => {
    const { owner, device } = await setup();
    await patchDesired(owner.token, device.device_id, { volume: 5 }, '"0"');
    const socket = await openSocket("/api/v1/agent/channel", { headers: deviceHeaders(device.device_id, device.api_key) });
    if (!socket.ws) throw new Error(`channel refused: ${socket.status}`);
    const hello = await socket.until(() => socket.messages.find((m) => m.type === "hello"), "hello");
    expect(hello).toMatchObject({ desired_version: 1 });
    await patchDesired(owner.token, device.device_id, { volume: 7 }, '"1"');
    const delta = await socket.until(() => socket.messages.find((m) => m.type === "twin.delta"), "twin.delta");
    expect(delta).toMatchObject({ type: "twin.delta", version: 2, desired: { volume: 7 }, delta: { volume: 7 } });
    socket.ws.send(JSON.stringify({ type: "heartbeat", id: "hb" }));
    const beat = await socket.until(() => socket.messages.find((m) => m.type === "heartbeat.ok"), "heartbeat.ok");
    expect(beat).toMatchObject({ desired_version: 2 });
    socket.ws.close();
  });
});

describe("device twins: templates", () => {
  it("layers tenant segment ← site ← device, with sources, and recomputes devices when a template changes", async () => {
    const a = await admin();
    const tenantId = (await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Chain" } })).json.tenant_id as string;
    const siteId = unique("TW-");
    expect((await call("/api/v1/sites/sites", { method: "POST", token: a.token, body: { site_id: siteId, name: "Twin store", tenant_id: tenantId } })).status).toBe(201);
    const till = await registerDevice(a.token, siteId, { name: "Till 1", device_type: "pos_terminal" });
    const kiosk = await registerDevice(a.token, siteId, { name: "Kiosk 1", device_type: "kiosk" });

    const segment = await call(`/api/v1/tenants/${tenantId}/twin-templates/pos_terminal`, {
      method: "PUT", token: a.token, body: { display: { brightness: 40, theme: "dark" }, printer: "thermal" },
    });
    expect(segment.status).toBe(200);
    expect(segment.json).toMatchObject({ scope: "tenant", scope_id: tenantId, segment: "pos_terminal", version: 1, devices_recomputed: 2 });
    const site = await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: a.token, body: { display: { brightness: 60 }, locale: "fr" } });
    expect(site.status).toBe(200);
    expect(site.json).toMatchObject({ scope: "site", scope_id: siteId, segment: null, version: 1 });
    expect((await patchDesired(a.token, till.device_id, { display: { theme: "light" } }, '"0"')).status).toBe(200);

    const tillTwin = (await twinOf(a.token, till.device_id)).json;
    expect(tillTwin.effective).toEqual({ display: { brightness: 60, theme: "light" }, printer: "thermal", locale: "fr" });
    expect(tillTwin.sources).toEqual({ "/display/brightness": "site", "/display/theme": "device", "/printer": "segment:pos_terminal", "/locale": "site" });
    const kioskTwin = (await twinOf(a.token, kiosk.device_id)).json;
    expect(kioskTwin.effective).toEqual({ display: { brightness: 60 }, locale: "fr" });
    expect(kioskTwin.segment).toBe("kiosk");

    // A template change reaches the device's heartbeat version and its fetch.
    const versionBefore = tillTwin.effective_version;
    await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: a.token, body: { locale: "de" } });
    expect((await heartbeat(till.device_id, till.api_key)).json.desired_version).toBe(versionBefore + 1);
    expect((await deviceTwin(till)).json.desired).toEqual({ display: { brightness: 40, theme: "light" }, printer: "thermal", locale: "de" });
    const read = await call(`/api/v1/sites/${siteId}/twin-template`, { token: a.token });
    expect(read.json).toMatchObject({ document: { locale: "de" }, version: 2 });
    expect((await call(`/api/v1/tenants/${tenantId}/twin-templates/pos_terminal`, { token: a.token })).json.document).toEqual({ display: { brightness: 40, theme: "dark" }, printer: "thermal" });
    expect((await call(`/api/v1/tenants/${tenantId}/twin-templates/kiosk`, { token: a.token })).json).toMatchObject({ document: {}, version: 0, updated_at: null });

    // A kiosk that becomes a till takes the till's segment template at once.
    expect((await call(`/api/v1/devices/${kiosk.device_id}`, { method: "PATCH", token: a.token, body: { device_type: "pos_terminal" } })).status).toBe(200);
    const moved = (await twinOf(a.token, kiosk.device_id)).json;
    expect(moved).toMatchObject({ segment: "pos_terminal", effective: { display: { brightness: 40, theme: "dark" }, printer: "thermal", locale: "de" } });
    expect(moved.sources["/printer"]).toBe("segment:pos_terminal");
  });

  it("a hub that lost its twins rebuilds them from D1: desired documents, versions and templates", async () => {
    const { owner, siteId, device } = await setup();
    await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: owner.token, body: { locale: "fr" } });
    await patchDesired(owner.token, device.device_id, { volume: 4 }, '"0"');
    await hubSql(siteId, "DELETE FROM twins");
    await hubSql(siteId, "DELETE FROM twin_templates");
    await hubSql(siteId, "DELETE FROM meta WHERE key = 'twin_templates_generation'");
    const twin = await twinOf(owner.token, device.device_id);
    expect(twin.headers.get("ETag")).toBe('"1"');
    expect(twin.json).toMatchObject({ desired: { volume: 4 }, version: 1, effective: { locale: "fr", volume: 4 }, sources: { "/locale": "site", "/volume": "device" } });
    expect((await patchDesired(owner.token, device.device_id, { volume: 5 }, '"1"')).status).toBe(200);
  });

  it("a hub keeps the newer template set when two writes' calls arrive out of order", async () => {
    const { owner, siteId, device } = await setup();
    await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: owner.token, body: { app: "1" } });
    await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: owner.token, body: { app: "2" } });
    // The first write's call, late: generation 1 against the hub's 2.
    const changes = await hub(siteId).setTwinTemplates(siteId, { generation: 1, site: { app: "1" }, segments: {} }, [
      { device_id: device.device_id, device_type: "pos_terminal", desired: null, version: 0 },
    ]);
    expect(changes).toEqual([]);
    expect((await twinOf(owner.token, device.device_id)).json.effective).toEqual({ app: "2" });
  });

  it("drift lists devices not matching, with keys and for how long; site health counts them", async () => {
    const { owner, siteId, device } = await setup();
    const other = await registerDevice(owner.token, siteId, { name: "Till 2" });
    const clock = await installClock(siteId, new ManualClock());
    const start = clock.now();
    await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: owner.token, body: { app: "3.0" } });
    await report(other, { app: "3.0" });
    clock.advance(90_000);
    const drift = await call(`/api/v1/sites/${siteId}/drift`, { token: owner.token });
    expect(drift.status).toBe(200);
    expect(drift.json).toMatchObject({ site_id: siteId, drifted_devices: 1 });
    expect(drift.json.devices).toEqual([expect.objectContaining({
      device_id: device.device_id, name: "Till", delta_keys: ["app"], delta: { app: "3.0" },
      drift_since: new Date(start).toISOString(), drifting_for_s: 90, last_reported_at: null,
    })]);
    const health = await call(`/api/v1/sites/${siteId}/health`, { token: owner.token });
    expect(health.json).toMatchObject({ twin_in_sync_devices: 1, twin_drifted_devices: 1 });
    expect(await inSyncRow(device.device_id)).toMatchObject({ inSync: false });
    expect(await inSyncRow(other.device_id)).toMatchObject({ inSync: true });
    await report(device, { app: "3.0" });
    expect((await call(`/api/v1/sites/${siteId}/drift`, { token: owner.token })).json.devices).toEqual([]);

    // A retired device never converges: it is not drift anyone is asked to fix.
    await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: owner.token, body: { app: "3.1" } });
    // (No route retires a device yet; the lifecycle column is what the drift list reads.)
    await db().update(schema.devices).set({ lifecycleState: "retired" }).where(eq(schema.devices.deviceId, other.device_id));
    const after = await call(`/api/v1/sites/${siteId}/drift`, { token: owner.token });
    expect(after.json.devices.map((d: { device_id: string }) => d.device_id)).toEqual([device.device_id]);
  });
});

describe("device twins: access", () => {
  it("viewers read, operators write, outsiders are told the object does not exist", async () => {
    const { owner, siteId, device } = await setup();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const outsider = await signup();
    expect((await twinOf(viewer.token, device.device_id)).status).toBe(200);
    expect((await patchDesired(viewer.token, device.device_id, { a: 1 }, '"0"')).status).toBe(403);
    expect((await call(`/api/v1/sites/${siteId}/twin-template`, { token: viewer.token })).status).toBe(200);
    expect((await call(`/api/v1/sites/${siteId}/twin-template`, { method: "PUT", token: viewer.token, body: { a: 1 } })).status).toBe(403);
    expect((await call(`/api/v1/sites/${siteId}/drift`, { token: viewer.token })).status).toBe(200);
    for (const res of [
      await twinOf(outsider.token, device.device_id),
      await patchDesired(outsider.token, device.device_id, { a: 1 }, '"0"'),
      await call(`/api/v1/sites/${siteId}/twin-template`, { token: outsider.token }),
      await call(`/api/v1/sites/${siteId}/drift`, { token: outsider.token }),
    ]) expect(res.status).toBe(404);
    expect((await twinOf(owner.token, device.device_id)).json.version).toBe(0);
    // The device's calls need its own key.
    expect((await deviceTwin({ ...device, api_key: "wrong" })).status).toBe(401);
    expect((await report({ ...device, api_key: "wrong" }, { a: 1 })).status).toBe(401);
  });

  it("tenant templates: the tenant's owner writes, its members read, others see no tenant", async () => {
    const a = await admin();
    const tenantId = (await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Chain" } })).json.tenant_id as string;
    const member = await signup();
    const stranger = await signup();
    expect((await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: member.id, role: "operator" } })).status).toBe(201);
    const path = `/api/v1/tenants/${tenantId}/twin-templates/pos_terminal`;
    expect((await call(path, { method: "PUT", token: member.token, body: { a: 1 } })).status).toBe(403);
    expect((await call(path, { token: member.token })).status).toBe(200);
    expect((await call(path, { token: stranger.token })).status).toBe(404);
    expect((await call(path, { method: "PUT", token: stranger.token, body: { a: 1 } })).status).toBe(404);
    expect((await call(path, { token: a.token })).json.version).toBe(0);
  });
});
