import { and, asc, desc, eq, gt, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { deviceStateHistory, devices, pushNotifierCursor, pushSubscriptions } from "../db/schema";
import { ApiError, conflict, notFound, unprocessable } from "../lib/errors";
import { currentDate } from "../lib/clock";
import { encryptPayload, fromBase64url, vapidAuthorization, vapidKeyProblem, type VapidKeys } from "../lib/web-push";

/** Subscriptions one user may hold (browsers and devices they sign in on). */
export const MAX_SUBSCRIPTIONS_PER_USER = 20;

export type SubscriptionRow = typeof pushSubscriptions.$inferSelect;

/** What a browser's PushSubscription.toJSON() gives, as checked by the route. */
export interface SubscriptionInput {
  endpoint: string;
  keys: { p256dh: string; auth: string };
}

export interface WebPushMessage {
  title: string;
  body: string;
  data?: Record<string, unknown>;
  /** RFC 8030 urgency: very-low, low, normal or high. */
  urgency?: "very-low" | "low" | "normal" | "high";
  /** Seconds the push service may hold the message for an offline browser. */
  ttlSeconds?: number;
}

export type WebPushSetup = { ok: true; keys: VapidKeys } | { ok: false; reason: string };

/** The VAPID settings, or why Web Push cannot be used with the ones there are. */
export function webPushSetup(env: Env): WebPushSetup {
  const { VAPID_PUBLIC_KEY: publicKey, VAPID_PRIVATE_KEY: privateKey, VAPID_SUBJECT: subject } = env;
  const missing = [["VAPID_PUBLIC_KEY", publicKey], ["VAPID_PRIVATE_KEY", privateKey], ["VAPID_SUBJECT", subject]]
    .filter(([, value]) => !value).map(([name]) => name);
  if (missing.length) return { ok: false, reason: `Web Push is not configured: set ${missing.join(", ")}` };
  const keys = { publicKey: publicKey!, privateKey: privateKey!, subject: subject! };
  const problem = vapidKeyProblem(keys);
  return problem ? { ok: false, reason: `Web Push is misconfigured: ${problem}` } : { ok: true, keys };
}

export function requireWebPush(env: Env): VapidKeys {
  const setup = webPushSetup(env);
  if (!setup.ok) throw new ApiError(503, setup.reason);
  return setup.keys;
}

/**
 * Whether a push endpoint may be called: HTTPS only. Plain http to 127.0.0.1 only when the
 * test-only setting allows it, so a deployed service never posts payloads in the clear.
 */
export function endpointProblem(env: Env, endpoint: string): string | undefined {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return "endpoint is not a URL";
  }
  if (url.username || url.password) return "endpoint must not carry credentials";
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:" && url.hostname === "127.0.0.1" && env.PUSH_TEST_LOOPBACK_ENDPOINTS === "true") return undefined;
  return "endpoint must be an https URL";
}

const subscriptionNotFound = (id: string) => notFound(`Subscription with ID '${id}' not found`);

/** Registers (or, for an endpoint the user already has, refreshes the keys of) a subscription. */
export async function registerSubscription(env: Env, db: Db, user: AuthUser, input: SubscriptionInput): Promise<{ subscription: SubscriptionRow; created: boolean }> {
  requireWebPush(env);
  const problem = endpointProblem(env, input.endpoint);
  if (problem) throw unprocessable([{ loc: ["body", "endpoint"], msg: problem, type: "value_error" }]);
  const existing = await db.select().from(pushSubscriptions)
    .where(and(eq(pushSubscriptions.userId, user.id), eq(pushSubscriptions.endpoint, input.endpoint))).get();
  if (existing) {
    const [updated] = await db.update(pushSubscriptions).set({ p256dh: input.keys.p256dh, auth: input.keys.auth })
      .where(eq(pushSubscriptions.subscriptionId, existing.subscriptionId)).returning();
    return { subscription: updated!, created: false };
  }
  const { n } = (await db.select({ n: sql<number>`count(*)` }).from(pushSubscriptions).where(eq(pushSubscriptions.userId, user.id)).get())!;
  if (n >= MAX_SUBSCRIPTIONS_PER_USER) throw conflict(`At most ${MAX_SUBSCRIPTIONS_PER_USER} subscriptions per user: delete one first`);
  const [subscription] = await db.insert(pushSubscriptions).values({
    subscriptionId: crypto.randomUUID(), userId: user.id, endpoint: input.endpoint, p256dh: input.keys.p256dh, auth: input.keys.auth,
    createdAt: currentDate().toISOString(),
  }).returning();
  return { subscription: subscription!, created: true };
}

