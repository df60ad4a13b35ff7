import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import type { SiteHub } from "../../durable-objects/site-hub";
import { CHANNEL_BAD_MESSAGE_BURST, CHANNEL_CLOSE } from "../../src/shared/device-channel";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { hashSecret } from "../../src/services/passwords";
import { call, db } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { openSocket } from "./live-helpers";
import { hub, poll, queueCommand, runAlarm } from "./commands-helpers";
import { ManualClock, installClock } from "./clock";

const CHANNEL = "/api/v1/agent/channel";

async function setup() {
  const { owner, siteId } = await siteWithOperator();
  const device = await registerDevice(owner.token, siteId);
  return { owner, siteId, device };
}

/** Opens the device's channel through the Worker and waits for the hub's hello. */
async function openChannel(device: { device_id: string; api_key: string }) {
  const socket = await openSocket(CHANNEL, { headers: deviceHeaders(device.device_id, device.api_key) });
  if (!socket.ws) throw new Error(`channel refused: ${socket.status} ${JSON.stringify(socket.body)}`);
  await socket.until(() => socket.messages.find((m) => m.type === "hello"), "hello");
  const reply = (ref: string) => socket.until(() => socket.messages.find((m) => "ref" in m && m.ref === ref), `the answer to ${ref}`);
  const sendJson = (message: Record<string, unknown>) => socket.ws.send(JSON.stringify(message));
  return { ...socket, ws: socket.ws, reply, sendJson };
}

/** What a hub that woke from hibernation has: no credential read yet, so no verified key in memory. */
const forgetVerifiedKeys = (siteId: string) =>
  runInDurableObject(hub(siteId), (instance: SiteHub) => {
    const credentials = (instance as unknown as { credentials?: { records?: Map<string, unknown> } }).credentials;
    if (!credentials?.records) throw new Error("DeviceCredentials no longer keeps records: update forgetVerifiedKeys");
    credentials.records.clear();
  });

const stored = (siteId: string, deviceId: string) => hub(siteId).storedSampleCount(siteId, deviceId);

describe("device channel: admission", () => {
  it("refuses a bad key, an unknown device and a suspended device before the upgrade", async () => {
    const { owner, device } = await setup();
    const badKey = await openSocket(CHANNEL, { headers: deviceHeaders(device.device_id, "wrong-key") });
    expect(badKey.ws).toBeUndefined();
    expect(badKey.status).toBe(401);
    expect(badKey.body).toEqual({ detail: "Invalid device credentials" });

    const unknown = await openSocket(CHANNEL, { headers: deviceHeaders("NO-SUCH-DEVICE", device.api_key) });
    expect(unknown.status).toBe(401);
    expect(unknown.ws).toBeUndefined();

    expect((await call(`/api/v1/devices/${device.device_id}/suspend`, { method: "POST", token: owner.token })).status).toBe(200);
    const suspended = await openSocket(CHANNEL, { headers: deviceHeaders(device.device_id, device.api_key) });
    expect(suspended.status).toBe(403);
    expect(suspended.ws).toBeUndefined();
  });

  it("answers whether the device has a channel open when no upgrade is asked for", async () => {
    const { siteId, device } = await setup();
    const before = await call(CHANNEL, { headers: deviceHeaders(device.device_id, device.api_key) });
    expect(before.status).toBe(200);
    expect(before.json).toEqual({ device_id: device.device_id, site_id: siteId, connected: false });
    await openChannel(device);
    const after = await call(CHANNEL, { headers: deviceHeaders(device.device_id, device.api_key) });
    expect(after.json.connected).toBe(true);
  });
});

