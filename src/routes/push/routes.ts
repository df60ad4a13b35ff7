import type { Context } from "hono";
import type { AppEnv } from "../../env";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { countStatuses, currentTargets, findReadablePush, sendPush, type PushNotification, type PushRow, type TargetResult } from "../../services/push";
import { ensureSendablePlatform, pushPlatforms } from "../../services/push-platforms";
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
      const platforms = pushPlatforms();
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
      ensureSendablePlatform(notification.platform, ["body", "platform"]);
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
      notifications.forEach((n, i) => ensureSendablePlatform(n.platform, ["body", "notifications", i, "platform"]));
      const { push, created } = await sendPush(c.env, c.var.db, c.var.user!, "bulk", notifications, c.req.valid("header")["idempotency-key"], c.req.raw);
      return c.json(await answer(c, push, created), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{push_id}", auth: "user", tags: TAGS,
      summary: "A push and each target's delivery status",
      description: "Readable by its sender and by anyone with a role on every site it reached (administrators: all); anyone else gets 404. Each target's status is read from its command now: `queued` while pending, `delivered` once the device has taken it, `failed` when it failed, expired or was cancelled (with the reason). Commands are kept 30 days after they finish; after that the status recorded at sending is shown.",
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
