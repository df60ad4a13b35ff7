import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db, signup } from "./helpers";
import { deviceHeaders, registerDevice, siteWithOperator } from "./device-helpers";

const vars = env as unknown as Record<string, string | undefined>;
const VENDOR_VARS = ["FCM_SERVICE_ACCOUNT", "APNS_KEY_ID", "APNS_TEAM_ID", "APNS_PRIVATE_KEY", "APNS_TOPIC", "APNS_ENVIRONMENT"] as const;
afterEach(() => { for (const name of VENDOR_VARS) vars[name] = undefined; });

const PEM = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";

async function platform(id: string) {
  const user = await signup();
  return (await call("/api/v1/push/platforms", { token: user.token })).json.platforms.find((p: { id: string }) => p.id === id);
}

describe("vendor platforms are truthful under each configuration", () => {
  it("fcm: not configured, misconfigured, configured", async () => {
    expect(await platform("fcm")).toMatchObject({ available: false, reason: "FCM is not configured: set FCM_SERVICE_ACCOUNT to the service account key (JSON)" });
    vars.FCM_SERVICE_ACCOUNT = "{not json";
    expect(await platform("fcm")).toMatchObject({ available: false, reason: expect.stringContaining("is not JSON") });
    vars.FCM_SERVICE_ACCOUNT = JSON.stringify({ project_id: "p", private_key: PEM });
    expect(await platform("fcm")).toMatchObject({ available: false, reason: "FCM is misconfigured: FCM_SERVICE_ACCOUNT lacks client_email" });
    vars.FCM_SERVICE_ACCOUNT = JSON.stringify({ project_id: "p", client_email: "push@p.iam.gserviceaccount.com", private_key: PEM });
    expect(await platform("fcm")).toMatchObject({ available: true });
  });

  it("apns: not configured, misconfigured, configured", async () => {
    vars.APNS_KEY_ID = "ABC123DEFG";
    expect(await platform("apns")).toMatchObject({ available: false, reason: "APNs is not configured: set APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_TOPIC" });
    Object.assign(vars, { APNS_TEAM_ID: "TEAM123456", APNS_PRIVATE_KEY: "not a key", APNS_TOPIC: "com.example.till" });
    expect(await platform("apns")).toMatchObject({ available: false, reason: expect.stringContaining("APNS_PRIVATE_KEY is not") });
    vars.APNS_PRIVATE_KEY = PEM;
    vars.APNS_ENVIRONMENT = "staging";
    expect(await platform("apns")).toMatchObject({ available: false, reason: expect.stringContaining("APNS_ENVIRONMENT") });
    vars.APNS_ENVIRONMENT = "sandbox";
    expect(await platform("apns")).toMatchObject({ available: true });
  });

  it("refuses a send on an unconfigured vendor with its reason, sending nothing", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const res = await call("/api/v1/push/send", { method: "POST", token: owner.token, body: { device_id: device.device_id, title: "x", platform: "apns" } });
    expect(res.status).toBe(422);
    expect(res.json.detail[0].msg).toContain("APNs is not configured");
  });
});

describe("device push tokens", () => {
  it("come from the DNA's device_token, for the platform named or the one the OS points to", async () => {
    const { owner, siteId } = await siteWithOperator();
    const tokenOf = async (dna: Record<string, unknown>) => {
      const d = await registerDevice(owner.token, siteId);
      expect((await call("/api/v1/agent/device-dna", { method: "POST", headers: deviceHeaders(d.device_id, d.api_key), body: dna })).status).toBe(200);
      const row = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, d.device_id)).get();
      return [row!.pushToken, row!.pushPlatform];
    };
    expect(await tokenOf({ os_type: "Android", device_token: "t-android" })).toEqual(["t-android", "fcm"]);
    expect(await tokenOf({ os_details: "iPadOS 17.4", device_token: "t-ipad" })).toEqual(["t-ipad", "apns"]);
    expect(await tokenOf({ os_type: "Linux", device_token: "t-linux", push_platform: "fcm" })).toEqual(["t-linux", "fcm"]);
    expect(await tokenOf({ os_type: "Windows", device_token: "t-windows" })).toEqual(["t-windows", null]);
    expect(await tokenOf({ os_type: "Android" })).toEqual([null, null]);
  });
});
