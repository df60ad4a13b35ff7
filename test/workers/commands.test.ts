import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, createSite, db, eventually, grantSiteRole, signup, unique } from "./helpers";
import { deviceHeaders, registerDevice, siteWithOperator } from "./device-helpers";
import { agentRow, setAgent } from "./agents-helpers";
import { installClock, type ManualClock } from "./clock";
import { LEASE_MS } from "../../durable-objects/commands";
import {
  ack, alarmAt, auditOfType, commandAudit, flushHub, hub, hubSql, liveEvents, poll, queueCommand, report, runAlarm, runCron,
} from "./commands-helpers";

const RECORD_FIELDS = [
  "command_id", "device_id", "site_id", "command_type", "payload", "status", "attempts", "created_at", "delivered_at",
  "acknowledged_at", "completed_at", "expires_at", "result", "error_message", "created_by",
].sort();

async function setup() {
  const { owner, siteId } = await siteWithOperator();
  const device = await registerDevice(owner.token, siteId);
  return { owner, siteId, device };
}

/** Whether a long poll of the device is parked in its hub's command queue. */
const isWaiting = (siteId: string, deviceId: string) =>
  runInDurableObject(hub(siteId), (instance) => {
    const waiters = (instance as unknown as { commands?: { waiters?: Map<string, Set<unknown>> } }).commands?.waiters;
    if (!waiters) throw new Error("SiteHub no longer keeps commands.waiters: update isWaiting");
    return (waiters.get(deviceId)?.size ?? 0) > 0;
  });

/** A delivered command's lease runs out: its hub's clock moves past the lease without an ack. */
const lapseLease = (clock: ManualClock) => clock.advance(LEASE_MS + 1);