describe("device channel: heartbeat and telemetry", () => {
  it("greets with the heartbeat interval, and a heartbeat over the socket marks the device online like HTTP", async () => {
    const { owner, siteId, device } = await setup();
    const channel = await openChannel(device);
    expect(channel.messages[0]).toMatchObject({ type: "hello", device_id: device.device_id, site_id: siteId, next_heartbeat_s: 10 });
    channel.sendJson({ type: "heartbeat", id: "hb-1", uptime_seconds: 42, boot_id: "boot-a" });
    const ok = await channel.reply("hb-1");
    expect(ok).toMatchObject({ type: "heartbeat.ok", device_status: "online", next_heartbeat_s: 10 });
    const seen = await call(`/api/v1/devices/${device.device_id}`, { token: owner.token });
    expect(seen.json.status).toBe("online");
    expect(seen.json.last_seen).not.toBeNull();
  });

  it("stores telemetry by the same delta rules as HTTP", async () => {
    const { siteId, device } = await setup();
    const channel = await openChannel(device);
    const sample = { cpu_usage: 20, memory_usage: 40, disk_usage: 50 };
    channel.sendJson({ type: "telemetry", id: "t-1", samples: [sample] });
    expect(await channel.reply("t-1")).toMatchObject({ type: "telemetry.ok", results: [{ stored: true, reason: "first_sample" }], stored_count: 1 });
    channel.sendJson({ type: "telemetry", id: "t-2", samples: [sample, { ...sample, cpu_usage: 90 }] });
    expect(await channel.reply("t-2")).toMatchObject({ results: [{ stored: false, reason: "unchanged" }, { stored: true, reason: "changed" }], stored_count: 1 });
    expect(await stored(siteId, device.device_id)).toBe(2);
  });

  it("shares the device's rate limit with its HTTP calls", async () => {
    const { device } = await setup();
    const channel = await openChannel(device);
    // The bucket holds 60; HTTP heartbeats drain it, then the socket is refused like HTTP would be.
    let status = 200;
    for (let i = 0; i < 70 && status === 200; i++) status = (await heartbeat(device.device_id, device.api_key)).status;
    expect(status).toBe(429);
    channel.sendJson({ type: "heartbeat", id: "limited" });
    expect(await channel.reply("limited")).toMatchObject({ type: "error", code: "rate_limited" });
    expect(channel.closed()).toBeUndefined();
  });
});

