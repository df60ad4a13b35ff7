import { env } from "cloudflare:workers";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, db, grantSiteRole, signup } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { runAlarm, runCron } from "./commands-helpers";
import { installClock } from "./clock";
import { decryptMessage, newSubscriber, newVapidKeys, verifyVapid, type ReceivedPush, type Subscriber } from "../e2e/web-push-service";

const vars = env as unknown as Record<string, string | undefined>;
const VAPID_VARS = ["VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"] as const;
let vapid: { publicKey: string; privateKey: string };

beforeAll(async () => { vapid = await newVapidKeys(); });

function configure(values: Partial<Record<(typeof VAPID_VARS)[number], string>>) {
  for (const name of VAPID_VARS) vars[name] = values[name];
}
const configureValid = () => configure({ VAPID_PUBLIC_KEY: vapid.publicKey, VAPID_PRIVATE_KEY: vapid.privateKey, VAPID_SUBJECT: "mailto:ops@example.com" });
afterEach(() => configure({}));

const STAND_IN_ORIGIN = "https://push.stand-in.test";
const subscribe = (token: string, endpoint: string, keys: Subscriber["keys"]) =>
  call("/api/v1/push/subscriptions", { method: "POST", token, body: { endpoint, keys, expirationTime: null } });

const webPushPlatform = async (token: string) =>
  (await call("/api/v1/push/platforms", { token })).json.platforms.find((p: { id: string }) => p.id === "web_push");

/**
 * Runs `work` with the Worker's outgoing requests to the stand-in's origin answered by a push-service
 * stand-in (everything else goes out as usual): it checks the VAPID JWT, decrypts with the
 * subscriber's key, records what arrived and answers 201, or `gone` (410) for the endpoints listed.
 */
async function withPushService(subscribers: Map<string, Subscriber>, work: () => Promise<void>, gone = new Set<string>()) {
  const received: ReceivedPush[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init);
    if (!request.url.startsWith(STAND_IN_ORIGIN)) return realFetch(input, init);
    if (gone.has(request.url)) return new Response(null, { status: 410 });
    const { publicKey } = await verifyVapid(request.headers.get("Authorization"), request.url);
    expect(request.headers.get("Content-Encoding")).toBe("aes128gcm");
    expect(Number(request.headers.get("TTL"))).toBeGreaterThan(0);
    const message = JSON.parse(await decryptMessage(new Uint8Array(await request.arrayBuffer()), subscribers.get(request.url)!));
    received.push({ endpoint: request.url, headers: request.headers, message, vapidKey: publicKey });
    return new Response(null, { status: 201 });
  };
  try {
    await work();
  } finally {
    globalThis.fetch = realFetch;
  }
  return received;
}

describe("web_push platform", () => {
  it("is unavailable until the VAPID keys are set, says which are missing or wrong, and available once they are valid", async () => {
    const user = await signup();
    expect(await webPushPlatform(user.token)).toMatchObject({ available: false, reason: "Web Push is not configured: set VAPID_PUBLIC_KEY, VAPID_PRIVATE_KEY, VAPID_SUBJECT" });
    configure({ VAPID_PUBLIC_KEY: vapid.publicKey, VAPID_PRIVATE_KEY: "too-short", VAPID_SUBJECT: "mailto:ops@example.com" });
    expect(await webPushPlatform(user.token)).toMatchObject({ available: false, reason: expect.stringContaining("VAPID_PRIVATE_KEY is not") });
    configureValid();
    expect(await webPushPlatform(user.token)).toMatchObject({ available: true });
    expect((await call("/api/v1/push/vapid-public-key", { token: user.token })).json).toEqual({ public_key: vapid.publicKey });
  });
});

