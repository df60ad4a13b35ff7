import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { and } from "drizzle-orm";
import { call, db, grantSiteRole, signup, unique } from "./helpers";
import { deviceHeaders, registerDevice, siteWithOperator } from "./device-helpers";
import { flushHub, hubSql, poll, queueCommand, report, runAlarm } from "./commands-helpers";

type Device = { device_id: string; api_key: string };
const permissionsPath = (deviceId: string) => `/api/v1/devices/device/${deviceId}/permissions`;
const setPermissions = (d: Device, permissions: Record<string, boolean>, target = d.device_id) =>
  call(permissionsPath(target), { method: "PATCH", headers: deviceHeaders(d.device_id, d.api_key), body: { permissions } });
const reportDna = (d: Device, body: Record<string, unknown>) =>
  call("/api/v1/agent/device-dna", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body });
const permissionAudit = (deviceId: string) =>
  db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.deviceId, deviceId), eq(schema.auditLogs.eventType, "permission_change"))).all();

/** What the original service's agents read from enrolment, DNA and signup answers. */
describe("envelopes the original agents parse", () => {
  it("bootstrap-provision and provision answer the flat fields and the same values under data", async () => {
    const { owner, siteId } = await siteWithOperator();
    const key = await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: owner.token });
    const enrolled = await call("/api/v1/devices/bootstrap-provision", {
      method: "POST", body: { site_id: siteId, bootstrap_key: key.json.bootstrap_key, device_name: "Till 1" },
    });
    expect(enrolled.status).toBe(201);
    expect(enrolled.json).toMatchObject({ status: "success", message: expect.any(String), site_id: siteId });
    const { device_id, api_key, epoch_id } = enrolled.json;
    expect(enrolled.json.data).toEqual({ device_id, api_key, site_id: siteId, epoch_id, created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });

    const provisioned = await call("/api/v1/devices/provision", { method: "POST", token: owner.token, body: { site_id: siteId, device_name: "Till 2" } });
    expect(provisioned.status).toBe(201);
    expect(provisioned.json.status).toBe("success");
    expect(provisioned.json.data).toMatchObject({ device_id: provisioned.json.device_id, api_key: provisioned.json.api_key, site_id: siteId });
    // The key under data is the one that works.
    const dna = await call("/api/v1/agent/device-dna", { method: "POST", headers: deviceHeaders(provisioned.json.data.device_id, provisioned.json.data.api_key), body: {} });
    expect(dna.status).toBe(200);
  });

  it("a claim answers the same envelope and takes the original's expected_device_identity", async () => {
    const { owner, siteId } = await siteWithOperator();
    const intent = await call(`/api/v1/sites/${siteId}/enrolment-intents`, { method: "POST", token: owner.token, body: { expected_device_identity: "SN-77" } });
    expect(intent.status).toBe(201);
    expect((await call(`/api/v1/sites/${siteId}/enrolment-intents/${intent.json.intent_id}`, { method: "PUT", token: owner.token, body: { status: "approved" } })).status).toBe(200);
    const claimed = await call(`/api/v1/enrolment-intents/${intent.json.intent_id}/claim`, {
      method: "POST", body: { claim_token: intent.json.claim_token, device_name: "Till 9", expected_device_identity: "SN-77" },
    });
    expect(claimed.status, claimed.text).toBe(201);
    const { device_id, api_key, epoch_id } = claimed.json;
    expect(claimed.json).toMatchObject({ status: "success", message: "Device claimed successfully", site_id: siteId });
    expect(claimed.json.data).toEqual({ device_id, api_key, site_id: siteId, epoch_id, created_at: expect.any(String) });
  });

  it("device-dna takes the original's fields and answers its envelope", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const res = await call("/api/v1/agent/device-dna", {
      method: "POST", headers: deviceHeaders(d.device_id, d.api_key),
      body: {
        device_id: d.device_id, site_id: siteId, device_name: "Till", device_type: "pos_terminal", mac_address: "00:11:22:33:44:55",
        os_details: "Android 14", local_ip: "10.0.0.9", wan_ip: "203.0.113.7", firmware_version: "3.1.0",
        peripherals: { printer: "Epson TM-T88", scanner: true }, device_source: "emulator", device_token: "fcm-token-abc",
      },
    });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      status: "success", message: expect.any(String), device_id: d.device_id,
      data: {
        device_id: d.device_id, site_id: siteId, lifecycle_state: "active", mac_address: "00:11:22:33:44:55", os_details: "Android 14",
        local_ip: "10.0.0.9", wan_ip: "203.0.113.7", peripherals: { printer: "Epson TM-T88", scanner: true }, created: false,
      },
    });
    const detail = await call(`/api/v1/devices/${d.device_id}`, { token: owner.token });
    expect(detail.json.dna).toMatchObject({ firmware: "3.1.0" });
    // An emulator calling in stays a real device; what it said is kept with its DNA.
    expect(detail.json.device_source).toBe("real");
    const row = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
    expect(row).toMatchObject({ pushToken: "fcm-token-abc", pushPlatform: "fcm", dna: { device_source: "emulator" } });
  });

  it("a heartbeat takes the original agent's status in capitals", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const beat = await call("/api/v1/agent/heartbeat", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: { device_id: d.device_id, timestamp: new Date().toISOString(), status: "ONLINE", site_id: siteId } });
    expect(beat.status).toBe(200);
    expect(beat.json.device_status).toBe("online");
    expect((await call("/api/v1/agent/heartbeat", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: { status: "SLEEPING" } })).status).toBe(422);
  });

  it("signup takes role in any letter case and never grants administrator rights", async () => {
    for (const role of ["admin", "Admin", "ADMIN", "client", "Client"]) {
      const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("role")}@example.com`, password: "secret1", role } });
      expect(res.status).toBe(201);
      const me = await call("/api/v1/auth/me", { token: res.json.data.access_token });
      expect(me.json.data.is_admin).toBe(false);
    }
    const bad = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("role")}@example.com`, password: "secret1", role: "root" } });
    expect(bad.status).toBe(422);
  });
});

