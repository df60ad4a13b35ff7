import { describe, expect, it } from "vitest";
import { eq, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, grantSiteRole, signup, unique } from "./helpers";
import { registerDevice, siteWithOperator } from "./device-helpers";
import { ack, auditOfType, poll, queueCommand, report, runCron } from "./commands-helpers";

const send = (token: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  call("/api/v1/push/send", { method: "POST", token, body, headers });
const sendBulk = (token: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  call("/api/v1/push/send-bulk", { method: "POST", token, body, headers });
const readPush = (token: string, pushId: string) => call(`/api/v1/push/${pushId}`, { token });

/** Every command a device has, newest first (what was queued for it, whoever asked). */
async function commandsOf(token: string, deviceId: string) {
  const res = await call(`/api/v1/devices/${deviceId}/commands`, { token });
  expect(res.status).toBe(200);
  return res.json.commands as { command_id: string; command_type: string; status: string; payload: Record<string, unknown> }[];
}

async function setup() {
  const { owner, siteId } = await siteWithOperator();
  const device = await registerDevice(owner.token, siteId);
  return { owner, siteId, device };
}

describe("POST /api/v1/push/send", () => {
  it("queues a notify command with the TTL for the device, which the poll delivers; the push's status follows the command", async () => {
    const { owner, siteId, device } = await setup();
    const res = await send(owner.token, {
      device_id: device.device_id, title: "Price update", body: "New prices from tomorrow", data: { list: "2026-Q3" }, priority: "high", ttl_seconds: 600,
    });
    expect(res.status, res.text).toBe(201);
    expect(res.json).toMatchObject({ kind: "send", created_by: owner.email, total: 1, counts: { delivered: 0, queued: 1, failed: 0 } });
    const [target] = res.json.results;
    expect(target).toMatchObject({
      device_id: device.device_id, site_id: siteId, notification: 0, status: "queued", channel: "command_poll", command_status: "pending", reason: null,
    });

    const command = (await call(`/api/v1/commands/${target.command_id}`, { token: owner.token })).json;
    expect(command).toMatchObject({
      command_type: "notify", status: "pending", device_id: device.device_id,
      payload: { title: "Price update", body: "New prices from tomorrow", data: { list: "2026-Q3" }, priority: "high" },
    });
    expect(Date.parse(command.expires_at) - Date.parse(command.created_at)).toBe(600_000);

    const polled = await poll(device);
    expect(polled.json.commands.map((c: { command_id: string }) => c.command_id)).toEqual([target.command_id]);
    const after = await readPush(owner.token, res.json.push_id);
    expect(after.status).toBe(200);
    expect(after.json.results[0]).toMatchObject({ status: "delivered", command_status: "delivered", channel: "command_poll" });
    expect(after.json.counts).toEqual({ delivered: 1, queued: 0, failed: 0 });

    await ack(device, target.command_id);
    await report(device, target.command_id, { status: "failed", error_message: "display broken" });
    const failed = await readPush(owner.token, res.json.push_id);
    expect(failed.json.results[0]).toMatchObject({ status: "failed", command_status: "failed", reason: "display broken" });
  });

  it("reaches every active device of a site: a simulated agent takes it at once, a suspended device is not a target", async () => {
    const { owner, siteId, device } = await setup();
    const simulated = await registerDevice(owner.token, siteId, { device_source: "simulated" });
    const suspended = await registerDevice(owner.token, siteId);
    expect((await call(`/api/v1/devices/${suspended.device_id}/suspend`, { method: "POST", token: owner.token })).status).toBe(200);

    const res = await send(owner.token, { site_id: siteId, title: "Closing early" });
    expect(res.status, res.text).toBe(201);
    const byDevice = Object.fromEntries(res.json.results.map((r: { device_id: string }) => [r.device_id, r]));
    expect(Object.keys(byDevice).sort()).toEqual([device.device_id, simulated.device_id].sort());
    expect(byDevice[device.device_id]).toMatchObject({ status: "queued", channel: "command_poll" });
    expect(byDevice[simulated.device_id]).toMatchObject({ status: "delivered", channel: "simulated_agent" });
    expect(await commandsOf(owner.token, suspended.device_id)).toEqual([]);
  });

  it("answers a named suspended device as a failed target with the reason, and still sends to the others", async () => {
    const { owner, siteId, device } = await setup();
    const suspended = await registerDevice(owner.token, siteId);
    await call(`/api/v1/devices/${suspended.device_id}/suspend`, { method: "POST", token: owner.token });
    const res = await send(owner.token, { device_ids: [device.device_id, suspended.device_id], title: "Hello" });
    expect(res.status, res.text).toBe(201);
    expect(res.json.results).toEqual([
      expect.objectContaining({ device_id: device.device_id, status: "queued" }),
      expect.objectContaining({ device_id: suspended.device_id, status: "failed", channel: null, command_id: null, reason: expect.stringContaining("suspended") }),
    ]);
  });

  it("refuses bad input with 422 and queues nothing", async () => {
    const { owner, device } = await setup();
    for (const body of [
      { title: "No target" },
      { device_id: device.device_id, site_id: "SITE-X", title: "Two targets" },
      { device_id: device.device_id },
      { device_id: device.device_id, title: "x", priority: "urgent" },
      { device_id: device.device_id, title: "x", ttl_seconds: 0 },
      { device_id: device.device_id, title: "x", surprise: true },
    ]) {
      const res = await send(owner.token, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
    expect(await commandsOf(owner.token, device.device_id)).toEqual([]);
  });
});

describe("push access", () => {
  it("refuses the whole send when one target is not allowed: 404 for a device on a site without a role, 403 below operator", async () => {
    const { owner, device } = await setup();
    const other = await siteWithOperator();
    const foreign = await registerDevice(other.owner.token, other.siteId);

    const hidden = await send(owner.token, { device_ids: [device.device_id, foreign.device_id], title: "Hi" });
    expect(hidden.status).toBe(404);
    expect(hidden.json.detail).toBe(`Device with ID '${foreign.device_id}' not found`);
    const unknown = await send(owner.token, { device_ids: [device.device_id, "NO-SUCH-DEVICE"], title: "Hi" });
    expect(unknown.status).toBe(404);
    expect(unknown.json.detail).toBe("Device with ID 'NO-SUCH-DEVICE' not found");
    expect(await commandsOf(owner.token, device.device_id)).toEqual([]);

    // A viewer of the foreign site is told 403, and nothing goes out to the allowed device either.
    await grantSiteRole(other.owner.token, other.siteId, owner, "viewer");
    const forbidden = await send(owner.token, { device_ids: [device.device_id, foreign.device_id], title: "Hi" });
    expect(forbidden.status).toBe(403);
    const bulk = await sendBulk(owner.token, { notifications: [{ device_id: device.device_id, title: "a" }, { site_id: other.siteId, title: "b" }] });
    expect(bulk.status).toBe(403);
    expect(await commandsOf(owner.token, device.device_id)).toEqual([]);
    expect(await commandsOf(other.owner.token, foreign.device_id)).toEqual([]);

    await grantSiteRole(other.owner.token, other.siteId, owner, "operator");
    expect((await send(owner.token, { device_ids: [device.device_id, foreign.device_id], title: "Hi" })).status).toBe(201);
  });

  it("answers a site target the caller has no role on as an unknown site, and a viewer's with 403", async () => {
    const { owner, siteId } = await setup();
    const outsider = await signup();
    const res = await send(outsider.token, { site_id: siteId, title: "Hi" });
    expect(res.status).toBe(404);
    expect(res.json.detail).toBe((await send(outsider.token, { site_id: "SITE-NOPE", title: "Hi" })).json.detail.replace("SITE-NOPE", siteId));
    await grantSiteRole(owner.token, siteId, outsider, "viewer");
    expect((await send(outsider.token, { site_id: siteId, title: "Hi" })).status).toBe(403);
    expect((await sendBulk(outsider.token, { notifications: [{ site_id: siteId, title: "Hi" }] })).status).toBe(403);
  });

  it("shows a push to members of its sites (its sender among them) and to administrators; anyone else gets 404", async () => {
    const { owner, siteId, device } = await setup();
    const sent = await send(owner.token, { device_id: device.device_id, title: "Hi" });
    const pushId = sent.json.push_id;
    expect((await readPush(owner.token, pushId)).status).toBe(200);
    expect((await readPush((await admin()).token, pushId)).status).toBe(200);
    const viewer = await signup();
    const notFound = await readPush(viewer.token, pushId);
    expect(notFound.status).toBe(404);
    expect(notFound.json.detail).toBe(`Push with ID '${pushId}' not found`);
    expect((await readPush(viewer.token, "no-such-push")).json.detail).toBe("Push with ID 'no-such-push' not found");
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await readPush(viewer.token, pushId)).json).toMatchObject({ push_id: pushId, total: 1 });
  });
});

describe("push idempotency", () => {
  it("answers a repeated Idempotency-Key with the push it created, queueing nothing again; another body is 422", async () => {
    const { owner, device } = await setup();
    const key = unique("key-");
    const body = { device_id: device.device_id, title: "Once", ttl_seconds: 120 };
    const first = await send(owner.token, body, { "Idempotency-Key": key });
    expect(first.status).toBe(201);
    expect(first.headers.get("Idempotent-Replayed")).toBeNull();
    const again = await send(owner.token, body, { "Idempotency-Key": key });
    expect(again.status).toBe(201);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");
    expect(again.json.push_id).toBe(first.json.push_id);
    expect(again.json.results[0].command_id).toBe(first.json.results[0].command_id);
    expect(await commandsOf(owner.token, device.device_id)).toHaveLength(1);

    const other = await send(owner.token, { ...body, title: "Twice" }, { "Idempotency-Key": key });
    expect(other.status).toBe(422);
    expect(await commandsOf(owner.token, device.device_id)).toHaveLength(1);
  });

  it("re-queues nothing when the first attempt queued its commands but was never recorded", async () => {
    const { owner, device } = await setup();
    const key = unique("key-");
    const body = { device_id: device.device_id, title: "Lost answer" };
    const first = await send(owner.token, body, { "Idempotency-Key": key });
    // As if the Worker had died between queueing and recording: the record is gone, the command is not.
    await db().delete(schema.pushDeliveries).where(eq(schema.pushDeliveries.pushId, first.json.push_id));
    const retry = await send(owner.token, body, { "Idempotency-Key": key });
    expect(retry.status).toBe(201);
    expect(retry.json.results[0].command_id).toBe(first.json.results[0].command_id);
    expect(await commandsOf(owner.token, device.device_id)).toHaveLength(1);
  });

  it("refuses a repeat from a caller who has since lost the role, as it would a first attempt", async () => {
    const { owner, siteId, device } = await setup();
    const colleague = await signup();
    await grantSiteRole(owner.token, siteId, colleague, "operator");
    const key = unique("key-");
    const body = { device_id: device.device_id, title: "Before" };
    expect((await send(colleague.token, body, { "Idempotency-Key": key })).status).toBe(201);
    await db().delete(schema.siteMemberships).where(eq(schema.siteMemberships.userId, colleague.id));
    expect((await send(colleague.token, body, { "Idempotency-Key": key })).status).toBe(404);
  });

  it("keeps one user's key apart from another's", async () => {
    const { owner, siteId, device } = await setup();
    const colleague = await signup();
    await grantSiteRole(owner.token, siteId, colleague, "operator");
    const key = unique("key-");
    const body = { device_id: device.device_id, title: "Same key" };
    const mine = await send(owner.token, body, { "Idempotency-Key": key });
    const theirs = await send(colleague.token, body, { "Idempotency-Key": key });
    expect(theirs.status).toBe(201);
    expect(theirs.json.push_id).not.toBe(mine.json.push_id);
    expect(await commandsOf(owner.token, device.device_id)).toHaveLength(2);
  });
});

describe("POST /api/v1/push/send-bulk", () => {
  it("sends each notification to its own targets and lists every target's result with its notification", async () => {
    const { owner, siteId, device } = await setup();
    const second = await registerDevice(owner.token, siteId);
    const res = await sendBulk(owner.token, {
      notifications: [{ device_id: device.device_id, title: "First" }, { device_ids: [device.device_id, second.device_id], title: "Second", priority: "low" }],
    });
    expect(res.status, res.text).toBe(201);
    expect(res.json).toMatchObject({ kind: "bulk", total: 3, counts: { queued: 3, delivered: 0, failed: 0 } });
    expect(res.json.results.map((r: { device_id: string; notification: number }) => [r.device_id, r.notification]))
      .toEqual([[device.device_id, 0], [device.device_id, 1], [second.device_id, 1]]);
    const titles = (await commandsOf(owner.token, device.device_id)).map((c) => c.payload.title).sort();
    expect(titles).toEqual(["First", "Second"]);
    expect((await readPush(owner.token, res.json.push_id)).json.total).toBe(3);
  });

  it("gives a device at its open-commands cap a failed result with the reason, and still sends to the others", async () => {
    const { owner, siteId, device } = await setup();
    const other = await registerDevice(owner.token, siteId);
    for (let i = 0; i < 50; i++) expect((await queueCommand(owner.token, device.device_id, { command_type: "ping" })).status).toBe(201);
    const res = await sendBulk(owner.token, { notifications: [{ device_ids: [device.device_id, other.device_id], title: "Full" }] });
    expect(res.status, res.text).toBe(201);
    expect(res.json.results).toEqual([
      expect.objectContaining({ device_id: device.device_id, status: "failed", command_id: null, reason: `Device ${device.device_id} already has 50 open commands` }),
      expect.objectContaining({ device_id: other.device_id, status: "queued" }),
    ]);
    expect(res.json.counts).toEqual({ delivered: 0, queued: 1, failed: 1 });
  });

  it("refuses more than 1,000 targets in all with 422 before looking at any of them", async () => {
    const { owner } = await setup();
    const ids = (prefix: string) => Array.from({ length: 501 }, (_, i) => `${prefix}-${i}`);
    const res = await sendBulk(owner.token, { notifications: [{ device_ids: ids("A"), title: "a" }, { device_ids: ids("B"), title: "b" }] });
    expect(res.status).toBe(422);
    expect(JSON.stringify(res.json.detail)).toContain("At most 1000 target devices");
  });

  it("refuses more than 1,000 devices when a site target expands beyond it", async () => {
    const owner = await admin();
    const siteId = await createSite(owner.token);
    // Registering a thousand devices over HTTP would take long; rows in D1 are what the expansion reads.
    const ids = Array.from({ length: 1001 }, () => unique("BULK-"));
    await db().run(sql`INSERT INTO devices (device_id, site_id, name) SELECT value, ${siteId}, 'Till' FROM json_each(${JSON.stringify(ids)})`);
    const res = await send(owner.token, { site_id: siteId, title: "Everyone" });
    expect(res.status).toBe(422);
    expect(JSON.stringify(res.json.detail)).toContain("At most 1000 target devices");
  });
});

describe("GET /api/v1/push/platforms", () => {
  it("lists every platform, available only where this service delivers, each with a reason", async () => {
    const { owner } = await setup();
    const res = await call("/api/v1/push/platforms", { token: owner.token });
    expect(res.status).toBe(200);
    const byId = Object.fromEntries(res.json.platforms.map((p: { id: string }) => [p.id, p]));
    expect(Object.keys(byId).sort()).toEqual(["apns", "command_poll", "device_channel", "fcm", "mqtt", "web_push", "wns"]);
    expect(res.json.total).toBe(7);
    for (const id of ["device_channel", "command_poll"]) expect(byId[id].available).toBe(true);
    for (const id of ["web_push", "fcm", "apns", "wns", "mqtt"]) expect(byId[id].available).toBe(false);
    for (const p of res.json.platforms) expect(p.reason.length).toBeGreaterThan(10);
  });

  it("sends on the queue's platforms and refuses an unavailable one with its reason, queueing nothing", async () => {
    const { owner, device } = await setup();
    expect((await send(owner.token, { device_id: device.device_id, title: "x", platform: "command_poll" })).status).toBe(201);
    const refused = await send(owner.token, { device_id: device.device_id, title: "x", platform: "fcm" });
    expect(refused.status).toBe(422);
    expect(refused.json.detail[0]).toMatchObject({ loc: ["body", "platform"], type: "platform_unavailable" });
    const bulk = await sendBulk(owner.token, { notifications: [{ device_id: device.device_id, title: "x" }, { device_id: device.device_id, title: "y", platform: "mqtt" }] });
    expect(bulk.status).toBe(422);
    expect(bulk.json.detail[0].loc).toEqual(["body", "notifications", 1, "platform"]);
    expect(await commandsOf(owner.token, device.device_id)).toHaveLength(1);
  });
});

describe("push records", () => {
  it("audit each send once per site, with what became of its targets", async () => {
    const { owner, siteId, device } = await setup();
    const sent = await send(owner.token, { device_id: device.device_id, title: "Audited" });
    const rows = (await auditOfType(siteId, "push_sent")).filter((r) => (r.eventMetadata as { push_id: string }).push_id === sent.json.push_id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ userId: owner.id, eventMetadata: { counts: { delivered: 0, queued: 1, failed: 0 }, channels: ["command_poll"] } });
  });

  it("are dropped by the cron once older than the commands they point to", async () => {
    const { owner, device } = await setup();
    const old = await send(owner.token, { device_id: device.device_id, title: "Old" });
    const recent = await send(owner.token, { device_id: device.device_id, title: "Recent" });
    await db().update(schema.pushDeliveries).set({ createdAt: new Date(Date.now() - 31 * 86_400_000).toISOString() })
      .where(eq(schema.pushDeliveries.pushId, old.json.push_id));
    await runCron();
    expect((await readPush(owner.token, old.json.push_id)).status).toBe(404);
    expect((await readPush(owner.token, recent.json.push_id)).status).toBe(200);
  });
});