export const listSubscriptions = (db: Db, user: AuthUser) =>
  db.select().from(pushSubscriptions).where(eq(pushSubscriptions.userId, user.id)).orderBy(desc(pushSubscriptions.createdAt)).all();

/** One of the user's own subscriptions; anyone else's reads as unknown. */
export async function ownSubscription(db: Db, user: AuthUser, id: string): Promise<SubscriptionRow> {
  const row = await db.select().from(pushSubscriptions)
    .where(and(eq(pushSubscriptions.subscriptionId, id), eq(pushSubscriptions.userId, user.id))).get();
  if (!row) throw subscriptionNotFound(id);
  return row;
}

export async function deleteSubscription(db: Db, user: AuthUser, id: string) {
  const row = await ownSubscription(db, user, id);
  await db.delete(pushSubscriptions).where(eq(pushSubscriptions.subscriptionId, row.subscriptionId));
}

export interface WebPushOutcome {
  status: "sent" | "expired" | "failed";
  http_status: number | null;
  reason: string | null;
}

/**
 * Encrypts and posts one message to one subscription. A push service answering 404 or 410 says the
 * subscription is gone for good: it is removed. Never throws for the push service's answers.
 */
export async function sendWebPush(env: Env, db: Db, keys: VapidKeys, subscription: SubscriptionRow, message: WebPushMessage): Promise<WebPushOutcome> {
  const problem = endpointProblem(env, subscription.endpoint);
  if (problem) return { status: "failed", http_status: null, reason: problem };
  const payload = new TextEncoder().encode(JSON.stringify({ title: message.title, body: message.body, data: message.data ?? {} }));
  let response: Response;
  try {
    const body = await encryptPayload(payload, fromBase64url(subscription.p256dh), fromBase64url(subscription.auth));
    response = await fetch(subscription.endpoint, {
      method: "POST",
      headers: {
        Authorization: await vapidAuthorization(subscription.endpoint, keys, currentDate()),
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        TTL: String(message.ttlSeconds ?? 3600),
        Urgency: message.urgency ?? "normal",
      },
      body,
    });
  } catch (error) {
    return { status: "failed", http_status: null, reason: `The push service could not be reached: ${error instanceof Error ? error.message : String(error)}` };
  }
  await response.body?.cancel();
  if (response.status === 404 || response.status === 410) {
    await db.delete(pushSubscriptions).where(eq(pushSubscriptions.subscriptionId, subscription.subscriptionId));
    return { status: "expired", http_status: response.status, reason: "The push service says the subscription is gone; it was removed" };
  }
  if (!response.ok) return { status: "failed", http_status: response.status, reason: `The push service answered ${response.status}` };
  await db.update(pushSubscriptions).set({ lastSentAt: currentDate().toISOString() })
    .where(eq(pushSubscriptions.subscriptionId, subscription.subscriptionId));
  return { status: "sent", http_status: response.status, reason: null };
}

// ---- device-offline notifications (a minute-cron step) -----------------------------------------

const CURSOR = "device_offline";
/** State-history rows read per run; a storm beyond it is picked up by the next minutes. */
const ROWS_PER_RUN = 500;
const SENDS_IN_PARALLEL = 10;

/**
 * Tells subscribed users about devices that went offline on sites they can view, from the presence
 * transitions the hubs write to device_state_history. It reads on from where it stopped (the first
 * run starts at the newest row, so history is never replayed) and sends each user one message per
 * site per run: the device by name, or how many went offline. Delivery is at least once: the cursor
 * moves after the sends, so a run that dies midway repeats them.
 */