describe("device consent", () => {
  it("the device reads and sets its own permissions within what its OS can do; another device is refused", async () => {
    const { owner, siteId } = await siteWithOperator();
    const phone = await registerDevice(owner.token, siteId);
    const other = await registerDevice(owner.token, siteId);
    await reportDna(phone, { os_details: "iOS 17.2" });

    const read = await call(permissionsPath(phone.device_id), { headers: deviceHeaders(phone.device_id, phone.api_key) });
    expect(read.status).toBe(200);
    expect(read.json).toMatchObject({ status: "success", data: { device_id: phone.device_id, configured: false } });
    expect(read.json.data.capabilities).toEqual({ root_access: false, command_execution: false, process_monitoring: false, filesystem_access: false, network_monitoring: true });

    const beyond = await setPermissions(phone, { root_access: true });
    expect(beyond.status).toBe(422);
    expect(beyond.json.detail[0]).toMatchObject({ loc: ["body", "permissions", "root_access"], msg: expect.stringMatching(/not supported by this device's OS/) });
    expect(await permissionAudit(phone.device_id)).toHaveLength(0);

    const set = await setPermissions(phone, { network_monitoring: false });
    expect(set.status).toBe(200);
    expect(set.json.data).toMatchObject({ configured: true, permissions: { network_monitoring: false } });

    expect((await call(permissionsPath(phone.device_id), { headers: deviceHeaders(other.device_id, other.api_key) })).status).toBe(403);
    expect((await setPermissions(other, { network_monitoring: false }, phone.device_id)).status).toBe(403);
    expect((await call(permissionsPath(phone.device_id))).status).toBe(401);
    expect((await setPermissions(phone, { sudo: true } as Record<string, boolean>)).status).toBe(422);

    const [audit] = await permissionAudit(phone.device_id);
    expect(audit).toMatchObject({ siteId, userId: null });
    expect(audit.eventMetadata).toMatchObject({ changed_by: "device", old_values: { network_monitoring: true }, new_values: { network_monitoring: false } });
  });

  it("an operator reads them with the viewer role and may only revoke", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const outsider = await signup();

    expect((await call(permissionsPath(d.device_id), { token: viewer.token })).status).toBe(200);
    expect((await call(permissionsPath(d.device_id), { token: outsider.token })).status).toBe(404);
    expect((await call(`/api/v1/devices/device/${d.device_id}/permissions/admin-override`, { method: "PATCH", token: viewer.token, body: { permissions: { root_access: false } } })).status).toBe(403);

    await setPermissions(d, { root_access: false });
    const grant = await call(`/api/v1/devices/device/${d.device_id}/permissions/admin-override`, { method: "PATCH", token: owner.token, body: { permissions: { root_access: true, command_execution: false } } });
    expect(grant.status).toBe(403);
    expect(grant.json).toMatchObject({ detail: expect.stringMatching(/Only the device owner can grant/), permissions: ["root_access"] });
    // The same through the plain PATCH: a user's PATCH is a revocation or nothing.
    expect((await call(permissionsPath(d.device_id), { method: "PATCH", token: owner.token, body: { permissions: { root_access: true } } })).status).toBe(403);
    expect((await call(permissionsPath(d.device_id), { token: owner.token })).json.data.permissions.command_execution).toBe(true);

    const revoke = await call(`/api/v1/devices/device/${d.device_id}/permissions/admin-override`, { method: "PATCH", token: owner.token, body: { permissions: { command_execution: false } } });
    expect(revoke.status).toBe(200);
    expect(revoke.json.data.permissions).toMatchObject({ command_execution: false, root_access: false, filesystem_access: true });
    const audits = await permissionAudit(d.device_id);
    expect(audits).toHaveLength(2);
    expect(audits.find((a) => a.userId === owner.id)?.eventMetadata).toMatchObject({ changed_by: "operator", new_values: { command_execution: false } });
  });

  it("refuses a command the owner has not granted with required and missing permissions", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    await reportDna(d, { os_details: "Ubuntu 22.04" });
    // Never set: not restricted beyond the OS.
    expect((await queueCommand(owner.token, d.device_id, { command_type: "restart" })).status).toBe(201);

    await setPermissions(d, { root_access: false, command_execution: true });
    const refused = await queueCommand(owner.token, d.device_id, { command_type: "REBOOT" });
    expect(refused.status).toBe(403);
    expect(refused.json).toEqual({ detail: expect.stringMatching(/root_access/), required_permissions: ["root_access"], missing_permissions: ["root_access"] });
    const asRoot = await queueCommand(owner.token, d.device_id, { command_type: "run_command", payload: { data: { command: "ls", run_as_root: true } } });
    expect(asRoot.status).toBe(403);
    expect(asRoot.json).toMatchObject({ required_permissions: ["root_access", "command_execution"], missing_permissions: ["root_access"] });
    expect((await queueCommand(owner.token, d.device_id, { command_type: "run_command", payload: { command: "ls" } })).status).toBe(201);
    expect((await queueCommand(owner.token, d.device_id, { command_type: "ping" })).status).toBe(201);
    // Refused commands were never queued.
    const listed = await call(`/api/v1/devices/${d.device_id}/commands`, { token: owner.token });
    expect(listed.json.commands.map((c: { command_type: string }) => c.command_type).sort()).toEqual(["ping", "restart", "run_command"]);
  });

  it("a job skips a device whose owner refused, with the reason, and still completes", async () => {
    const { owner, siteId } = await siteWithOperator();
    const willing = await registerDevice(owner.token, siteId);
    const unwilling = await registerDevice(owner.token, siteId);
    await setPermissions(unwilling, { root_access: false });
    const created = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "restart", priority: "high" } });
    expect(created.status).toBe(201);
    const jobId = created.json.job_id;
    await runAlarm(siteId);
    const [command] = (await poll(willing)).json.commands;
    expect(command.command_type).toBe("restart");
    expect((await poll(unwilling)).json.commands).toEqual([]);
    expect((await report(willing, command.command_id, { status: "completed" })).status).toBe(200);
    await flushHub(siteId);
    const job = (await call(`/api/v1/jobs/${jobId}`, { token: owner.token })).json;
    expect(job.status).toBe("completed");
    expect(job.counts).toEqual({ total: 2, succeeded: 1, failed: 0, cancelled: 0, pending: 0, skipped: 1 });
    expect(job.executions.find((e: { device_id: string }) => e.device_id === unwilling.device_id))
      .toMatchObject({ status: "skipped", command_id: null, error_message: expect.stringMatching(/has not granted.*root_access/) });
    expect(await hubSql(siteId, "SELECT status FROM job_targets WHERE job_id = ? AND device_id = ?", jobId, unwilling.device_id)).toEqual([{ status: "skipped" }]);
  });
});