describe("command queue: the device round trip", () => {
  it("queues, delivers on poll, acknowledges and records the result over HTTP, auditing and publishing each step", async () => {
    const { owner, siteId, device } = await setup();
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "REBOOT", payload: { reason: "stuck printer" } });
    expect(queued.status, queued.text).toBe(201);
    const command = queued.json;
    expect(Object.keys(command).sort()).toEqual(RECORD_FIELDS);
    expect(command).toMatchObject({
      device_id: device.device_id, site_id: siteId, command_type: "restart", payload: { reason: "stuck printer" }, status: "pending",
      attempts: 0, delivered_at: null, acknowledged_at: null, completed_at: null, result: null, error_message: null, created_by: owner.email,
    });
    expect(command.command_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(Date.parse(command.expires_at) - Date.parse(command.created_at)).toBe(3_600_000);

    const polled = await poll(device);
    expect(polled.status).toBe(200);
    expect(polled.json.commands).toHaveLength(1);
    expect(polled.json.commands[0]).toMatchObject({ command_id: command.command_id, status: "delivered", attempts: 1 });
    expect(polled.json.commands[0].delivered_at).not.toBeNull();
    // Leased: a second poll does not hand it out again.
    expect((await poll(device)).json.commands).toEqual([]);

    const acked = await ack(device, command.command_id);
    expect(acked.status).toBe(200);
    expect(acked.json).toMatchObject({ command_id: command.command_id, message: "Command acknowledged" });
    expect(acked.json.acknowledged_at).not.toBeNull();

    const done = await report(device, command.command_id, { status: "completed", result: { reboot_time_seconds: 41 } });
    expect(done.status, done.text).toBe(200);
    expect(done.json).toMatchObject({ status: "completed", result: { reboot_time_seconds: 41 }, attempts: 1, acknowledged_at: acked.json.acknowledged_at });
    expect(done.json.completed_at).not.toBeNull();

    const read = await call(`/api/v1/commands/${command.command_id}`, { token: owner.token });
    expect(read.status).toBe(200);
    expect(read.json).toEqual(done.json);
    const listed = await call(`/api/v1/devices/${device.device_id}/commands?status=completed`, { token: owner.token });
    expect(listed.json).toMatchObject({ total: 1, limit: 50, offset: 0 });
    expect(listed.json.commands[0].command_id).toBe(command.command_id);

    await flushHub(siteId);
    const audit = await commandAudit(command.command_id);
    expect(audit.map((a) => a.eventType)).toEqual(["command_queued", "command_delivered", "command_acknowledged", "command_completed"]);
    expect(audit.every((a) => a.siteId === siteId && a.deviceId === device.device_id && a.category === "device_management")).toBe(true);
    expect(audit[0].userId).toBe(owner.id);
    const index = await db().select().from(schema.commandIndex).where(eq(schema.commandIndex.commandId, command.command_id)).get();
    expect(index).toMatchObject({ siteId, deviceId: device.device_id });
    expect(index!.closedAt).not.toBeNull();

    const live = (await liveEvents(siteId, "command.updated")).filter((e: Record<string, unknown>) => e.command_id === command.command_id);
    expect(live.map((e: Record<string, unknown>) => e.status)).toEqual(["pending", "delivered", "acknowledged", "completed"]);
  });

  it("answers the same body to a repeated ack and a repeated result, and 409 to a different result", async () => {
    const { owner, device } = await setup();
    const { command_id } = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json;
    await poll(device);
    const first = await ack(device, command_id);
    const second = await ack(device, command_id);
    expect(second.status).toBe(200);
    expect(second.json).toEqual(first.json);

    const result = { status: "failed", result: { code: 7, detail: { step: "dns" } }, error_message: "no route to host" };
    const r1 = await report(device, command_id, result);
    expect(r1.status).toBe(200);
    const r2 = await report(device, command_id, { ...result, result: { detail: { step: "dns" }, code: 7 } }, `/commands/${command_id}/status`);
    expect(r2.status).toBe(200);
    expect(r2.json).toEqual(r1.json);
    expect(r2.headers.get("Deprecation")).toBe("true");
    // Acking a finished command is still the same answer.
    expect((await ack(device, command_id)).json).toEqual(first.json);

    const different = await report(device, command_id, { status: "completed", result: { code: 0 } });
    expect(different.status).toBe(409);
    expect(different.json.detail).toMatch(/different result/);
    const otherMessage = await report(device, command_id, { ...result, error_message: "timeout" });
    expect(otherMessage.status).toBe(409);
  });

  it("accepts the specification's and the old agents' paths", async () => {
    const { owner, device } = await setup();
    const a = (await queueCommand(owner.token, device.device_id, { command_type: "UPDATE_CONFIG", payload: { settings: { volume: 3 } } })).json;
    expect(a.command_type).toBe("update_config");
    const b = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json;
    const polled = await poll(device, "", "/devices/pending");
    expect(polled.status).toBe(200);
    expect(polled.headers.get("Deprecation")).toBe("true");
    expect(polled.json.commands.map((c: { command_id: string }) => c.command_id)).toEqual([a.command_id, b.command_id]);

    const compatAck = await ack(device, a.command_id, `/api/v1/devices/${device.device_id}/commands/${a.command_id}/ack`);
    expect(compatAck.status).toBe(200);
    expect(compatAck.headers.get("Link")).toBe(`</api/v1/commands/${a.command_id}/ack>; rel="successor-version"`);
    expect((await ack(device, b.command_id, `/commands/${b.command_id}/ack`)).status).toBe(200);

    const specStatus = await report(device, a.command_id, { status: "success", result: { applied: true }, device_id: device.device_id }, `/devices/${a.command_id}/status`);
    expect(specStatus.status, specStatus.text).toBe(200);
    expect(specStatus.json.status).toBe("completed");
    expect(specStatus.headers.get("Deprecation")).toBe("true");
    const compatStatus = await report(device, b.command_id, { status: "FAILURE", error_message: "unreachable", site_id: "ignored" }, `/api/v1/devices/${b.command_id}/status`);
    expect(compatStatus.status).toBe(200);
    expect(compatStatus.json).toMatchObject({ status: "failed", error_message: "unreachable", result: null });

    const bad = await report(device, b.command_id, { status: "done" });
    expect(bad.status).toBe(422);
    expect(bad.json.detail[0].loc).toEqual(["body", "status"]);
  });
});

