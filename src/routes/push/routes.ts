import type { Context } from "hono";
import type { AppEnv } from "../../env";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { countStatuses, currentTargets, findReadablePush, sendPush, type PushNotification, type PushRow, type TargetResult } from "../../services/push";
import { ensureSendablePlatform, pushPlatforms } from "../../services/push-platforms";
import {
  deleteSubscription, listSubscriptions, ownSubscription, registerSubscription, requireWebPush, sendWebPush, type SubscriptionRow,
} from "../../services/web-push";
import * as s from "./schema";

const TAGS = ["Push"];

const TARGETS = "Targets: `device_id`, `device_ids` or `site_id` (every active device of the site). The caller needs the operator role on every target's site (administrators: every site); if any target is refused, nothing is sent: an unknown device, or one on a site the caller has no role on, is 404, a lower role 403.";
const DELIVERY = "Each target device gets the notification as a `notify` command `{title, body, data, priority}` with `ttl_seconds` as its time to live, through its site's command queue: `queued` until the device takes it on its next poll (at once on a long poll), `delivered` once it has; a simulated device's agent takes it at once. A device that cannot take it — suspended, retired, or already holding 50 open commands — is a `failed` target with the reason, and the others still go out. `GET /api/v1/push/{push_id}` shows each target's status as it stands.";
const IDEMPOTENCY = "With an `Idempotency-Key` header, a retry by the same user with the same body queues nothing and answers the push it created, with its current status and the header `Idempotent-Replayed: true`; the same key with a different body is 422.";

async function answer(c: Context<AppEnv>, push: PushRow, created: boolean) {
  const results = created ? (push.targets as TargetResult[]) : await currentTargets(c.env, push);
  if (!created) c.header("Idempotent-Replayed", "true");
  return view(push, results);
}

const view = (push: PushRow, results: TargetResult[]) => ({
  push_id: push.pushId, kind: push.kind, created_by: push.createdBy, created_at: push.createdAt,
  total: results.length, counts: countStatuses(results), results,
});

const subscriptionView = (row: SubscriptionRow) => ({
  subscription_id: row.subscriptionId, endpoint: row.endpoint, created_at: row.createdAt, last_sent_at: row.lastSentAt,
});

