import { describe, expect, it } from "vitest";
import { eq, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, createSite, db, grantSiteRole, signup, unique } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator, telemetry } from "./device-helpers";
import { auditOfType, flushHub, hub, hubSql, queueCommand } from "./commands-helpers";

const post = (path: string, token: string, body?: unknown, headers: Record<string, string> = {}) => call(path, { method: "POST", token, body, headers });
const rowsOf = async (table: string, deviceId: string) =>
  (await db().run(sql.raw(`SELECT count(*) AS n FROM ${table} WHERE device_id = '${deviceId}'`))).results[0] as { n: number };

async function liveDevice() {
  const { owner, siteId } = await siteWithOperator();
  const device = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
  expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
  return { owner, siteId, device };
}

describe("retire", () => {
  it("refuses the key at once, cancels open commands with the reason, forgets presence and keeps the device for history", async () => {
    const { owner, siteId, device } = await liveDevice();
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "ping" });
    expect(queued.status).toBe(201);

    const res = await post(`/api/v1/devices/${device.device_id}/retire`, owner.token, { reason: "Stolen from the counter" });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ action: "retire", lifecycle_state: "retired", cancelled_commands: [queued.json.command_id], reason: "Stolen from the counter" });

    const refused = await heartbeat(device.device_id, device.api_key);
    expect(refused.status).toBe(401);
    const command = await call(`/api/v1/commands/${queued.json.command_id}`, { token: owner.token });
    expect(command.json).toMatchObject({ status: "cancelled", error_message: expect.stringContaining("Stolen from the counter") });
    expect(await hubSql(siteId, "SELECT * FROM presence WHERE device_id = ?", device.device_id)).toEqual([]);

    const detail = await call(`/api/v1/devices/${device.device_id}`, { token: owner.token });
    expect(detail.json).toMatchObject({ lifecycle_state: "retired", epoch_id: expect.any(String) });
    expect(await auditOfType(siteId, "device_retired")).toHaveLength(1);
    const epochs = await db().select().from(schema.lifecycleEpochs).where(eq(schema.lifecycleEpochs.deviceId, device.device_id)).all();
    expect(epochs.every((e) => e.endedAt !== null)).toBe(true);
  });

  it("answers 409 from a state that does not allow it, and nothing changes", async () => {
    const { owner, device } = await liveDevice();
    expect((await post(`/api/v1/devices/${device.device_id}/retire`, owner.token)).status).toBe(200);
    for (const action of ["retire", "suspend", "resume", "rotate-key"]) {
      const res = await post(`/api/v1/devices/${device.device_id}/${action}`, owner.token);
      expect(res.status, action).toBe(409);
      expect(res.json.detail, action).toMatch(/retired/);
    }
    const patched = await call(`/api/v1/devices/${device.device_id}`, { method: "PATCH", token: owner.token, body: { name: "x" } });
    expect(patched.status).toBe(409);
    const transfer = await post(`/api/v1/devices/${device.device_id}/transfer`, owner.token, { target_site_id: await createSite(owner.token), reason: "x" });
    expect(transfer.status).toBe(409);
    expect(await auditOfType(device.site_id, "device_retired")).toHaveLength(1);
  });

  it("is idempotent with an Idempotency-Key: a retry answers the first answer and acts once; another request with the key is 422", async () => {
    const { owner, device } = await liveDevice();
    const key = { "Idempotency-Key": unique("k") };
    const first = await post(`/api/v1/devices/${device.device_id}/retire`, owner.token, { reason: "broken" }, key);
    const again = await post(`/api/v1/devices/${device.device_id}/retire`, owner.token, { reason: "broken" }, key);
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");
    expect(again.json).toEqual(first.json);
    expect(await auditOfType(device.site_id, "device_retired")).toHaveLength(1);
    const other = await post(`/api/v1/devices/${device.device_id}/retire`, owner.token, { reason: "other" }, key);
    expect(other.status).toBe(422);
  });

  it("needs the operator role: a viewer is 403 and the device stays active", async () => {
    const { owner, siteId, device } = await liveDevice();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    for (const [method, path] of [["POST", "retire"], ["POST", "reenrol"], ["POST", "transfer"], ["DELETE", ""]]) {
      const url = `/api/v1/devices/${device.device_id}${path ? `/${path}` : ""}${method === "DELETE" ? "?mode=purge&confirm=true" : ""}`;
      const res = await call(url, { method, token: viewer.token, body: method === "POST" ? { target_site_id: siteId, reason: "x" } : undefined });
      expect(res.status, path).toBe(403);
    }
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
  });
});