describe("Web Push subscriptions", () => {
  it("answers 503 naming what is missing while Web Push is not configured", async () => {
    const user = await signup();
    const res = await subscribe(user.token, `${STAND_IN_ORIGIN}/s/1`, (await newSubscriber()).keys);
    expect(res.status).toBe(503);
    expect(res.json.detail).toContain("VAPID_PUBLIC_KEY");
    expect((await call("/api/v1/push/vapid-public-key", { token: user.token })).status).toBe(503);
  });

  it("registers, refreshes, lists and deletes a user's own subscriptions only", async () => {
    configureValid();
    const user = await signup();
    const other = await signup();
    const endpoint = `${STAND_IN_ORIGIN}/s/${crypto.randomUUID()}`;
    const created = await subscribe(user.token, endpoint, (await newSubscriber()).keys);
    expect(created.status, created.text).toBe(201);
    expect(created.json).toMatchObject({ endpoint, last_sent_at: null });
    const again = await subscribe(user.token, endpoint, (await newSubscriber()).keys);
    expect(again.status).toBe(200);
    expect(again.json.subscription_id).toBe(created.json.subscription_id);

    expect((await call("/api/v1/push/subscriptions", { token: user.token })).json).toMatchObject({ total: 1, subscriptions: [{ endpoint }] });
    expect((await call("/api/v1/push/subscriptions", { token: other.token })).json).toEqual({ subscriptions: [], total: 0 });
    const id = created.json.subscription_id;
    expect((await call(`/api/v1/push/subscriptions/${id}`, { method: "DELETE", token: other.token })).status).toBe(404);
    expect((await call(`/api/v1/push/subscriptions/${id}/test`, { method: "POST", token: other.token })).status).toBe(404);
    expect((await call(`/api/v1/push/subscriptions/${id}`, { method: "DELETE", token: user.token })).status).toBe(204);
    expect((await call("/api/v1/push/subscriptions", { token: user.token })).json.total).toBe(0);
  });

  it("refuses plain-http endpoints and malformed keys with 422", async () => {
    configureValid();
    const user = await signup();
    const { keys } = await newSubscriber();
    expect((await subscribe(user.token, "http://127.0.0.1:9/push", keys)).status).toBe(422);
    expect((await subscribe(user.token, "https://user:pw@push.example/x", keys)).status).toBe(422);
    expect((await subscribe(user.token, `${STAND_IN_ORIGIN}/x`, { ...keys, p256dh: keys.auth })).status).toBe(422);
    expect((await subscribe(user.token, `${STAND_IN_ORIGIN}/x`, { ...keys, auth: "!!" })).status).toBe(422);
    expect((await call("/api/v1/push/subscriptions", { token: user.token })).json.total).toBe(0);
  });

  it("holds at most 20 subscriptions per user", async () => {
    configureValid();
    const user = await signup();
    const { keys } = await newSubscriber();
    for (let i = 0; i < 20; i++) expect((await subscribe(user.token, `${STAND_IN_ORIGIN}/cap/${i}`, keys)).status).toBe(201);
    expect((await subscribe(user.token, `${STAND_IN_ORIGIN}/cap/20`, keys)).status).toBe(409);
  });

  it("sends an encrypted test notification the subscriber can decrypt, signed for the push service's origin", async () => {
    configureValid();
    const user = await signup();
    const subscriber = await newSubscriber();
    const endpoint = `${STAND_IN_ORIGIN}/s/${crypto.randomUUID()}`;
    const id = (await subscribe(user.token, endpoint, subscriber.keys)).json.subscription_id;
    let answer: Awaited<ReturnType<typeof call>> | undefined;
    const received = await withPushService(new Map([[endpoint, subscriber]]), async () => {
      answer = await call(`/api/v1/push/subscriptions/${id}/test`, { method: "POST", token: user.token });
    });
    expect(answer!.json).toEqual({ subscription_id: id, status: "sent", http_status: 201, reason: null });
    expect(received).toHaveLength(1);
    expect(received[0]!.vapidKey).toBe(vapid.publicKey);
    expect(received[0]!.message).toMatchObject({ title: "Fleet Edge test notification", data: { kind: "test" } });
  });
});

describe("device-offline notifications", () => {
  it("tells subscribed users who can view the site, once, when a device goes offline; removes a subscription the push service says is gone", async () => {
    configureValid();
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId, { name: "Till 4" });
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const outsider = await signup();

    const subscribers = new Map<string, Subscriber>();
    const endpointOf = async (token: string) => {
      const endpoint = `${STAND_IN_ORIGIN}/s/${crypto.randomUUID()}`;
      const subscriber = await newSubscriber();
      subscribers.set(endpoint, subscriber);
      expect((await subscribe(token, endpoint, subscriber.keys)).status).toBe(201);
      return endpoint;
    };
    const viewerEndpoint = await endpointOf(viewer.token);
    const outsiderEndpoint = await endpointOf(outsider.token);
    const goneEndpoint = await endpointOf(owner.token);
    // Administrators can view every site; make sure no other test's administrator is left subscribed.
    await db().delete(schema.pushSubscriptions).where(eq(schema.pushSubscriptions.userId, (await admin()).id));

    // The first run only marks where reading starts, so earlier history is never announced.
    await withPushService(subscribers, () => runCron());
    const clock = await installClock(siteId);
    expect((await heartbeat(device.device_id, device.api_key, { heartbeat_interval_s: 10 })).status).toBe(200);
    clock.advance(31_000);
    await runAlarm(siteId);

    const gone = new Set([goneEndpoint]);
    const received = await withPushService(subscribers, () => runCron(), gone);
    const reached = received.map((r) => r.endpoint);
    expect(reached).toContain(viewerEndpoint);
    expect(reached).not.toContain(outsiderEndpoint);
    const toViewer = received.find((r) => r.endpoint === viewerEndpoint)!;
    expect(toViewer.message).toMatchObject({
      title: "Device offline", body: `Till 4 (${device.device_id}) at site ${siteId} went offline`,
      data: { kind: "device_offline", site_id: siteId, device_ids: [device.device_id] },
    });
    expect(toViewer.headers.get("Urgency")).toBe("high");
    // The push service said the owner's subscription is gone: it is removed.
    expect(await db().select().from(schema.pushSubscriptions).where(eq(schema.pushSubscriptions.endpoint, goneEndpoint)).all()).toEqual([]);

    // Nothing new: the next run sends nothing.
    expect(await withPushService(subscribers, () => runCron())).toEqual([]);
  });
});