/** `/api/v1/push`: notifications to devices, their delivery status, and the platforms there are. */
export function pushRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "get", path: "/platforms", auth: "user", tags: TAGS,
      summary: "Push platforms and whether each can deliver",
      description: "Every platform the push API knows, with `available` true only where this service really delivers through it, and the reason either way.",
      responses: { 200: jsonResponse(s.PushPlatformList, "Platforms") },
    }),
    (c) => {
      const platforms = pushPlatforms(c.env);
      return c.json({ platforms, total: platforms.length }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/send", auth: "user", tags: TAGS,
      summary: "Send a notification to devices (operator)",
      description: `${TARGETS} At most 1,000 target devices. ${DELIVERY} ${IDEMPOTENCY}`,
      request: { headers: s.PushIdempotencyHeaders, ...jsonBody(s.PushNotificationSchema) },
      responses: { 201: { ...jsonResponse(s.PushResult, "Sent: each target's result"), headers: s.ReplayHeaders } },
      errors: [403, 404],
    }),
    async (c) => {
      const notification: PushNotification = c.req.valid("json");
      ensureSendablePlatform(c.env, notification.platform, ["body", "platform"]);
      const { push, created } = await sendPush(c.env, c.var.db, c.var.user!, "send", [notification], c.req.valid("header")["idempotency-key"], c.req.raw);
      return c.json(await answer(c, push, created), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/send-bulk", auth: "user", tags: TAGS,
      summary: "Send several notifications at once (operator)",
      description: `Up to ${s.MAX_BULK_NOTIFICATIONS} notifications and 1,000 target devices in all (more is 422, and nothing is sent). Each notification names its own targets. ${TARGETS} ${DELIVERY} Results are listed per target with the index of its notification. ${IDEMPOTENCY}`,
      request: { headers: s.PushIdempotencyHeaders, ...jsonBody(s.PushBulkBody) },
      responses: { 201: { ...jsonResponse(s.PushResult, "Sent: each target's result"), headers: s.ReplayHeaders } },
      errors: [403, 404],
    }),
    async (c) => {
      const { notifications } = c.req.valid("json");
      notifications.forEach((n, i) => ensureSendablePlatform(c.env, n.platform, ["body", "notifications", i, "platform"]));
      const { push, created } = await sendPush(c.env, c.var.db, c.var.user!, "bulk", notifications, c.req.valid("header")["idempotency-key"], c.req.raw);
      return c.json(await answer(c, push, created), 201);
    },
  );

  // Web Push subscriptions of the signed-in user. Declared before /{push_id}, which would read
  // `subscriptions` as a push id.
  const WEB_PUSH_503 = "503 when Web Push is not configured (VAPID_PUBLIC_KEY, VAPID_PRIVATE_KEY, VAPID_SUBJECT).";

  app.openapi(
    apiRoute({
      method: "get", path: "/vapid-public-key", auth: "user", tags: TAGS,
      summary: "The public key browsers subscribe with",
      description: `The application server key for \`PushManager.subscribe({applicationServerKey})\`, base64url. ${WEB_PUSH_503}`,
      responses: { 200: jsonResponse(s.VapidPublicKey, "The key") },
      errors: [503],
    }),
    (c) => c.json({ public_key: requireWebPush(c.env).publicKey.replace(/=+$/, "") }, 200),
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/subscriptions", auth: "user", tags: TAGS,
      summary: "Register a browser's Web Push subscription",
      description: `The body is what \`PushSubscription.toJSON()\` gives: \`{endpoint, keys: {p256dh, auth}}\`; the endpoint must be https. The caller then gets Web Push notifications about devices going offline on the sites they can view. Registering an endpoint the caller already has refreshes its keys (200); a new one is 201. At most 20 per user (409 beyond). A subscription the push service reports gone (404 or 410) is removed. ${WEB_PUSH_503}`,
      request: jsonBody(s.SubscriptionBody),
      responses: {
        200: jsonResponse(s.Subscription, "Already registered: keys refreshed"),
        201: jsonResponse(s.Subscription, "Registered"),
      },
      errors: [409, 503],
    }),
    async (c) => {
      const { subscription, created } = await registerSubscription(c.env, c.var.db, c.var.user!, c.req.valid("json"));
      return created ? c.json(subscriptionView(subscription), 201) : c.json(subscriptionView(subscription), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/subscriptions", auth: "user", tags: TAGS,
      summary: "The caller's Web Push subscriptions",
      description: "Only the caller's own, newest first.",
      responses: { 200: jsonResponse(s.SubscriptionList, "Subscriptions") },
    }),
    async (c) => {
      const rows = await listSubscriptions(c.var.db, c.var.user!);
      return c.json({ subscriptions: rows.map(subscriptionView), total: rows.length }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "delete", path: "/subscriptions/{subscription_id}", auth: "user", tags: TAGS,
      summary: "Delete one of the caller's subscriptions",
      description: "Another user's subscription is 404, as an unknown one.",
      request: { params: s.SubscriptionParams },
      responses: { 204: { description: "Deleted" } },
      errors: [404],
    }),
    async (c) => {
      await deleteSubscription(c.var.db, c.var.user!, c.req.valid("param").subscription_id);
      return c.body(null, 204);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/subscriptions/{subscription_id}/test", auth: "user", tags: TAGS,
      summary: "Send a test notification to one of the caller's subscriptions",
      description: `Encrypts and sends a short notification now and answers what the push service said: \`sent\`, \`expired\` (404 or 410: the subscription was removed) or \`failed\` with the reason. Another user's subscription is 404. ${WEB_PUSH_503}`,
      request: { params: s.SubscriptionParams },
      responses: { 200: jsonResponse(s.WebPushResult, "What the push service answered") },
      errors: [404, 503],
    }),
    async (c) => {
      const subscription = await ownSubscription(c.var.db, c.var.user!, c.req.valid("param").subscription_id);
      const keys = requireWebPush(c.env);
      const outcome = await sendWebPush(c.env, c.var.db, keys, subscription, {
        title: "Fleet Edge test notification", body: `Notifications reach this browser (${c.var.user!.email})`, data: { kind: "test" },
      });
      return c.json({ subscription_id: subscription.subscriptionId, ...outcome }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{push_id}", auth: "user", tags: TAGS,
      summary: "A push and each target's delivery status",
      description: "Readable by anyone with a role (any role) on every site it reached, administrators and its sender alike; anyone else gets 404. Each target's status is read from its command now: `queued` while pending, `delivered` once the device has taken it, `failed` when it failed, expired or was cancelled (with the reason). Commands are kept 30 days after they finish; after that the status recorded at sending is shown.",
      request: { params: s.PushParams },
      responses: { 200: jsonResponse(s.PushResult, "The push") },
      errors: [404],
    }),
    async (c) => {
      const push = await findReadablePush(c.var.db, c.var.user!, c.req.valid("param").push_id);
      return c.json(view(push, await currentTargets(c.env, push)), 200);
    },
  );

  return app;
}
