// End-to-end: FCM HTTP v1 and APNs sends from the built Worker to loopback stand-ins that check
// what the vendors document: FCM's OAuth JWT-bearer grant (an RS256 assertion signed with the
// service account's key, for the firebase.messaging scope) and its messages:send body; APNs'
// ES256 provider token (kid, iss = team id) and its /3/device request headers and body. The base
// URLs point at loopback only through the test-only PUSH_TEST_*_BASE_URL settings.
import { generateKeyPairSync } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { decodeProtectedHeader, importSPKI, jwtVerify } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, type ApiCall } from "./http";

const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 });
const ec = generateKeyPairSync("ec", { namedCurve: "P-256" });
const pem = (key: { export: (o: { type: "pkcs8" | "spki"; format: "pem" }) => string | Buffer }, type: "pkcs8" | "spki") => String(key.export({ type, format: "pem" }));
const SERVICE_ACCOUNT = {
  type: "service_account", project_id: "fleet-test", private_key_id: "key-1", client_email: "push@fleet-test.iam.gserviceaccount.com",
  private_key: pem(rsa.privateKey, "pkcs8"), token_uri: "https://oauth2.googleapis.com/token",
};
const APNS = { keyId: "ABC123DEFG", teamId: "TEAM123456", topic: "com.example.till" };

let service: RunningService;
let vendor: Server;
let base: string;
const failures: string[] = [];
const tokenGrants: string[] = [];
const fcmMessages: Record<string, unknown>[] = [];
const apnsRequests: { token: string; headers: IncomingMessage["headers"]; body: Record<string, unknown> }[] = [];
let issuedAccessToken = "";

const read = (req: IncomingMessage) => new Promise<string>((resolve) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
});

async function handleFcmToken(body: string) {
  const form = new URLSearchParams(body);
  expect(form.get("grant_type")).toBe("urn:ietf:params:oauth:grant-type:jwt-bearer");
  const assertion = form.get("assertion")!;
  expect(decodeProtectedHeader(assertion)).toMatchObject({ alg: "RS256", kid: "key-1" });
  const { payload } = await jwtVerify(assertion, await importSPKI(pem(rsa.publicKey, "spki"), "RS256"), {
    issuer: SERVICE_ACCOUNT.client_email, audience: `${base}/token`,
  });
  expect(payload.scope).toBe("https://www.googleapis.com/auth/firebase.messaging");
  expect(payload.exp! - payload.iat!).toBeLessThanOrEqual(3600);
  tokenGrants.push(assertion);
  issuedAccessToken = `ya29.${tokenGrants.length}`;
  return { access_token: issuedAccessToken, expires_in: 3599, token_type: "Bearer" };
}

async function verifyApnsToken(authorization: string | undefined) {
  const jwt = /^bearer (.+)$/.exec(authorization ?? "")?.[1];
  expect(jwt).toBeDefined();
  expect(decodeProtectedHeader(jwt!)).toMatchObject({ alg: "ES256", kid: APNS.keyId });
  const { payload } = await jwtVerify(jwt!, await importSPKI(pem(ec.publicKey, "spki"), "ES256"), { issuer: APNS.teamId });
  expect(typeof payload.iat).toBe("number");
  return jwt!;
}

