import { z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../../env";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { unprocessable } from "../../lib/errors";
import { requireUser } from "../../middleware/auth";
import { authorizeSite } from "../../services/access";
import { channelState, consumeWsTicket, createWsTicket, subscribe } from "../../services/live-subscriptions";
import { parseSince } from "../../shared/time";
import { SiteParams } from "../sites/schema";

const TAGS = ["Live"];

export const LiveEventSchema = z
  .object({
    seq: z.number().int().openapi({ description: "Increases by one per event of the site; resume with ?since=<seq> or Last-Event-ID" }),
    type: z.string().openapi({
      description: "device.status, device.heartbeat (coalesced, at most one every 2 s), device.metrics (a stored sample), agent.state, agent.health, agent.push, command.updated, job.updated, intent.updated; control messages: stream.truncated (you missed events older than the replay ring: reload), stream.error",
      example: "device.status",
    }),
    site_id: z.string(),
    ts: z.string().openapi({ description: "When the event was published (ISO 8601, UTC)" }),
    data: z.unknown().openapi({ description: "Depends on type; device.status: {device_id, previous, status, reason, at}; agent.state: {device_id, previous, state, config_version, target_version, at, error?}" }),
  })
  .openapi("LiveEvent");

const ChannelState = z
  .object({
    site_id: z.string(),
    last_seq: z.number().int(),
    oldest_seq: z.number().int().openapi({ description: "The oldest seq still replayable (the ring keeps the last 2000 events)" }),
    subscribers: z.number().int(),
  })
  .openapi("LiveChannelState");

const SubscribeQuery = z.object({
  since: z.coerce.number().int().min(0).optional().openapi({ description: "Replay the events after this seq first" }),
  ticket: z.string().min(1).max(256).optional().openapi({ description: "One-use ticket from POST …/ws-ticket, instead of the Authorization header or cookie" }),
});

/** A subscriber authenticates with a one-use ticket (`?ticket=`) or, like any user call, with the bearer token or cookie. */
const subscriberAuth = createMiddleware<AppEnv>(async (c, next) => {
  const ticket = c.req.query("ticket");
  if (!ticket) return requireUser(c, next);
  c.set("user", await consumeWsTicket(c.var.db, ticket, c.req.param("site_id") ?? ""));
  await next();
});

const withSubscriberAuth = <R extends object>(route: R): R => ({ ...route, middleware: [subscriberAuth] });

/** The site's live channel: WebSocket, server-sent events and WebSocket tickets, under `/api/v1/sites`. */
export function liveRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "post", path: "/{site_id}/ws-ticket", auth: "user", tags: TAGS,
      summary: "A one-use ticket for the site's WebSocket",
      description: "For browsers, which cannot send an Authorization header when opening a WebSocket: pass it as `?ticket=` to `GET /api/v1/sites/{site_id}/ws` (or `/events`) within 60 s. Valid once, for this site and this user; only its hash is stored. Viewer role.",
      request: { params: SiteParams },
      responses: { 201: jsonResponse(z.object({ ticket: z.string(), expires_at: z.string() }).openapi("WsTicket"), "Ticket") },
      errors: [404],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      await authorizeSite(c.var.db, c.var.user!, site_id, "viewer", c.req.raw);
      return c.json(await createWsTicket(c.var.db, c.var.user!, site_id), 201);
    },
  );

  app.openapi(
    withSubscriberAuth(apiRoute({
      method: "get", path: "/{site_id}/ws", auth: "user", tags: TAGS,
      summary: "Subscribe to the site's live channel (WebSocket)",
      description: [
        "Upgrades to a WebSocket held by the site's hub (hibernation: idle connections cost nothing). Viewer role; authenticate with the bearer token, the `access_token` cookie or a one-use `?ticket=`. A caller without access is refused before the upgrade: 401 without valid credentials, 404 for a site that is unknown or not visible to the caller.",
        "Every message is a JSON `LiveEvent` `{seq, type, site_id, ts, data}`, in seq order. With `?since=<seq>` the events after it still in the replay ring (the last 2000) come first; when that is not far enough back a `stream.truncated` message says so. Send the text `ping` to get `pong` (answered without waking the hub), or `{\"type\":\"replay\",\"since\":<seq>}` to replay again.",
        "Without an `Upgrade: websocket` header the answer is 200 with the channel's position (`last_seq`, `oldest_seq`, `subscribers`).",
      ].join("\n\n"),
      request: { params: SiteParams, query: SubscribeQuery },
      responses: {
        101: {
          description: "Switching Protocols: the WebSocket. Each message the server sends is one `LiveEvent` as JSON text (the schema below describes a message, not an HTTP body, hence its media type).",
          content: { "application/x-websocket-message": { schema: LiveEventSchema } },
        },
        200: jsonResponse(ChannelState, "No upgrade requested: the channel's position"),
      },
      errors: [404],
    })),
    async (c) => {
      const { site_id } = c.req.valid("param");
      const { since } = c.req.valid("query");
      await authorizeSite(c.var.db, c.var.user!, site_id, "viewer", c.req.raw);
      const upgrade = c.req.header("Upgrade");
      if (upgrade?.toLowerCase() !== "websocket") return c.json(await channelState(c.env, site_id), 200);
      return subscribe(c.env, site_id, c.var.user!, "ws", since, upgrade);
    },
  );

  app.openapi(
    withSubscriberAuth(apiRoute({
      method: "get", path: "/{site_id}/events", auth: "user", tags: TAGS,
      summary: "Subscribe to the site's live channel (server-sent events)",
      description: "The same stream as the WebSocket, as `text/event-stream`: each event is `id: <seq>` and `data: <LiveEvent JSON>` (no `event:` field, so `EventSource.onmessage` receives them all). Resumes after the `Last-Event-ID` header (EventSource sends it on reconnect) or `?since=`; `?since=` wins when both are given. A comment line every 20 s keeps the connection open. Viewer role; bearer token, cookie or `?ticket=`.",
      request: { params: SiteParams, query: SubscribeQuery },
      responses: {
        200: { description: "The event stream", content: { "text/event-stream": { schema: z.string().openapi({ example: "id: 42\ndata: {\"seq\":42,\"type\":\"device.status\",\"site_id\":\"STORE-001\",\"ts\":\"2026-01-01T12:00:00.000Z\",\"data\":{\"device_id\":\"POS-1\",\"previous\":\"online\",\"status\":\"offline\"}}\n\n" }) } } },
      },
      errors: [404],
    })),
    async (c) => {
      const { site_id } = c.req.valid("param");
      const { since } = c.req.valid("query");
      await authorizeSite(c.var.db, c.var.user!, site_id, "viewer", c.req.raw);
      const header = c.req.header("Last-Event-ID");
      const lastEventId = parseSince(header);
      if (header !== undefined && header.trim() !== "" && lastEventId === undefined) {
        throw unprocessable([{ loc: ["header", "Last-Event-ID"], msg: "Last-Event-ID must be a non-negative integer (an event seq)", type: "value_error" }]);
      }
      return subscribe(c.env, site_id, c.var.user!, "events", since ?? lastEventId);
    },
  );

  return app;
}