describe("command queue: leases, redelivery and expiry", () => {
  it("delivers the same command again after an unacknowledged lease", async () => {
    const { owner, siteId, device } = await setup();
    const clock = await installClock(siteId);
    const { command_id } = (await queueCommand(owner.token, device.device_id, { command_type: "restart" })).json;
    expect((await poll(device)).json.commands[0].attempts).toBe(1);
    expect((await poll(device)).json.commands).toEqual([]);

    lapseLease(clock);
    expect(await runAlarm(siteId)).toBe(true);
    const read = await call(`/api/v1/commands/${command_id}`, { token: owner.token });
    expect(read.json).toMatchObject({ status: "pending", attempts: 1 });

    const again = await poll(device);
    expect(again.json.commands).toHaveLength(1);
    expect(again.json.commands[0]).toMatchObject({ command_id, status: "delivered", attempts: 2 });
    await flushHub(siteId);
    expect((await commandAudit(command_id)).map((a) => a.eventType))
      .toEqual(["command_queued", "command_delivered", "command_lease_expired", "command_delivered"]);
  });

  it("expires a command instead of delivering it a sixth time", async () => {
    const { owner, siteId, device } = await setup();
    const clock = await installClock(siteId);
    const { command_id } = (await queueCommand(owner.token, device.device_id, { command_type: "shutdown" })).json;
    for (let delivery = 1; delivery <= 5; delivery++) {
      const polled = await poll(device);
      expect(polled.json.commands.map((c: { command_id: string; attempts: number }) => [c.command_id, c.attempts])).toEqual([[command_id, delivery]]);
      lapseLease(clock);
    }
    // The sixth poll finds the fifth lease lapsed: the command expires and is not handed out.
    expect((await poll(device)).json.commands).toEqual([]);
    const read = await call(`/api/v1/commands/${command_id}`, { token: owner.token });
    expect(read.json).toMatchObject({ status: "expired", attempts: 5, error_message: "Expired: not acknowledged after 5 deliveries" });
    expect(read.json.completed_at).not.toBeNull();
    expect((await ack(device, command_id)).status).toBe(409);
    expect((await report(device, command_id, { status: "completed" })).status).toBe(409);

    await flushHub(siteId);
    const audit = await commandAudit(command_id);
    expect(audit.filter((a) => a.eventType === "command_delivered")).toHaveLength(5);
    const expired = audit.filter((a) => a.eventType === "command_expired");
    expect(expired).toHaveLength(1);
    expect(expired[0].severity).toBe("warning");
    expect(expired[0].eventMetadata).toMatchObject({ reason: "deliveries", attempts: 5 });
  });

  it("expires open commands past their TTL through the hub's alarm, and leaves an idle site without an alarm", async () => {
    const { owner, siteId, device } = await setup();
    const clock = await installClock(siteId);
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "ping", ttl_seconds: 120 });
    expect(Date.parse(queued.json.expires_at) - Date.parse(queued.json.created_at)).toBe(120_000);
    const { command_id } = queued.json;
    expect(await alarmAt(siteId)).not.toBeNull();
    clock.advance(120_001);
    await runAlarm(siteId);
    const read = await call(`/api/v1/commands/${command_id}`, { token: owner.token });
    expect(read.json.status).toBe("expired");
    expect(read.json.error_message).toMatch(/^Expired: its time to live ran out at /);
    await eventually(async () => (await commandAudit(command_id)).some((a) => a.eventType === "command_expired"));
    await eventually(async () => (await alarmAt(siteId)) === null);
  });

  it("refuses TTLs beyond 48 h and unknown command names with 422", async () => {
    const { owner, device } = await setup();
    expect((await queueCommand(owner.token, device.device_id, { command_type: "ping", ttl_seconds: 172_801 })).status).toBe(422);
    expect((await queueCommand(owner.token, device.device_id, { command_type: "ping", ttl_seconds: 172_800 })).status).toBe(201);
    const bad = await queueCommand(owner.token, device.device_id, { command_type: "rm -rf /" });
    expect(bad.status).toBe(422);
    expect(bad.json.detail[0].loc).toEqual(["body", "command_type"]);
  });

  it("lets the cron expire a command its hub has not swept yet, once", async () => {
    const { owner, siteId, device } = await setup();
    const { command_id } = (await queueCommand(owner.token, device.device_id, { command_type: "ping", ttl_seconds: 60 })).json;
    // Park the hub's alarm far away, as if it had been lost; only the cron is left to notice.
    await hubSql(siteId, "UPDATE commands SET expires_ms = ? WHERE command_id = ?", Date.now() - 1, command_id);
    await db().update(schema.commandIndex).set({ expiresAt: new Date(Date.now() - 1).toISOString() }).where(eq(schema.commandIndex.commandId, command_id));
    await runCron();
    const row = await db().select().from(schema.commandIndex).where(eq(schema.commandIndex.commandId, command_id)).get();
    expect(row!.closedAt).not.toBeNull();
    expect((await call(`/api/v1/commands/${command_id}`, { token: owner.token })).json.status).toBe("expired");
    await runCron();
    expect((await commandAudit(command_id)).filter((a) => a.eventType === "command_expired")).toHaveLength(1);
  });
});