describe("device channel: commands", () => {
  it("sends a queued command at once, leased as a poll would, and takes its ack and result", async () => {
    const { owner, siteId, device } = await setup();
    const channel = await openChannel(device);
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "restart" });
    expect(queued.status).toBe(201);
    // Already out on the socket when the queue call answers.
    expect(queued.json).toMatchObject({ status: "delivered", attempts: 1 });
    const message = channel.messages.find((m) => m.type === "command");
    expect(message).toMatchObject({ type: "command", command: { command_id: queued.json.command_id, status: "delivered", attempts: 1 } });
    // Leased: a poll does not hand it out again.
    expect((await poll(device)).json.commands).toEqual([]);

    channel.sendJson({ type: "ack", id: "a", command_id: queued.json.command_id });
    expect(await channel.reply("a")).toMatchObject({ type: "ack.ok", command_id: queued.json.command_id });
    channel.sendJson({ type: "result", id: "r", command_id: queued.json.command_id, status: "success", result: { rebooted: true } });
    expect(await channel.reply("r")).toMatchObject({ type: "result.ok", command: { status: "completed", result: { rebooted: true } } });
    const read = await call(`/api/v1/commands/${queued.json.command_id}`, { token: owner.token });
    expect(read.json).toMatchObject({ status: "completed", result: { rebooted: true } });
    expect(siteId).toBeTruthy();
  });

  it("answers a foreign or unknown command id with an error message, not a closed socket", async () => {
    const { device } = await setup();
    const channel = await openChannel(device);
    channel.sendJson({ type: "ack", id: "x", command_id: "00000000-0000-4000-8000-000000000000" });
    expect(await channel.reply("x")).toMatchObject({ type: "error", code: "not_found" });
    expect(channel.closed()).toBeUndefined();
  });

  it("says in the hub's answer whether the command went out on the channel", async () => {
    const { siteId, device } = await setup();
    const offline = await hub(siteId).queueCommand(siteId, { deviceId: device.device_id, commandType: "ping" });
    expect(offline).toMatchObject({ ok: true, value: { delivered_on_channel: false, command: { status: "pending" } } });
    const channel = await openChannel(device);
    // What was queued while away arrives on connect.
    await channel.until(() => channel.messages.find((m) => m.type === "command"), "the waiting command");
    const online = await hub(siteId).queueCommand(siteId, { deviceId: device.device_id, commandType: "notify", payload: { title: "Hi" } });
    expect(online).toMatchObject({ ok: true, value: { delivered_on_channel: true, command: { status: "delivered" } } });
    await channel.until(() => channel.messages.find((m) => m.type === "push"), "the push");
  });

  it("delivers a push at once to a device on its channel; a polling device's push waits for its poll", async () => {
    const { owner, siteId, device } = await setup();
    const polling = await registerDevice(owner.token, siteId);
    const channel = await openChannel(device);
    const sent = await call("/api/v1/push/send", {
      method: "POST", token: owner.token,
      body: { device_ids: [device.device_id, polling.device_id], title: "Till 3", body: "Close in 5 minutes" },
    });
    expect(sent.status, sent.text).toBe(201);
    const byDevice = Object.fromEntries(sent.json.results.map((r: { device_id: string }) => [r.device_id, r]));
    expect(byDevice[device.device_id]).toMatchObject({ status: "delivered", channel: "device_channel" });
    expect(byDevice[polling.device_id]).toMatchObject({ status: "queued", channel: "command_poll" });
    const push = await channel.until(() => channel.messages.find((m) => m.type === "push"), "the push");
    expect(push).toMatchObject({ command: { command_id: byDevice[device.device_id].command_id, command_type: "notify", payload: { title: "Till 3" } } });
    expect((await poll(polling)).json.commands).toMatchObject([{ command_id: byDevice[polling.device_id].command_id, command_type: "notify" }]);
  });

  it("sends a job's command to a device on its channel as soon as the job fans out", async () => {
    const { owner, siteId, device } = await setup();
    const channel = await openChannel(device);
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "restart" } });
    expect(job.status).toBe(201);
    const sent = await channel.until(() => channel.messages.find((m) => m.type === "command"), "the job's command");
    expect(sent).toMatchObject({ command: { device_id: device.device_id, command_type: "restart", status: "delivered" } });
  });

  it("redelivers a command whose socket dropped before the ack: on the next poll, or on a new socket", async () => {
    const { owner, siteId, device } = await setup();
    const clock = await installClock(siteId, new ManualClock());
    const first = await openChannel(device);
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "restart" });
    await first.until(() => first.messages.find((m) => m.type === "command"), "the command");
    first.ws.close(1000, "dropped");
    await first.waitForClose();

    clock.advance(61_000);
    await runAlarm(siteId);
    const polled = await poll(device);
    expect(polled.json.commands).toMatchObject([{ command_id: queued.json.command_id, attempts: 2 }]);

    // The poll did not ack either: after its lease, a device back on the channel gets it there.
    clock.advance(61_000);
    await runAlarm(siteId);
    const second = await openChannel(device);
    const again = await second.until(() => second.messages.find((m) => m.type === "command"), "the redelivery");
    expect(again).toMatchObject({ command: { command_id: queued.json.command_id, attempts: 3 } });
  });

  it("redelivers on the open socket when the lease lapses without an ack", async () => {
    const { owner, siteId, device } = await setup();
    const clock = await installClock(siteId, new ManualClock());
    const channel = await openChannel(device);
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "restart" });
    await channel.until(() => channel.messages.find((m) => m.type === "command"), "the command");
    clock.advance(61_000);
    await runAlarm(siteId);
    const again = await channel.until(() => channel.messages.filter((m) => m.type === "command")[1], "the redelivery");
    expect(again).toMatchObject({ command: { command_id: queued.json.command_id, attempts: 2 } });
  });
});