describe("re-enrol", () => {
  it("gives a retired (or wiped) device a new key and epoch; the old key stays refused", async () => {
    const { owner, device } = await liveDevice();
    await post(`/api/v1/devices/${device.device_id}/retire`, owner.token);
    const res = await post(`/api/v1/devices/${device.device_id}/reenrol`, owner.token, { reason: "Repaired" });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ action: "reenrol", lifecycle_state: "active", api_key: expect.any(String), epoch_id: expect.any(String) });
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(401);
    expect((await heartbeat(device.device_id, res.json.api_key)).status).toBe(200);
    const detail = await call(`/api/v1/devices/${device.device_id}`, { token: owner.token });
    expect(detail.json.epoch_id).toBe(res.json.epoch_id);
    expect(await auditOfType(device.site_id, "device_reenrolled")).toHaveLength(1);
  });

  it("a replayed re-enrolment never shows the key again", async () => {
    const { owner, device } = await liveDevice();
    const key = { "Idempotency-Key": unique("k") };
    const first = await post(`/api/v1/devices/${device.device_id}/reenrol`, owner.token, undefined, key);
    const again = await post(`/api/v1/devices/${device.device_id}/reenrol`, owner.token, undefined, key);
    expect(first.json.api_key).toEqual(expect.any(String));
    expect(again.json.api_key).toBeUndefined();
    expect(again.json.epoch_id).toBe(first.json.epoch_id);
    expect((await heartbeat(device.device_id, first.json.api_key)).status).toBe(200);
    const stored = await db().select().from(schema.deviceLifecycleRequests).where(eq(schema.deviceLifecycleRequests.deviceId, device.device_id)).all();
    expect(JSON.stringify(stored)).not.toContain(first.json.api_key);
  });
});