describe("command queue: limits, idempotency and isolation", () => {
  it("never shows, acks or completes another device's command", async () => {
    const { owner, siteId, device } = await setup();
    const sibling = await registerDevice(owner.token, siteId);
    const elsewhere = await registerDevice(owner.token, await createSite(owner.token));
    const { command_id } = (await queueCommand(owner.token, device.device_id, { command_type: "restart" })).json;
    expect((await poll(sibling)).json.commands).toEqual([]);
    for (const intruder of [sibling, elsewhere]) {
      const a = await ack(intruder, command_id);
      expect(a.status).toBe(404);
      expect(a.json).toEqual({ detail: "Command not found" });
      expect((await report(intruder, command_id, { status: "completed" })).status).toBe(404);
      expect((await report(intruder, command_id, { status: "completed" }, `/devices/${command_id}/status`)).status).toBe(404);
    }
    // Naming the owner in the compatibility path does not help either.
    expect((await ack(sibling, command_id, `/api/v1/devices/${device.device_id}/commands/${command_id}/ack`)).status).toBe(403);
    expect((await report(sibling, command_id, { status: "completed", device_id: device.device_id })).status).toBe(403);
    // The owner still gets it untouched.
    expect((await poll(device)).json.commands[0]).toMatchObject({ command_id, attempts: 1 });
  });

  it("answers 429 to the 51st open command and accepts again once one finishes", async () => {
    const { owner, device } = await setup();
    for (let i = 0; i < 50; i++) expect((await queueCommand(owner.token, device.device_id, { command_type: "ping", payload: { i } })).status).toBe(201);
    const refused = await queueCommand(owner.token, device.device_id, { command_type: "ping" });
    expect(refused.status).toBe(429);
    expect(refused.json.detail).toMatch(/50 open commands/);
    const [first] = (await poll(device)).json.commands;
    await report(device, first.command_id, { status: "completed" });
    expect((await queueCommand(owner.token, device.device_id, { command_type: "ping" })).status).toBe(201);
    const open = await call(`/api/v1/devices/${device.device_id}/commands?limit=500`, { token: owner.token });
    expect(open.json.total).toBe(51);
  });

  it("creates one command for a repeated Idempotency-Key and refuses the key with a different body", async () => {
    const { owner, device } = await setup();
    const key = unique("idem-");
    const body = { command_type: "restart", payload: { why: "nightly" } };
    const first = await queueCommand(owner.token, device.device_id, body, { "Idempotency-Key": key });
    const second = await queueCommand(owner.token, device.device_id, { ...body, command_type: "REBOOT" }, { "Idempotency-Key": key });
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.json).toEqual(first.json);
    const listed = await call(`/api/v1/devices/${device.device_id}/commands`, { token: owner.token });
    expect(listed.json.total).toBe(1);
    const changed = await queueCommand(owner.token, device.device_id, { command_type: "shutdown" }, { "Idempotency-Key": key });
    expect(changed.status).toBe(422);
    // Another key is another command.
    expect((await queueCommand(owner.token, device.device_id, body, { "Idempotency-Key": unique("idem-") })).json.command_id).not.toBe(first.json.command_id);
  });

  it("enforces roles: operators queue and cancel, viewers read, strangers see nothing", async () => {
    const { owner, siteId, device } = await setup();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const stranger = await signup();
    expect((await queueCommand(viewer.token, device.device_id, { command_type: "ping" })).status).toBe(403);
    // A stranger is told the device does not exist, exactly as for an id that was never registered.
    const hidden = await queueCommand(stranger.token, device.device_id, { command_type: "ping" });
    expect(hidden.status).toBe(404);
    expect(hidden.json).toEqual({ detail: `Device with ID '${device.device_id}' not found` });
    const unknownId = `NOPE-${unique()}`;
    const unknown = await queueCommand(owner.token, unknownId, { command_type: "ping" });
    expect(unknown.status).toBe(404);
    expect(unknown.json).toEqual({ detail: `Device with ID '${unknownId}' not found` });
    expect((await call(`/api/v1/devices/${device.device_id}/commands`, { method: "POST", body: { command_type: "ping" } })).status).toBe(401);

    const { command_id } = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json;
    expect((await call(`/api/v1/commands/${command_id}`, { token: viewer.token })).status).toBe(200);
    expect((await call(`/api/v1/devices/${device.device_id}/commands`, { token: viewer.token })).status).toBe(200);
    const unknownCommand = await call(`/api/v1/commands/${crypto.randomUUID()}`, { token: owner.token });
    expect(unknownCommand.status).toBe(404);
    for (const hiddenCall of [
      call(`/api/v1/commands/${command_id}`, { token: stranger.token }),
      call(`/api/v1/commands/${command_id}/cancel`, { method: "POST", token: stranger.token }),
    ]) {
      const res = await hiddenCall;
      expect(res.status).toBe(404);
      expect(res.json).toEqual(unknownCommand.json);
    }
    // A viewer sees the command, so being refused the cancel is a 403.
    expect((await call(`/api/v1/commands/${command_id}/cancel`, { method: "POST", token: viewer.token })).status).toBe(403);
    // Device credentials do not open user endpoints, and the poll needs them.
    expect((await call("/api/v1/devices/pending")).status).toBe(401);
    expect((await call(`/api/v1/commands/${command_id}`, { headers: deviceHeaders(device.device_id, device.api_key) })).status).toBe(401);

    await call(`/api/v1/devices/${device.device_id}/suspend`, { method: "POST", token: owner.token });
    expect((await queueCommand(owner.token, device.device_id, { command_type: "ping" })).status).toBe(409);
  });

  it("cancels only pending or delivered commands", async () => {
    const { owner, siteId, device } = await setup();
    const a = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json;
    const cancelled = await call(`/api/v1/commands/${a.command_id}/cancel`, { method: "POST", token: owner.token });
    expect(cancelled.status).toBe(200);
    expect(cancelled.json).toMatchObject({ status: "cancelled", error_message: `cancelled by ${owner.email}` });
    expect((await call(`/api/v1/commands/${a.command_id}/cancel`, { method: "POST", token: owner.token })).json).toEqual(cancelled.json);
    expect((await poll(device)).json.commands).toEqual([]);

    const b = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json;
    await poll(device);
    expect((await call(`/api/v1/commands/${b.command_id}/cancel`, { method: "POST", token: owner.token })).json.status).toBe("cancelled");
    const late = await ack(device, b.command_id);
    expect(late.status).toBe(409);
    expect(late.json.detail).toMatch(/cancelled/);

    const c = (await queueCommand(owner.token, device.device_id, { command_type: "ping" })).json;
    await poll(device);
    await ack(device, c.command_id);
    expect((await call(`/api/v1/commands/${c.command_id}/cancel`, { method: "POST", token: owner.token })).status).toBe(409);
    await flushHub(siteId);
    expect((await commandAudit(a.command_id)).map((e) => e.eventType)).toEqual(["command_queued", "command_cancelled"]);
  });
});

