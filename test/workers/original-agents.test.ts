import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db, unique } from "./helpers";
import { deviceHeaders, registerDevice, siteWithOperator } from "./device-helpers";

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