describe("device consent on the other ways a command reaches a device", () => {
  it("an agent push and a restart of a real device are refused without the owner's grant", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    await setPermissions(d, { root_access: false, filesystem_access: false });
    const restart = await call(`/api/v1/devices/${d.device_id}/restart`, { method: "POST", token: owner.token, body: {} });
    expect(restart.status).toBe(403);
    expect(restart.json).toMatchObject({ required_permissions: ["root_access"], missing_permissions: ["root_access"] });
    const push = await call(`/api/v1/agents/${d.device_id}/push`, { method: "POST", token: owner.token, body: { action: "update_config", data: { config_url: "https://config.example.com/v2.json" } } });
    expect(push.status).toBe(403);
    expect(push.json).toMatchObject({ missing_permissions: ["filesystem_access"] });
    // A notification needs nothing.
    expect((await call(`/api/v1/agents/${d.device_id}/push`, { method: "POST", token: owner.token, body: { title: "Hello", body: "Till" } })).status).toBe(200);
    expect((await poll(d)).json.commands.map((c: { command_type: string }) => c.command_type)).toEqual(["notify"]);
  });
});

describe("what the original agents report about themselves", () => {
  it("log lines go to the error log with device and site; a device reads only its own, newest first", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const other = await registerDevice(owner.token, siteId);
    const post = (device: Device, body: Record<string, unknown>) => call("/api/v1/agent/logs", { method: "POST", headers: deviceHeaders(device.device_id, device.api_key), body });
    expect((await post(d, { device_id: d.device_id, message: "printer out of paper", level: "warn", category: "peripheral", context: { tray: 1 } })).status).toBe(200);
    expect((await post(d, { message: "sale failed", level: "critical" })).status).toBe(200);
    expect((await post(other, { message: "other till" })).status).toBe(200);
    expect((await post(d, { device_id: other.device_id, message: "forged" })).status).toBe(403);
    expect((await post(d, { message: "x".repeat(4001) })).status).toBe(422);

    const stored = await db().select().from(schema.errorLogs).where(eq(schema.errorLogs.errorMessage, "printer out of paper")).all();
    expect(stored.find((r) => (r.context as Record<string, unknown>).device_id === d.device_id)).toMatchObject({
      category: "device", severity: "warning", context: { device_id: d.device_id, site_id: siteId, device_category: "peripheral", tray: 1 },
    });

    const read = await call(`/api/v1/agent/${d.device_id}/logs`, { headers: deviceHeaders(d.device_id, d.api_key) });
    expect(read.status).toBe(200);
    expect(read.json.data.map((l: { error_message: string }) => l.error_message)).toEqual(["sale failed", "printer out of paper"]);
    expect(read.json.data[1]).toMatchObject({ category: "peripheral", severity: "warning", resolved: false });
    expect((await call(`/api/v1/agent/${d.device_id}/logs`, { headers: deviceHeaders(other.device_id, other.api_key) })).status).toBe(403);
    expect((await call(`/api/v1/agent/${d.device_id}/logs`)).status).toBe(401);
  });

  it("a device records device-side audit events only", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const post = (body: Record<string, unknown>) => call("/api/v1/agent/audit", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body });
    const stored = await post({ device_id: d.device_id, event_type: "peripheral_connected", description: "Scanner attached", metadata: { model: "DS2208" } });
    expect(stored.status).toBe(200);
    const row = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.id, stored.json.data.id)).get();
    expect(row).toMatchObject({ eventType: "peripheral_connected", deviceId: d.device_id, siteId, userId: null, eventMetadata: { model: "DS2208", reported_by: "device" } });
    for (const forged of ["permission_change", "login_success", "command_completed", "admin_action"]) {
      expect((await post({ event_type: forged, description: "forged" })).status).toBe(422);
    }
  });

  it("configuration history: the device reports, an operator with a role on the site reads it", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const change = {
      device_id: d.device_id, action: "update", parameter_name: "payment.gateway_timeout_ms", old_value: 3000, new_value: 5000, success: true,
      change_reason: "timeouts at peak", performance_before: { error_rate: 0.04 }, performance_after: { error_rate: 0.01 },
      was_rolled_back: false, timestamp: "2026-11-20T10:00:00Z",
    };
    const stored = await call("/api/v1/agent/config-history", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: change });
    expect(stored.status).toBe(200);
    expect(stored.json).toMatchObject({ status: "success", data: { parameter_name: "payment.gateway_timeout_ms", new_value: 5000, timestamp: "2026-11-20T10:00:00.000Z" } });
    const rolledBack = await call("/api/v1/agent/config-history", {
      method: "POST", headers: deviceHeaders(d.device_id, d.api_key),
      body: { action: "rollback", parameter_name: "payment.gateway_timeout_ms", old_value: 5000, new_value: 3000, was_rolled_back: true, rollback_reason: "printer stalls", rollback_success: true, timestamp: "2026-11-20T11:00:00Z" },
    });
    expect(rolledBack.status).toBe(200);
    expect((await call("/api/v1/agent/config-history", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: { ...change, timestamp: "yesterday" } })).status).toBe(422);

    const page = await call(`/api/v1/devices/${d.device_id}/config-history`, { token: owner.token });
    expect(page.status).toBe(200);
    expect(page.json).toMatchObject({ device_id: d.device_id, total: 2 });
    expect(page.json.changes.map((c: { action: string }) => c.action)).toEqual(["rollback", "update"]);
    expect(page.json.changes[0]).toMatchObject({ was_rolled_back: true, rollback_reason: "printer stalls", rollback_success: true });
    const outsider = await signup();
    expect((await call(`/api/v1/devices/${d.device_id}/config-history`, { token: outsider.token })).status).toBe(404);
  });

  it("push pending and ack serve the same delivery records as push send; another device's push is refused", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const other = await registerDevice(owner.token, siteId);
    const sent = await call("/api/v1/push/send", { method: "POST", token: owner.token, body: { device_id: d.device_id, title: "Price update", body: "New prices", priority: "normal" } });
    expect(sent.status, sent.text).toBe(201);
    const [target] = sent.json.results;

    const pending = await call("/api/v1/push/pending", { headers: deviceHeaders(d.device_id, d.api_key) });
    expect(pending.status).toBe(200);
    expect(pending.json).toEqual({ device_id: d.device_id, pushes: [expect.objectContaining({ message_id: target.command_id, status: "sent", payload: expect.objectContaining({ title: "Price update" }) })] });
    expect((await call("/api/v1/push/pending", { headers: deviceHeaders(other.device_id, other.api_key) })).json.pushes).toEqual([]);

    const forged = await call("/api/v1/push/ack", { method: "POST", headers: deviceHeaders(other.device_id, other.api_key), body: { message_id: target.command_id, status: "delivered" } });
    expect(forged.status).toBe(404);
    const acked = await call("/api/v1/push/ack", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: { message_id: target.command_id, device_id: d.device_id, status: "delivered" } });
    expect(acked.status).toBe(200);
    expect(acked.json).toEqual({ status: "acknowledged", message_id: target.command_id, delivery: "completed" });
    expect((await call("/api/v1/push/pending", { headers: deviceHeaders(d.device_id, d.api_key) })).json.pushes).toEqual([]);
    const read = await call(`/api/v1/push/${sent.json.push_id}`, { token: owner.token });
    expect(read.json.results[0]).toMatchObject({ status: "delivered", command_status: "completed" });
    expect((await call("/api/v1/push/ack", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: { message_id: target.command_id, status: "failed" } })).status).toBe(409);
  });

  it("rate-limits these calls per device with 429 and Retry-After", async () => {
    const { owner, siteId } = await siteWithOperator();
    const looping = await registerDevice(owner.token, siteId);
    let limited: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 80 && !limited; i++) {
      const res = await call("/api/v1/push/pending", { headers: deviceHeaders(looping.device_id, looping.api_key) });
      if (res.status === 429) limited = res;
    }
    expect(limited).toBeDefined();
    expect(Number(limited!.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
  });
});