describe("device channel: closing", () => {
  it("closes the socket at once when the device is suspended, or its key rotated", async () => {
    const { owner, device } = await setup();
    const suspended = await openChannel(device);
    await call(`/api/v1/devices/${device.device_id}/suspend`, { method: "POST", token: owner.token });
    expect(await suspended.waitForClose()).toEqual({ code: CHANNEL_CLOSE.inactive.code, reason: CHANNEL_CLOSE.inactive.reason });

    const other = await setup();
    const rotated = await openChannel(other.device);
    const rotation = await call(`/api/v1/devices/${other.device.device_id}/rotate-key`, { method: "POST", token: other.owner.token });
    expect(rotation.status).toBe(200);
    expect(await rotated.waitForClose()).toEqual({ code: CHANNEL_CLOSE.credentials.code, reason: CHANNEL_CLOSE.credentials.reason });
    // The new key opens a channel again.
    await openChannel({ device_id: other.device.device_id, api_key: rotation.json.api_key });
  });

  it("keeps the socket through a settings change that leaves the key alone", async () => {
    const { owner, device } = await setup();
    const channel = await openChannel(device);
    const patched = await call(`/api/v1/devices/${device.device_id}`, { method: "PATCH", token: owner.token, body: { heartbeat_interval_s: 30 } });
    expect(patched.status).toBe(200);
    channel.sendJson({ type: "heartbeat", id: "after-edit" });
    expect(await channel.reply("after-edit")).toMatchObject({ type: "heartbeat.ok", next_heartbeat_s: 30 });
    expect(channel.closed()).toBeUndefined();
  });

  it("keeps the socket when the hub wakes from hibernation without its verified keys, and costs no bcrypt", async () => {
    const { siteId, device } = await setup();
    const channel = await openChannel(device);
    await forgetVerifiedKeys(siteId);
    channel.sendJson({ type: "heartbeat", id: "after-wake" });
    expect(await channel.reply("after-wake")).toMatchObject({ type: "heartbeat.ok" });
    expect(channel.closed()).toBeUndefined();
  });

  it("closes the socket after a wake when the device's key changed while the hub slept", async () => {
    const { siteId, device } = await setup();
    const channel = await openChannel(device);
    await db().update(schema.devices).set({ apiKeyHash: await hashSecret("another-key") }).where(eq(schema.devices.deviceId, device.device_id));
    await forgetVerifiedKeys(siteId);
    channel.sendJson({ type: "heartbeat", id: "stale" });
    expect(await channel.waitForClose()).toEqual({ code: CHANNEL_CLOSE.credentials.code, reason: CHANNEL_CLOSE.credentials.reason });
  });

  it("answers a bad message with an error and keeps the socket; closes it after a burst of them", async () => {
    const { device } = await setup();
    const channel = await openChannel(device);
    channel.ws.send("not json");
    await channel.until(() => channel.messages.find((m) => m.type === "error"), "the error");
    channel.sendJson({ type: "heartbeat", id: "still-here" });
    expect(await channel.reply("still-here")).toMatchObject({ type: "heartbeat.ok" });
    for (let i = 0; i < CHANNEL_BAD_MESSAGE_BURST; i++) channel.sendJson({ type: "launch-missiles", id: `bad-${i}` });
    expect(await channel.waitForClose()).toEqual({ code: CHANNEL_CLOSE.abuse.code, reason: CHANNEL_CLOSE.abuse.reason });
  });

  it("a second channel for the same device replaces the first", async () => {
    const { device } = await setup();
    const first = await openChannel(device);
    await openChannel(device);
    expect(await first.waitForClose()).toEqual({ code: CHANNEL_CLOSE.replaced.code, reason: CHANNEL_CLOSE.replaced.reason });
  });

  it("device sockets are not live-channel subscribers: no live events, no place in the caps", async () => {
    const { siteId, device } = await setup();
    const channel = await openChannel(device);
    channel.sendJson({ type: "heartbeat", id: "hb" });
    await channel.reply("hb");
    const subscribers = await runInDurableObject(hub(siteId), (instance: SiteHub) => instance.subscribers(siteId));
    expect(subscribers.websockets).toBe(0);
    // A heartbeat publishes device.status to subscribers; the device's own socket gets only its answer.
    expect(channel.messages.map((m) => m.type)).toEqual(["hello", "heartbeat.ok"]);
  });
});
