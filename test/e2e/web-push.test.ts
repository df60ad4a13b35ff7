// End-to-end: Web Push from the built Worker to a push-service stand-in on loopback. The stand-in
// checks each request's VAPID JWT and decrypts its payload with the subscriber's private key, as a
// real push service and browser would. Plain-http loopback endpoints are allowed here only by the
// test-only PUSH_TEST_LOOPBACK_ENDPOINTS setting.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, type ApiCall } from "./http";
import { decryptMessage, newSubscriber, newVapidKeys, verifyVapid, type Subscriber } from "./web-push-service";

let service: RunningService;
let pushServer: Server;
let pushOrigin: string;
const subscribers = new Map<string, Subscriber>();
const received: { path: string; message: Record<string, unknown>; urgency: string | undefined }[] = [];
const failures: string[] = [];

beforeAll(async () => {
  pushServer = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const path = req.url ?? "";
      if (path.startsWith("/gone/")) {
        res.writeHead(410).end();
        return;
      }
      try {
        await verifyVapid(req.headers.authorization ?? null, `${pushOrigin}${path}`);
        if (req.headers["content-encoding"] !== "aes128gcm") throw new Error(`Content-Encoding ${req.headers["content-encoding"]}`);
        const plaintext = await decryptMessage(new Uint8Array(Buffer.concat(chunks)), subscribers.get(path)!);
        received.push({ path, message: JSON.parse(plaintext), urgency: req.headers.urgency as string | undefined });
        res.writeHead(201).end();
      } catch (error) {
        failures.push(String(error));
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => pushServer.listen(0, "127.0.0.1", resolve));
  pushOrigin = `http://127.0.0.1:${(pushServer.address() as AddressInfo).port}`;
  const vapid = await newVapidKeys();
  service = await startService({
    bindings: {
      VAPID_PUBLIC_KEY: vapid.publicKey, VAPID_PRIVATE_KEY: vapid.privateKey, VAPID_SUBJECT: "mailto:ops@example.com",
      PUSH_TEST_LOOPBACK_ENDPOINTS: "true",
    },
  });
});

afterAll(async () => {
  await service?.stop();
  await new Promise((resolve) => pushServer?.close(resolve));
});

const api = (path: string, call?: ApiCall) => callApi(service.url, path, call);

async function signedIn() {
  const email = `wp-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}@example.com`;
  const res = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } });
  expect(res.status).toBe(201);
  return res.json.data.access_token as string;
}

async function subscribeAt(token: string, path: string) {
  const subscriber = await newSubscriber();
  subscribers.set(path, subscriber);
  const res = await api("/api/v1/push/subscriptions", { method: "POST", token, body: { endpoint: `${pushOrigin}${path}`, keys: subscriber.keys } });
  expect(res.status).toBe(201);
  return res.json.subscription_id as string;
}

describe("Web Push over loopback", () => {
  it("delivers a notification the stand-in verifies and decrypts", async () => {
    const token = await signedIn();
    expect((await api("/api/v1/push/platforms", { token })).json.platforms.find((p: { id: string }) => p.id === "web_push").available).toBe(true);
    const id = await subscribeAt(token, "/push/browser-1");
    const res = await api(`/api/v1/push/subscriptions/${id}/test`, { method: "POST", token });
    expect(failures).toEqual([]);
    expect(res.json).toEqual({ subscription_id: id, status: "sent", http_status: 201, reason: null });
    expect(received).toEqual([{ path: "/push/browser-1", message: expect.objectContaining({ title: "Fleet Edge test notification" }), urgency: "normal" }]);
    expect((await api("/api/v1/push/subscriptions", { token })).json.subscriptions[0].last_sent_at).not.toBeNull();
  });

  it("removes a subscription the push service says is gone", async () => {
    const token = await signedIn();
    const id = await subscribeAt(token, "/gone/browser-2");
    const res = await api(`/api/v1/push/subscriptions/${id}/test`, { method: "POST", token });
    expect(res.json).toMatchObject({ status: "expired", http_status: 410 });
    expect((await api("/api/v1/push/subscriptions", { token })).json.total).toBe(0);
  });
});