beforeAll(async () => {
  vendor = createServer(async (req, res) => {
    const body = await read(req);
    try {
      const path = req.url ?? "";
      if (path === "/token") {
        res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(await handleFcmToken(body)));
      } else if (path === "/v1/projects/fleet-test/messages:send") {
        expect(req.headers.authorization).toBe(`Bearer ${issuedAccessToken}`);
        const message = JSON.parse(body).message;
        fcmMessages.push(message);
        if (message.token === "fcm-gone") {
          res.writeHead(404, { "Content-Type": "application/json" })
            .end(JSON.stringify({ error: { code: 404, status: "NOT_FOUND", message: "Requested entity was not found.", details: [{ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", errorCode: "UNREGISTERED" }] } }));
        } else {
          res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ name: `projects/fleet-test/messages/${fcmMessages.length}` }));
        }
      } else if (path.startsWith("/3/device/")) {
        await verifyApnsToken(req.headers.authorization);
        const token = decodeURIComponent(path.slice("/3/device/".length));
        apnsRequests.push({ token, headers: req.headers, body: JSON.parse(body) });
        if (token === "apns-gone") res.writeHead(410, { "Content-Type": "application/json" }).end(JSON.stringify({ reason: "Unregistered", timestamp: Date.now() }));
        else res.writeHead(200, { "apns-id": "8f1c0a52-5e3b-4c0f-9d5e-0a1b2c3d4e5f" }).end();
      } else {
        res.writeHead(404).end();
      }
    } catch (error) {
      failures.push(String(error));
      res.writeHead(400, { "Content-Type": "application/json" }).end(JSON.stringify({ error: String(error) }));
    }
  });
  await new Promise<void>((resolve) => vendor.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(vendor.address() as AddressInfo).port}`;
  service = await startService({
    bindings: {
      FCM_SERVICE_ACCOUNT: JSON.stringify(SERVICE_ACCOUNT), PUSH_TEST_FCM_BASE_URL: base,
      APNS_KEY_ID: APNS.keyId, APNS_TEAM_ID: APNS.teamId, APNS_PRIVATE_KEY: pem(ec.privateKey, "pkcs8"), APNS_TOPIC: APNS.topic,
      PUSH_TEST_APNS_BASE_URL: base,
    },
  });
});

afterAll(async () => {
  await service?.stop();
  await new Promise((resolve) => vendor?.close(resolve));
});

const api = (path: string, call?: ApiCall) => callApi(service.url, path, call);

const unique = (prefix: string) => `${prefix}${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;

async function siteWithDevices(dnas: Record<string, unknown>[]) {
  const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("v")}@example.com`, password: "correct-horse" } });
  const token = signup.json.data.access_token as string;
  const siteId = unique("SITE-");
  expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Store" } })).status).toBe(201);
  const devices: string[] = [];
  for (const dna of dnas) {
    const d = await api(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token, body: { name: unique("Till "), device_type: "pos_terminal" } });
    expect(d.status).toBe(201);
    const reported = await api("/api/v1/agent/device-dna", { method: "POST", headers: { "X-Device-ID": d.json.device_id, "X-API-Key": d.json.api_key }, body: dna });
    expect(reported.status).toBe(200);
    devices.push(d.json.device_id);
  }
  return { token, devices };
}

describe("vendor push over loopback", () => {
  it("lists FCM and APNs as available once configured", async () => {
    const { token } = await siteWithDevices([]);
    const platforms = (await api("/api/v1/push/platforms", { token })).json.platforms;
    expect(platforms.filter((p: { available: boolean }) => p.available).map((p: { id: string }) => p.id).sort()).toEqual(["apns", "command_poll", "device_channel", "fcm"]);
  });

  it("sends through FCM HTTP v1 with a cached OAuth token, to the token from the device's DNA", async () => {
    const { token, devices: [android] } = await siteWithDevices([{ os_type: "Android", os_version: "14", device_token: "fcm-token-1" }]);
    const grantsBefore = tokenGrants.length;
    for (const title of ["First", "Second"]) {
      const res = await api("/api/v1/push/send", { method: "POST", token, body: { device_id: android, title, body: "Hello", data: { order: 42, note: "x" }, priority: "high", ttl_seconds: 600, platform: "fcm" } });
      expect(res.status).toBe(201);
      expect(res.json.results[0]).toMatchObject({ device_id: android, status: "queued", channel: "fcm", command_id: null, reason: null });
    }
    expect(failures).toEqual([]);
    // One token for both sends (the first send may have reused one from an earlier test).
    expect(tokenGrants.length - grantsBefore).toBeLessThanOrEqual(1);
    expect(tokenGrants.length).toBeGreaterThan(0);
    expect(fcmMessages.slice(-2)).toEqual(["First", "Second"].map((title) => ({
      token: "fcm-token-1",
      notification: { title, body: "Hello" },
      data: { order: "42", note: "x" },
      android: { priority: "HIGH", ttl: "600s" },
    })));
  });

  it("sends through APNs with one ES256 provider token reused across sends", async () => {
    const { token, devices: [iphone] } = await siteWithDevices([{ os_type: "iOS", device_token: "apns-token-1" }]);
    for (const title of ["One", "Two"]) {
      const res = await api("/api/v1/push/send", { method: "POST", token, body: { device_id: iphone, title, data: { order: 7 }, priority: "low", ttl_seconds: 120, platform: "apns" } });
      expect(res.json.results[0]).toMatchObject({ status: "queued", channel: "apns", reason: null });
    }
    expect(failures).toEqual([]);
    const [first, second] = apnsRequests.slice(-2);
    expect(first!.token).toBe("apns-token-1");
    expect(first!.headers).toMatchObject({ "apns-topic": APNS.topic, "apns-push-type": "alert", "apns-priority": "5" });
    const expiration = Number(first!.headers["apns-expiration"]);
    expect(Math.abs(expiration - (Math.floor(Date.now() / 1000) + 120))).toBeLessThan(30);
    expect(first!.body).toEqual({ order: 7, aps: { alert: { title: "One" } } });
    expect(second!.headers.authorization).toBe(first!.headers.authorization);
  });

  it("fails a target with the vendor's reason and drops a token the vendor says is gone", async () => {
    const { token, devices: [android, iphone, bare] } = await siteWithDevices([
      { os_type: "Android", device_token: "fcm-gone" }, { os_type: "iPadOS", device_token: "apns-gone" }, { os_type: "Linux" },
    ]);
    const fcm = await api("/api/v1/push/send", { method: "POST", token, body: { device_ids: [android, bare], title: "x", platform: "fcm" } });
    expect(fcm.json.results).toEqual([
      expect.objectContaining({ device_id: android, status: "failed", channel: "fcm", reason: expect.stringContaining("UNREGISTERED") }),
      expect.objectContaining({ device_id: bare, status: "failed", channel: null, reason: expect.stringContaining("no fcm token") }),
    ]);
    const apns = await api("/api/v1/push/send", { method: "POST", token, body: { device_id: iphone, title: "x", platform: "apns" } });
    expect(apns.json.results[0]).toMatchObject({ status: "failed", channel: "apns", reason: expect.stringContaining("Unregistered") });
    const db = await service.mf.getD1Database("DB");
    const rows = await db.prepare("SELECT device_id, push_token FROM devices WHERE device_id IN (?, ?)").bind(android, iphone).all();
    expect(rows.results.map((r) => r.push_token)).toEqual([null, null]);
    // With the token gone the next send fails at once, without calling the vendor.
    const before = apnsRequests.length;
    expect((await api("/api/v1/push/send", { method: "POST", token, body: { device_id: iphone, title: "x", platform: "apns" } })).json.results[0].reason)
      .toContain("no apns token");
    expect(apnsRequests.length).toBe(before);
  });
});