describe("transfer", () => {
  it("moves the device with a new key and epoch, cancels its open commands in the old hub and drops its metrics history there", async () => {
    const { owner, siteId, device } = await liveDevice();
    const target = await createSite(owner.token);
    const sample = { cpu_usage: 10, memory_usage: 20, disk_usage: 30 };
    expect((await telemetry(device.device_id, device.api_key, sample)).status).toBeLessThan(300);
    const queued = await queueCommand(owner.token, device.device_id, { command_type: "ping" });
    const twin = await call(`/api/v1/devices/${device.device_id}/twin`, { token: owner.token });
    expect((await call(`/api/v1/devices/${device.device_id}/twin/desired`, {
      method: "PATCH", token: owner.token, body: { locale: "fr-FR" }, headers: { "If-Match": twin.headers.get("ETag")! },
    })).status).toBe(200);

    const res = await post(`/api/v1/devices/${device.device_id}/transfer`, owner.token, { target_site_id: target, reason: "Moved to the new store" });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      action: "transfer", site_id: target, previous_site_id: siteId, lifecycle_state: "active",
      cancelled_commands: [queued.json.command_id], api_key: expect.any(String),
    });
    const command = await call(`/api/v1/commands/${queued.json.command_id}`, { token: owner.token });
    expect(command.json).toMatchObject({ status: "cancelled", error_message: expect.stringContaining(`transferred to site ${target}`) });
    expect(await hubSql(siteId, "SELECT * FROM metrics_history WHERE device_id = ?", device.device_id)).toEqual([]);
    expect(await hubSql(siteId, "SELECT * FROM presence WHERE device_id = ?", device.device_id)).toEqual([]);
    expect(await hubSql(siteId, "SELECT * FROM twins WHERE device_id = ?", device.device_id)).toEqual([]);
    // Its own desired document went with it: the new site's hub serves it.
    const moved = await call(`/api/v1/devices/${device.device_id}/twin`, { token: owner.token });
    expect(moved.status).toBe(200);
    expect(moved.json.desired).toEqual({ locale: "fr-FR" });

    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(401);
    expect((await heartbeat(device.device_id, res.json.api_key)).status).toBe(200);
    expect(await hubSql(target, "SELECT device_id FROM presence")).toEqual([{ device_id: device.device_id }]);

    const detail = await call(`/api/v1/devices/${device.device_id}`, { token: owner.token });
    expect(detail.json).toMatchObject({ site_id: target, epoch_id: res.json.epoch_id });
    expect((await call(`/api/v1/devices/sites/${siteId}/devices`, { token: owner.token })).json).toEqual([]);
    expect(await auditOfType(siteId, "device_transferred")).toHaveLength(1);
    expect(await auditOfType(target, "device_transferred")).toHaveLength(1);
  });

  it("a simulated device gets no key; its agent stops in the old site and starts in the new one", async () => {
    const { owner, siteId } = await siteWithOperator();
    const sim = await registerDevice(owner.token, siteId, { device_id: unique("SIM-"), device_source: "simulated" });
    const target = await createSite(owner.token);
    expect(await hubSql(siteId, "SELECT active FROM agents WHERE device_id = ?", sim.device_id)).toEqual([{ active: 1 }]);
    const res = await post(`/api/v1/devices/${sim.device_id}/transfer`, owner.token, { target_site_id: target, reason: "Demo moved" });
    expect(res.status).toBe(200);
    expect(res.json.api_key).toBeUndefined();
    expect(await hubSql(siteId, "SELECT * FROM agents WHERE device_id = ?", sim.device_id)).toEqual([]);
    expect(await hubSql(target, "SELECT active FROM agents WHERE device_id = ?", sim.device_id)).toEqual([{ active: 1 }]);
  });

  it("a suspended device moves suspended, and a re-enrolment makes it active", async () => {
    const { owner, device } = await liveDevice();
    await post(`/api/v1/devices/${device.device_id}/suspend`, owner.token);
    const moved = await post(`/api/v1/devices/${device.device_id}/transfer`, owner.token, { target_site_id: await createSite(owner.token), reason: "x" });
    expect(moved.json.lifecycle_state).toBe("suspended");
    expect((await heartbeat(device.device_id, moved.json.api_key)).status).toBe(403);
    const back = await post(`/api/v1/devices/${device.device_id}/reenrol`, owner.token);
    expect(back.json.lifecycle_state).toBe("active");
    expect((await heartbeat(device.device_id, back.json.api_key)).status).toBe(200);
  });

  it("a device moved through another isolate is looked up afresh after the old site's hub no longer knows it", async () => {
    const { owner, siteId, device } = await liveDevice();
    const target = await createSite(owner.token);
    // What a transfer made by another isolate leaves behind here: D1 and the hubs know, this isolate's cache does not.
    await db().update(schema.devices).set({ siteId: target }).where(eq(schema.devices.deviceId, device.device_id));
    await hub(siteId).deviceChanged(siteId, device.device_id);
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(401);
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
    expect(await hubSql(target, "SELECT device_id FROM presence")).toEqual([{ device_id: device.device_id }]);
  });

  it("needs the operator role on the target site too, and refuses its own site", async () => {
    const { owner, siteId, device } = await liveDevice();
    const other = await signup();
    const foreign = await createSite(other.token);
    const hidden = await post(`/api/v1/devices/${device.device_id}/transfer`, owner.token, { target_site_id: foreign, reason: "x" });
    expect(hidden.status).toBe(404);
    await grantSiteRole(other.token, foreign, owner, "viewer");
    const low = await post(`/api/v1/devices/${device.device_id}/transfer`, owner.token, { target_site_id: foreign, reason: "x" });
    expect(low.status).toBe(403);
    const same = await post(`/api/v1/devices/${device.device_id}/transfer`, owner.token, { target_site_id: siteId, reason: "x" });
    expect(same.status).toBe(409);
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
  });
});

