// End-to-end: the original service's device agent and POS emulator, replayed against the BUILT bundle
// over real HTTP in the order docs/original-agents.md describes (written from their documented
// behaviour): enrolment by claim and by bootstrap key, DNA, consent, a compressed minute of
// heartbeats, telemetry and command polls with a permission-gated command, logs, configuration
// history and push pending/ack. Each answer is read the way those clients read it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";

let service: RunningService;
let base: string;

beforeAll(async () => {
  service = await startService({ quiet: true });
  base = service.url;
});

afterAll(async () => {
  await service?.stop();
});

const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

type Answer = { status: number; body: any };
type Device = { device_id: string; api_key: string };

async function api(path: string, init: { method?: string; body?: unknown; token?: string; device?: Device } = {}): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (init.body !== undefined) headers["content-type"] = "application/json";
  if (init.token) headers.authorization = `Bearer ${init.token}`;
  if (init.device) Object.assign(headers, { "X-Device-ID": init.device.device_id, "X-API-Key": init.device.api_key });
  const response = await fetch(`${base}${path}`, { method: init.method ?? "GET", headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

/** An operator with a site, as the original's web frontend would set one up. */
async function operatorWithSite() {
  const email = `${unique("ops")}@example.com`;
  const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse", role: "Client" } });
  expect(signup.status).toBe(201);
  const token = signup.body.data.access_token as string;
  const siteId = unique("SITE");
  expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Store" } })).status).toBe(201);
  return { token, siteId };
}

/** The agent's command loop, once: permissions, pending (list or {commands}), local gate, ack, result. */
async function commandCycle(device: Device, handled: string[]) {
  const permissions = await api(`/api/v1/devices/device/${device.device_id}/permissions`, { device });
  expect(permissions.status).toBe(200);
  const granted: Record<string, boolean> = permissions.body.data.permissions;
  const pending = await api("/api/v1/devices/pending", { device });
  expect(pending.status).toBe(200);
  const commands: { command_id: string; command_type: string; payload: unknown }[] = Array.isArray(pending.body) ? pending.body : pending.body.commands;
  for (const command of commands) {
    if (command.command_type === "request_permission") continue;
    const allowed = command.command_type !== "health_check" || granted.command_execution;
    if (!allowed) {
      expect((await api(`/api/v1/devices/${command.command_id}/status`, { method: "PUT", device, body: { status: "failed", executed_at: new Date().toISOString(), result: { message: "permission denied" } } })).status).toBe(200);
      continue;
    }
    const ack = await api(`/api/v1/devices/${device.device_id}/commands/${command.command_id}/ack`, { method: "POST", device });
    expect(ack.status).toBe(200);
    const done = await api(`/api/v1/devices/${command.command_id}/status`, {
      method: "PUT", device,
      body: { status: "completed", executed_at: new Date().toISOString(), result: { message: "Diagnostics completed", tests: { network: "pass" }, healthy: true } },
    });
    expect(done.status).toBe(200);
    handled.push(command.command_type);
  }
}

describe("the original device agent and emulator against Fleet Edge", () => {
  it("the real agent: claim, DNA, heartbeat, telemetry and a status report in its logs", async () => {
    const { token, siteId } = await operatorWithSite();
    const intent = await api(`/api/v1/sites/${siteId}/enrolment-intents`, { method: "POST", token, body: { site_id: siteId, enrolment_method: "pre-provisioned", expires_in_hours: 48 } });
    expect(intent.status).toBe(201);
    expect((await api(`/api/v1/sites/${siteId}/enrolment-intents/${intent.body.intent_id}`, { method: "PUT", token, body: { status: "approved" } })).status).toBe(200);

    const claim = await api(`/api/v1/enrolment-intents/${intent.body.intent_id}/claim`, {
      method: "POST", body: { claim_token: intent.body.claim_token, device_name: "Till 1", device_type: "pos_terminal", os_details: "Ubuntu 22.04" },
    });
    expect(claim.status).toBe(201);
    const device: Device = { device_id: claim.body.device_id, api_key: claim.body.api_key };
    expect(claim.body.site_id).toBe(siteId);

    const dna = await api("/api/v1/agent/device-dna", {
      method: "POST", device,
      body: { device_id: device.device_id, site_id: siteId, device_name: "Till 1", device_type: "pos_terminal", mac_address: "00:11:22:33:44:55", os_details: "Ubuntu 22.04", local_ip: "10.0.0.5", wan_ip: "203.0.113.5", peripherals: { printer: "TM-T88" } },
    });
    expect(dna.status).toBe(200);
    expect(dna.body.status).toBe("success");
    expect(dna.body.data).toMatchObject({ device_id: device.device_id, site_id: siteId, lifecycle_state: "active" });

    expect((await api("/api/v1/agent/heartbeat", { method: "POST", device, body: { device_id: device.device_id, timestamp: new Date().toISOString(), status: "ONLINE", site_id: siteId } })).status).toBe(200);
    const telemetry = await api("/api/v1/agent/telemetry", {
      method: "POST", device,
      body: { device_id: device.device_id, timestamp: new Date().toISOString(), cpu_usage: 22.5, memory_usage: 48.1, disk_usage: 35, uptime_seconds: 3600, network_latency_ms: 8.2, collection_interval_seconds: 30, site_id: siteId, pos: { app: "running" } },
    });
    expect(telemetry.status).toBe(200);
    const report = await api("/api/v1/agent/logs", {
      method: "POST", device,
      body: { device_id: device.device_id, message: "status report", level: "info", category: "status", context: { hostname: "till-1", uptime_seconds: 3600, status: "online" } },
    });
    expect(report.status).toBe(200);
    expect(report.body.status).toBe("success");
  });

  it("the emulator: bootstrap enrolment, DNA, default consent, a minute of loops with a gated command, logs, config history, pushes", async () => {
    const { token, siteId } = await operatorWithSite();
    const key = await api(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token });
    expect(key.status).toBe(201);

    const provisioned = await api("/api/v1/devices/bootstrap-provision", {
      method: "POST", body: { site_id: siteId, bootstrap_key: key.body.bootstrap_key, device_name: "Emulated till", device_type: "pos_terminal", os_details: "Android 14", provisioning_source: "emulator" },
    });
    expect(provisioned.status).toBe(201);
    expect(provisioned.body.status).toBe("success");
    const { device_id, api_key, site_id } = provisioned.body.data;
    expect(site_id).toBe(siteId);
    const device: Device = { device_id, api_key };

    const dna = await api("/api/v1/agent/device-dna", {
      method: "POST", device,
      body: { device_id, site_id, device_name: "Emulated till", device_type: "pos_terminal", os_details: "Android 14", mac_address: "02:00:00:00:00:01", local_ip: "10.0.0.9", device_source: "emulator", device_token: "synthetic-fcm-token" },
    });
    expect(dna.status).toBe(200);
    expect(dna.body.data.device_id).toBe(device_id);

    // Default consent: Android cannot grant root access; the owner allows command execution.
    const consent = await api(`/api/v1/devices/device/${device_id}/permissions`, {
      method: "PATCH", device, body: { permissions: { root_access: false, command_execution: true, process_monitoring: true, filesystem_access: false, network_monitoring: true } },
    });
    expect(consent.status).toBe(200);
    expect(consent.body.data.permissions).toMatchObject({ root_access: false, command_execution: true, filesystem_access: false });

    // A compressed minute: six ticks of heartbeat, telemetry and command poll (10 s apart in the field).
    const handled: string[] = [];
    for (let tick = 0; tick < 6; tick++) {
      const beat = await api("/api/v1/agent/heartbeat", { method: "POST", device, body: { device_id, timestamp: new Date().toISOString() } });
      expect(beat.status).toBe(200);
      const sample = await api("/api/v1/agent/telemetry", {
        method: "POST", device,
        body: { device_id, cpu_usage: 20 + tick, memory_usage: 45, disk_usage: 33, network_latency_ms: 6, uptime_seconds: 600 + tick * 10, collection_interval_seconds: 15, timestamp: new Date().toISOString() },
      });
      expect(sample.status).toBe(200);
      if (tick === 2) {
        // The operator tries a restart (needs root_access, not granted) and a health check (granted).
        const restart = await api(`/api/v1/devices/${device_id}/commands`, { method: "POST", token, body: { command_type: "restart" } });
        expect(restart.status).toBe(403);
        expect(restart.body).toMatchObject({ required_permissions: ["root_access"], missing_permissions: ["root_access"] });
        expect((await api(`/api/v1/devices/${device_id}/commands`, { method: "POST", token, body: { command_type: "health_check", payload: {} } })).status).toBe(201);
      }
      await commandCycle(device, handled);
    }
    expect(handled).toEqual(["health_check"]);

    const log = await api("/api/v1/agent/logs", { method: "POST", device, body: { device_id, message: "High Latency: 612ms", level: "warning", category: "network", timestamp: new Date().toISOString() } });
    expect(log.status).toBe(200);
    const logs = await api(`/api/v1/agent/${device_id}/logs?limit=10`, { device });
    expect(logs.status).toBe(200);
    expect(logs.body.data[0]).toMatchObject({ error_message: "High Latency: 612ms", severity: "warning", category: "network" });

    const history = await api("/api/v1/agent/config-history", {
      method: "POST", device,
      body: { device_id, action: "update_pos_payment_config", parameter_name: "payment_config", old_value: { version: "1.0" }, new_value: { version: "1.1" }, success: true, performance_before: { latency_ms: 40 }, performance_after: { latency_ms: 32 }, was_rolled_back: false, timestamp: new Date().toISOString() },
    });
    expect(history.status).toBe(200);
    expect(history.body.status).toBe("success");
    const operatorView = await api(`/api/v1/devices/${device_id}/config-history`, { token });
    expect(operatorView.body.changes[0]).toMatchObject({ parameter_name: "payment_config", new_value: { version: "1.1" } });

    const audit = await api("/api/v1/agent/audit", { method: "POST", device, body: { device_id, event_type: "config_applied", description: "Payment config 1.1 applied", timestamp: new Date().toISOString() } });
    expect(audit.status).toBe(200);

    // Push polling: the operator sends, the emulator polls, answers delivered and logs it.
    const push = await api("/api/v1/push/send", { method: "POST", token, body: { device_id, title: "Configuration Update 1.2", body: `New configuration available for ${device_id}`, data: { config_version: "1.2" } } });
    expect(push.status).toBe(201);
    const pending = await api("/api/v1/push/pending", { device });
    expect(pending.status).toBe(200);
    expect(pending.body.device_id).toBe(device_id);
    const [message] = pending.body.pushes;
    expect(message).toMatchObject({ status: "sent", payload: expect.objectContaining({ title: "Configuration Update 1.2" }) });
    const ack = await api("/api/v1/push/ack", { method: "POST", body: { message_id: message.message_id, device_id, received_at: new Date().toISOString(), status: "delivered" }, device });
    expect(ack.status).toBe(200);
    expect(ack.body.status).toBe("acknowledged");
    expect((await api("/api/v1/agent/logs", { method: "POST", device, body: { device_id, message: `Push ${message.message_id} delivered`, level: "info", category: "push" } })).status).toBe(200);
    expect((await api("/api/v1/push/pending", { device })).body.pushes).toEqual([]);
  });
});