describe("command queue: long poll and the hot path", () => {
  it("answers a waiting poll as soon as a command is queued", async () => {
    const { owner, siteId, device } = await setup();
    const started = Date.now();
    const waiting = poll(device, "?wait=20");
    // Queue only once the poll is really waiting in the hub (queued earlier, it would be answered at once anyway).
    await eventually(() => isWaiting(siteId, device.device_id));
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "ping" });
    const answered = await waiting;
    const elapsed = Date.now() - started;
    expect(answered.status).toBe(200);
    expect(answered.json.commands.map((c: { command_id: string }) => c.command_id)).toEqual([queued.json.command_id]);
    expect(elapsed).toBeLessThan(5_000);
  });

  it("answers an empty long poll after the wait and refuses a negative wait", async () => {
    const { device } = await setup();
    const started = Date.now();
    const res = await poll(device, "?wait=1");
    expect(res.json).toEqual({ commands: [] });
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect((await poll(device, "?wait=-1")).status).toBe(422);
  });

  it("writes nothing to D1 and sets no alarm for an empty poll", async () => {
    const { siteId, device } = await setup();
    await poll(device);
    const auditBefore = (await db().select().from(schema.auditLogs).all()).length;
    const indexBefore = (await db().select().from(schema.commandIndex).all()).length;
    for (let i = 0; i < 5; i++) expect((await poll(device)).json.commands).toEqual([]);
    expect((await db().select().from(schema.auditLogs).all()).length).toBe(auditBefore);
    expect((await db().select().from(schema.commandIndex).all()).length).toBe(indexBefore);
    expect(await hubSql(siteId, "SELECT * FROM d1_outbox")).toEqual([]);
    expect(await alarmAt(siteId)).toBeNull();
  });
});

