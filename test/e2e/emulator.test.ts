// End-to-end: the device emulator (emulator/, bundled by scripts/lib/emulator.mjs) against the BUILT
// Worker bundle served by workerd. Emulated devices enrol with the site's bootstrap key, go online,
// and receive and complete a job; intervals are shortened with the emulator's own options.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, type ApiCall } from "./http";
import { loadEmulator } from "../../scripts/lib/emulator.mjs";

let service: RunningService;
let base: string;

beforeAll(async () => {
  service = await startService({ quiet: true, assets: false });
  base = service.url;
});

afterAll(async () => {
  await service?.stop();
});

const api = (path: string, call?: ApiCall) => callApi(base, path, call);

async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe("the device emulator against the built service", () => {
  it("enrols N devices with the bootstrap key, brings them online, and completes a job on every one exactly once", async () => {
    const DEVICES = 4;
    const email = `emulator-${Date.now()}@example.com`;
    const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "emulator-password" } });
    expect(signup.status).toBe(201);
    const token = signup.json.data.access_token as string;
    const siteId = `EMU-${Date.now().toString(36).toUpperCase()}`;
    expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Emulated store" } })).status).toBe(201);
    const key = await api(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token });
    expect(key.status).toBe(201);

    const { startFleet } = await loadEmulator();
    const fleet = startFleet({
      url: base, siteId, devices: DEVICES, enrolment: { kind: "bootstrap", bootstrapKey: key.json.bootstrap_key },
      cadence: { heartbeatS: 2, telemetryS: 2, pollS: 1 }, updateFailureRate: 0, namePrefix: "till",
    });
    try {
      await until("every device online", async () => fleet.stats.enrolled === DEVICES && fleet.online() === DEVICES);
      const list = await until("the site's device list to show them online", async () => {
        const res = await api(`/api/v1/devices/sites/${siteId}/devices`, { token });
        return res.json.length === DEVICES && res.json.every((d: { status: string }) => d.status === "online") && res.json;
      });
      expect(list.map((d: { name: string }) => d.name).sort()).toEqual(Array.from({ length: DEVICES }, (_, i) => `till-${i + 1}`).sort());
      const dna = await api(`/api/v1/devices/${list[0].device_id}`, { token });
      expect(dna.json.dna.hostname).toBe(list[0].name);

      const job = await api(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token, body: { action: "update_config", config_version: "2026.11.1" } });
      expect(job.status).toBe(201);
      const done = await until("the job to complete", async () => {
        const res = await api(`/api/v1/jobs/${job.json.job_id}`, { token });
        return ["completed", "failed", "timeout"].includes(res.json.status) && res.json;
      });
      expect(done.status).toBe("completed");
      expect(fleet.stats.commands).toMatchObject({ received: DEVICES, completed: DEVICES, failed: 0, executedTwice: 0 });
      expect([...fleet.stats.byStatus.keys()].filter((status) => status === "network" || Number(status) >= 500)).toEqual([]);
    } finally {
      await fleet.stop();
    }
  });

  it("in channel mode, enrols N devices over HTTP, brings them online on the device channel and completes a job sent on it", async () => {
    const DEVICES = 3;
    const email = `emulator-channel-${Date.now()}@example.com`;
    const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "emulator-password" } });
    const token = signup.json.data.access_token as string;
    const siteId = `EMU-CH-${Date.now().toString(36).toUpperCase()}`;
    expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Channel store" } })).status).toBe(201);
    const key = await api(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token });

    const { startFleet } = await loadEmulator();
    // Polls would come every second if the devices were on HTTP; on the channel there are none.
    const fleet = startFleet({
      url: base, siteId, devices: DEVICES, enrolment: { kind: "bootstrap", bootstrapKey: key.json.bootstrap_key },
      cadence: { heartbeatS: 2, telemetryS: 2, pollS: 1 }, updateFailureRate: 0, restartS: 1, namePrefix: "lane", mode: "channel",
    });
    try {
      await until("every device online on its channel", async () => fleet.stats.enrolled === DEVICES && fleet.online() === DEVICES && fleet.onChannel() === DEVICES);
      await until("the site's device list to show them online", async () => {
        const res = await api(`/api/v1/devices/sites/${siteId}/devices`, { token });
        return res.json.length === DEVICES && res.json.every((d: { status: string }) => d.status === "online");
      });
      await until("telemetry sent on the channel", async () => (fleet.stats.latencySummary().telemetry?.count ?? 0) >= DEVICES);

      const job = await api(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token, body: { action: "update_config", config_version: "2026.11.2" } });
      expect(job.status).toBe(201);
      const done = await until("the job to complete", async () => {
        const res = await api(`/api/v1/jobs/${job.json.job_id}`, { token });
        return ["completed", "failed", "timeout"].includes(res.json.status) && res.json;
      });
      expect(done.status).toBe("completed");
      expect(fleet.stats.commands).toMatchObject({ received: DEVICES, completed: DEVICES, failed: 0, executedTwice: 0 });
      let calls = fleet.stats.latencySummary();
      expect(calls.poll).toBeUndefined();
      expect(calls.channel.count).toBe(DEVICES);
      expect(calls.ack.count).toBe(DEVICES);
      expect(calls.report.count).toBe(DEVICES);

      // A restart sent on the channel: the device closes it, stays down for --restart-s, boots and opens a new one.
      const restarted = fleet.devices[0];
      const restart = await api(`/api/v1/devices/${restarted.deviceId}/commands`, { method: "POST", token, body: { command_type: "restart" } });
      expect(restart.status).toBe(201);
      await until("the restart to complete", async () => {
        const res = await api(`/api/v1/commands/${restart.json.command_id}`, { token });
        return res.json.status === "completed";
      });
      await until("the restarted device back on a new channel", async () => fleet.stats.latencySummary().channel.count === DEVICES + 1 && restarted.channel && restarted.online);
      calls = fleet.stats.latencySummary();
      expect(calls.dna.count).toBe(DEVICES + 1);
      expect(calls.poll).toBeUndefined();
      expect([...fleet.stats.byStatus.keys()].filter((status) => status === "network" || Number(status) >= 400)).toEqual([]);
    } finally {
      await fleet.stop();
    }
    expect(fleet.onChannel()).toBe(0);
  });

  it("enrols with an operator's login by creating and claiming enrolment intents", async () => {
    const email = `emulator-operator-${Date.now()}@example.com`;
    const password = "emulator-password";
    const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password } });
    const token = signup.json.data.access_token as string;
    const siteId = `EMU-OP-${Date.now().toString(36).toUpperCase()}`;
    expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Operator-enrolled store" } })).status).toBe(201);

    const { startFleet } = await loadEmulator();
    const fleet = startFleet({ url: base, siteId, devices: 2, enrolment: { kind: "operator", email, password }, cadence: { heartbeatS: 2, telemetryS: 2, pollS: 2 } });
    try {
      await until("both devices online", async () => fleet.stats.enrolled === 2 && fleet.online() === 2);
      const intents = await api(`/api/v1/sites/${siteId}/enrolment-intents`, { token });
      expect(intents.json.intents.map((i: { status: string }) => i.status)).toEqual(["consumed", "consumed"]);
      const list = await api(`/api/v1/devices/sites/${siteId}/devices`, { token });
      expect(list.json.map((d: { enrollment_method: string }) => d.enrollment_method)).toEqual(["pre-provisioned", "pre-provisioned"]);
    } finally {
      await fleet.stop();
    }
  });
});