export async function notifyOfflineDevices(env: Env, db: Db): Promise<{ transitions: number; sent: number }> {
  const setup = webPushSetup(env);
  if (!setup.ok) return { transitions: 0, sent: 0 };
  const cursor = await db.select().from(pushNotifierCursor).where(eq(pushNotifierCursor.name, CURSOR)).get();
  if (!cursor) {
    const newest = await db.select({ id: deviceStateHistory.id }).from(deviceStateHistory).orderBy(desc(deviceStateHistory.id)).limit(1).get();
    await db.insert(pushNotifierCursor).values({ name: CURSOR, lastId: newest?.id ?? 0 }).onConflictDoNothing();
    return { transitions: 0, sent: 0 };
  }
  const rows = await db.select({
    id: deviceStateHistory.id, deviceId: deviceStateHistory.deviceId, siteId: deviceStateHistory.siteId,
    newState: deviceStateHistory.newState, source: deviceStateHistory.source, at: deviceStateHistory.timestamp, name: devices.name,
  }).from(deviceStateHistory).leftJoin(devices, eq(devices.deviceId, deviceStateHistory.deviceId))
    .where(gt(deviceStateHistory.id, cursor.lastId)).orderBy(asc(deviceStateHistory.id)).limit(ROWS_PER_RUN).all();
  if (!rows.length) return { transitions: 0, sent: 0 };
  const offline = rows.filter((r) => r.newState === "offline" && r.source === "presence" && r.siteId);
  const bySite = new Map<string, typeof offline>();
  for (const r of offline) bySite.set(r.siteId!, [...(bySite.get(r.siteId!) ?? []), r]);

  const sends: { subscription: SubscriptionRow; message: WebPushMessage }[] = [];
  for (const [siteId, transitions] of bySite) {
    const message: WebPushMessage = transitions.length === 1
      ? {
        title: "Device offline",
        body: `${transitions[0]!.name ?? transitions[0]!.deviceId} (${transitions[0]!.deviceId}) at site ${siteId} went offline`,
        data: { kind: "device_offline", site_id: siteId, device_ids: [transitions[0]!.deviceId], at: transitions[0]!.at },
      }
      : {
        title: "Devices offline",
        body: `${transitions.length} devices at site ${siteId} went offline`,
        data: { kind: "device_offline", site_id: siteId, device_ids: transitions.map((t) => t.deviceId).slice(0, 50), at: transitions.at(-1)!.at },
      };
    for (const subscription of await subscriptionsOfSiteViewers(db, siteId)) sends.push({ subscription, message: { ...message, urgency: "high" } });
  }
  let sent = 0;
  for (let i = 0; i < sends.length; i += SENDS_IN_PARALLEL) {
    const outcomes = await Promise.all(sends.slice(i, i + SENDS_IN_PARALLEL).map((s) => sendWebPush(env, db, setup.keys, s.subscription, s.message)));
    sent += outcomes.filter((o) => o.status === "sent").length;
  }
  await db.update(pushNotifierCursor).set({ lastId: rows.at(-1)!.id }).where(eq(pushNotifierCursor.name, CURSOR));
  return { transitions: offline.length, sent };
}

/** Subscriptions of active users who can view the site: administrators, its members and its tenant's members. */
function subscriptionsOfSiteViewers(db: Db, siteId: string): Promise<SubscriptionRow[]> {
  return db.select({
    subscriptionId: pushSubscriptions.subscriptionId, userId: pushSubscriptions.userId, endpoint: pushSubscriptions.endpoint,
    p256dh: pushSubscriptions.p256dh, auth: pushSubscriptions.auth, createdAt: pushSubscriptions.createdAt, lastSentAt: pushSubscriptions.lastSentAt,
  }).from(pushSubscriptions)
    .where(sql`${pushSubscriptions.userId} IN (
      SELECT u.id FROM users u WHERE u.is_active = 1 AND (
        u.is_admin = 1
        OR EXISTS (SELECT 1 FROM site_memberships m WHERE m.user_id = u.id AND m.site_id = ${siteId})
        OR EXISTS (SELECT 1 FROM tenant_memberships tm JOIN sites s ON s.tenant_id = tm.tenant_id WHERE tm.user_id = u.id AND s.site_id = ${siteId})
      ))`).all();
}