describe("delete", () => {
  it("needs mode and confirm=true", async () => {
    const { owner, device } = await liveDevice();
    expect((await call(`/api/v1/devices/${device.device_id}?mode=purge`, { method: "DELETE", token: owner.token })).status).toBe(422);
    expect((await call(`/api/v1/devices/${device.device_id}?confirm=true`, { method: "DELETE", token: owner.token })).status).toBe(422);
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
  });

  it("archive keeps the device read-only with its key revoked; only a purge is allowed after", async () => {
    const { owner, device } = await liveDevice();
    const res = await call(`/api/v1/devices/${device.device_id}?mode=archive&confirm=true`, { method: "DELETE", token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ action: "archive", lifecycle_state: "archived" });
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(401);
    expect((await call(`/api/v1/devices/${device.device_id}`, { token: owner.token })).json.lifecycle_state).toBe("archived");
    expect((await post(`/api/v1/devices/${device.device_id}/reenrol`, owner.token)).status).toBe(409);
    expect((await queueCommand(owner.token, device.device_id, { command_type: "ping" })).status).toBe(409);
    expect((await call(`/api/v1/devices/${device.device_id}/audit-logs`, { token: owner.token })).status).toBe(200);
  });

  it("purge removes its rows in D1 and its state in the hub; the audit trail records it", async () => {
    const { owner, siteId, device } = await liveDevice();
    const id = device.device_id;
    await telemetry(id, device.api_key, { cpu_usage: 10, memory_usage: 20, disk_usage: 30 });
    const queued = await queueCommand(owner.token, id, { command_type: "ping" });
    const twin = await call(`/api/v1/devices/${id}/twin`, { token: owner.token });
    const desired = await call(`/api/v1/devices/${id}/twin/desired`, {
      method: "PATCH", token: owner.token, body: { receipt_printer: { paper: "58mm" } }, headers: { "If-Match": twin.headers.get("ETag")! },
    });
    expect(desired.status).toBe(200);
    expect((await rowsOf("device_twins", id)).n).toBe(1);
    await post(`/api/v1/devices/${id}/suspend`, owner.token);
    await flushHub(siteId);
    expect((await rowsOf("device_state_history", id)).n).toBeGreaterThan(0);
    expect((await rowsOf("command_index", id)).n).toBe(1);

    const res = await call(`/api/v1/devices/${id}?mode=purge&confirm=true`, { method: "DELETE", token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ action: "purge", lifecycle_state: "purged", cancelled_commands: [queued.json.command_id] });

    for (const table of ["devices", "lifecycle_epochs", "device_state_history", "health_checks", "device_metrics", "agents", "command_index", "job_executions", "device_twins"]) {
      expect((await rowsOf(table, id)).n, table).toBe(0);
    }
    for (const table of ["commands", "presence", "metrics_history", "metrics_state", "agents", "twins"]) {
      expect(await hubSql(siteId, `SELECT * FROM ${table} WHERE device_id = ?`, id), table).toEqual([]);
    }
    expect((await call(`/api/v1/devices/${id}`, { token: owner.token })).status).toBe(404);
    expect((await heartbeat(id, device.api_key)).status).toBe(401);
    expect(await auditOfType(siteId, "device_purged")).toHaveLength(1);
  });
});