describe("command queue: simulated devices", () => {
  it("runs commands in the hub with the specification's simulated results", async () => {
    const { owner, siteId } = await siteWithOperator();
    const sim = await registerDevice(owner.token, siteId, { device_source: "simulated" });
    const ping = (await queueCommand(owner.token, sim.device_id, { command_type: "ping" })).json;
    expect(ping).toMatchObject({ status: "acknowledged", attempts: 1 });
    const restart = (await queueCommand(owner.token, sim.device_id, { command_type: "REBOOT" })).json;
    const config = (await queueCommand(owner.token, sim.device_id, { command_type: "update_config", payload: { settings: { receipt_footer: "Thanks" } } })).json;
    const unknown = (await queueCommand(owner.token, sim.device_id, { command_type: "collect_logs" })).json;
    await hubSql(siteId, "UPDATE commands SET sim_due_ms = ? WHERE sim_due_ms IS NOT NULL", Date.now() - 1);
    await runAlarm(siteId);
    const read = async (id: string) => (await call(`/api/v1/commands/${id}`, { token: owner.token })).json;
    const p = await read(ping.command_id);
    expect(p.status).toBe("completed");
    expect(p.result.latency_ms).toBeGreaterThanOrEqual(5);
    expect(p.result.latency_ms).toBeLessThanOrEqual(50);
    const r = await read(restart.command_id);
    expect(r).toMatchObject({ status: "completed", command_type: "restart" });
    expect(r.result.reboot_time_seconds).toBeGreaterThan(0);
    expect((await read(config.command_id)).result).toMatchObject({ applied_settings: { receipt_footer: "Thanks" } });
    expect(await read(unknown.command_id)).toMatchObject({ status: "failed", error_message: "Simulated agents do not support the command type 'collect_logs'" });
    await flushHub(siteId);
    expect((await commandAudit(ping.command_id)).map((a) => a.eventType))
      .toEqual(["command_queued", "command_delivered", "command_acknowledged", "command_completed"]);
    expect((await auditOfType(siteId, "command_failed")).map((a) => a.deviceId)).toEqual([sim.device_id]);
  });
});

describe("command queue: simulated devices act on their agent", () => {
  it("a restart command reboots a faulted agent healthy, and update_config starts its update", async () => {
    const { owner, siteId } = await siteWithOperator();
    const sim = await registerDevice(owner.token, siteId, { device_source: "simulated" });
    await setAgent(siteId, sim.device_id, { fault: "Payment terminal link lost", fault_at_ms: Date.now(), failure_rate: 0 });
    expect((await call(`/api/v1/devices/${sim.device_id}/health`, { token: owner.token })).json.health.status).toBe("unhealthy");

    const restart = (await queueCommand(owner.token, sim.device_id, { command_type: "restart" })).json;
    await hubSql(siteId, "UPDATE commands SET sim_due_ms = ? WHERE sim_due_ms IS NOT NULL", Date.now() - 1);
    await runAlarm(siteId);
    const done = (await call(`/api/v1/commands/${restart.command_id}`, { token: owner.token })).json;
    expect(done).toMatchObject({ status: "completed", result: { health_check: { status: "healthy" } } });
    expect((await agentRow(siteId, sim.device_id))).toMatchObject({ fault: null, boot_count: 1 });
    expect((await call(`/api/v1/devices/${sim.device_id}/health`, { token: owner.token })).json.health.status).toBe("healthy");

    const update = (await queueCommand(owner.token, sim.device_id, { command_type: "UPDATE_CONFIG", payload: { config_version: "7.1.0", settings: { tax_rate: 0.2 } } })).json;
    await hubSql(siteId, "UPDATE commands SET sim_due_ms = ? WHERE sim_due_ms IS NOT NULL", Date.now() - 1);
    await runAlarm(siteId);
    const applied = (await call(`/api/v1/commands/${update.command_id}`, { token: owner.token })).json;
    expect(applied).toMatchObject({ status: "completed", result: { applied_settings: { tax_rate: 0.2 }, agent: { status: "accepted" } } });
    const agent = await agentRow(siteId, sim.device_id);
    expect(agent.state).toBe("downloading");
    expect(JSON.parse(agent.plan!)).toMatchObject({ target_version: "7.1.0" });
  });
});