describe("histories", () => {
  it("pages a device's audit events, jobs, errors and state history for a viewer", async () => {
    const { owner, siteId, device } = await liveDevice();
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    await post(`/api/v1/devices/${device.device_id}/suspend`, owner.token);
    await post(`/api/v1/devices/${device.device_id}/resume`, owner.token);
    await db().insert(schema.jobs).values({ jobId: unique("job-"), siteId, action: "restart", status: "completed" });
    const job = await db().select().from(schema.jobs).where(eq(schema.jobs.siteId, siteId)).get();
    await db().insert(schema.jobExecutions).values({ jobId: job!.jobId, deviceId: device.device_id, status: "completed" });
    await db().insert(schema.errorLogs).values({ category: "device", errorMessage: "Printer jam", context: { device_id: device.device_id } });
    await db().insert(schema.errorLogs).values({ category: "device", errorMessage: "Someone else's", context: { device_id: "OTHER" } });

    await flushHub(siteId);

    const audit = await call(`/api/v1/devices/${device.device_id}/audit-logs?limit=2`, { token: viewer.token });
    expect(audit.status).toBe(200);
    expect(audit.json.events.map((e: { event_type: string }) => e.event_type)).toEqual(["device_resumed", "device_suspended"]);
    expect(audit.json.total).toBeGreaterThanOrEqual(3);
    const last = await call(`/api/v1/devices/${device.device_id}/audit-logs?limit=2&offset=${audit.json.total - 1}`, { token: viewer.token });
    expect(last.json.events.map((e: { event_type: string }) => e.event_type)).toEqual(["device_registered"]);

    const jobs = await call(`/api/v1/devices/${device.device_id}/jobs`, { token: viewer.token });
    expect(jobs.json).toMatchObject({ total: 1, jobs: [{ job_id: job!.jobId, execution_status: "completed", job_status: "completed" }] });

    const errors = await call(`/api/v1/devices/${device.device_id}/error-logs`, { token: viewer.token });
    expect(errors.json).toMatchObject({ total: 1, errors: [{ error_message: "Printer jam" }] });

    const states = await call(`/api/v1/devices/${device.device_id}/state-history`, { token: viewer.token });
    expect(states.json.history.filter((h: { source: string }) => h.source === "lifecycle").map((h: { new_state: string }) => h.new_state))
      .toEqual(["active", "suspended"]);
  });
});

describe("the spec's device paths", () => {
  it("POST /api/v1/devices registers in the site named in the body, for an operator there", async () => {
    const { owner, siteId } = await siteWithOperator();
    const res = await post("/api/v1/devices", owner.token, { site_id: siteId, device_id: unique("POS-"), name: "Till 1" });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ site_id: siteId, api_key: expect.any(String) });
    expect((await heartbeat(res.json.device_id, res.json.api_key)).status).toBe(200);
    const outsider = await signup();
    expect((await post("/api/v1/devices", outsider.token, { site_id: siteId, name: "x" })).status).toBe(404);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await post("/api/v1/devices", viewer.token, { site_id: siteId, name: "x" })).status).toBe(403);
  });

  it("GET /api/v1/devices/sites lists the caller's sites with counts; /sites/{site_id} the site with its devices", async () => {
    const { owner, siteId, device } = await liveDevice();
    const second = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    await post(`/api/v1/devices/${second.device_id}/retire`, owner.token);
    const empty = await createSite(owner.token);
    await createSite((await signup()).token);

    const list = await call("/api/v1/devices/sites", { token: owner.token });
    expect(list.status).toBe(200);
    expect(list.json.sites.map((s: { site_id: string }) => s.site_id)).toEqual([siteId, empty]);
    expect(list.json.sites[0]).toMatchObject({ total_devices: 2, by_lifecycle_state: { active: 1, retired: 1, suspended: 0, archived: 0 } });
    expect(list.json.sites[0].by_status.online + list.json.sites[0].by_status.offline).toBe(2);
    expect(list.json.sites[1].total_devices).toBe(0);

    const one = await call(`/api/v1/devices/sites/${siteId}`, { token: owner.token });
    expect(one.status).toBe(200);
    expect(one.json.devices.map((d: { device_id: string }) => d.device_id)).toEqual([second.device_id, device.device_id]);
    expect((await call(`/api/v1/devices/sites/${unique("NOPE-")}`, { token: owner.token })).status).toBe(404);
  });
});
