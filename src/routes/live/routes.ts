import { z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../../env";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { unprocessable } from "../../lib/errors";
import { requireUser } from "../../middleware/auth";
import { assertCookieOrigin } from "../../middleware/cookie-origin";
import { grantedSite } from "../../middleware/access";
import { channelState, consumeWsTicket, createWsTicket, revokeWsTicket, subscribe, wsTicketId } from "../../services/live-subscriptions";
import { LIVE_REVOKED_CLOSE_CODE, LIVE_REVOKED_REASON, LiveControlMessageSchema } from "../../shared/hub-contract";
import { parseSince } from "../../shared/time";
import { LiveEventSchema } from "../../shared/hub-contract";
import { SiteParams } from "../sites/schema";

const TAGS = ["Live"];


const ChannelState = z
  .object({
    site_id: z.string(),
    last_seq: z.number().int(),
    oldest_seq: z.number().int().openapi({ description: "The oldest seq still replayable (the ring keeps the last 2000 events)" }),
    subscribers: z.number().int(),
  })
  .openapi("LiveChannelState");

const WsTicket = z
  .object({
    ticket: z.string(),
    ticket_id: z.string().openapi({ description: "The ticket's SHA-256 (hex): what the service stores, and how you revoke it" }),
    expires_at: z.string(),
  })
  .openapi("WsTicket");

const TicketParams = SiteParams.extend({
  ticket_id: z.string().regex(/^[0-9a-f]{64}$/, "A ticket id is 64 lowercase hex digits").openapi({ param: { name: "ticket_id", in: "path" } }),
});

const TicketRevocation = z
  .object({
    ticket_id: z.string(),
    revoked_unused: z.boolean().openapi({ description: "The ticket had not been used and now cannot be" }),
    closed_subscriptions: z.number().int().openapi({ description: "Open subscriptions it had opened, now closed" }),
  })
  .openapi("WsTicketRevocation");

const SubscribeQuery = z.object({
  since: z.coerce.number().int().min(0).optional().openapi({ description: "Replay the events after this seq first" }),
  ticket: z.string().min(1).max(256).optional().openapi({ description: "One-use ticket from POST …/ws-ticket, instead of the Authorization header or cookie" }),
});

/**
 * A subscriber authenticates with a one-use ticket (`?ticket=`) or, like any user call, with the
 * bearer token or cookie. Another site's page can make the browser send the cookie (a WebSocket
 * handshake is not even subject to CORS), but neither a ticket nor a bearer token: so only the
 * cookie answers to the request's Origin.
 */
const subscriberAuth = createMiddleware<AppEnv>(async (c, next) => {
  const ticket = c.req.query("ticket");
  if (ticket) {
    c.set("user", await consumeWsTicket(c.var.db, ticket, c.req.param("site_id") ?? ""));
    return next();
  }
  if (c.req.header("Authorization")) return requireUser(c, next);
  return requireUser(c, async () => {
    assertCookieOrigin(c.req.raw, c.var.config.corsOrigins);
    await next();
  });
});

const SUBSCRIBER_RULES = [
  `Cookie authentication is accepted only from the service's own origin and those listed in \`CORS_ORIGINS\` (403 otherwise); a request without an Origin header is taken as same-origin or non-browser and accepted, unless the browser's \`Sec-Fetch-Site\` says another site started it. A bearer token or a ticket needs no Origin check.`,
  "A user may hold a limited number of live connections to one site (WebSockets and event streams together; `LIVE_MAX_SUBSCRIPTIONS_PER_USER`, default 10), and a site a limited number in all (`LIVE_MAX_SUBSCRIPTIONS_PER_SITE`, default 1000): beyond either, 429 with Retry-After, before any upgrade.",
  `When the user's access ends (removed from the site or its tenant, user deleted or deactivated, the ticket that opened it revoked) the connection gets a \`stream.revoked\` message and is closed at once: a WebSocket with close code ${LIVE_REVOKED_CLOSE_CODE} and reason "${LIVE_REVOKED_REASON}", an event stream by ending it (reconnecting then answers 403). A lowered role that can still read the site keeps the connection: every role that can subscribe receives the same events.`,
].join("\n\n");

/** The site's live channel: WebSocket, server-sent events and WebSocket tickets, under `/api/v1/sites`. */
export function liveRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "post", path: "/{site_id}/ws-ticket", auth: "user", access: { site: "viewer" }, tags: TAGS,
      summary: "A one-use ticket for the site's WebSocket",
      description: "For browsers, which cannot send an Authorization header when opening a WebSocket: pass it as `?ticket=` to `GET /api/v1/sites/{site_id}/ws` (or `/events`) within 60 s. Valid once, for this site and this user; only its hash is stored, and that hash is the `ticket_id` by which you can revoke it (`DELETE …/ws-ticket/{ticket_id}`). Viewer role.",
      request: { params: SiteParams },
      responses: { 201: jsonResponse(WsTicket, "Ticket") },
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      return c.json(await createWsTicket(c.var.db, c.var.user!, site_id), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "delete", path: "/{site_id}/ws-ticket/{ticket_id}", auth: "user", access: { site: "viewer" }, tags: TAGS,
      summary: "Revoke one of your WebSocket tickets",
      description: `An unused ticket can no longer be redeemed; a used one has the subscription it opened closed at once (close code ${LIVE_REVOKED_CLOSE_CODE}, reason "${LIVE_REVOKED_REASON}"). \`ticket_id\` is the one \`POST …/ws-ticket\` answered. Viewer role on the site; only your own tickets: anything else is 404, as is a site you cannot see.`,
      request: { params: TicketParams },
      responses: { 200: jsonResponse(TicketRevocation, "Revoked") },
      errors: [404],
    }),
    async (c) => {
      const { site_id, ticket_id } = c.req.valid("param");
      return c.json(await revokeWsTicket(c.var.db, c.env, c.var.user!, site_id, ticket_id), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{site_id}/ws", auth: "user", authenticate: subscriberAuth, access: { site: "viewer" }, tags: TAGS,
      summary: "Subscribe to the site's live channel (WebSocket)",
      description: [
        "Upgrades to a WebSocket held by the site's hub (hibernation: idle connections cost nothing). Viewer role; authenticate with the bearer token, the `access_token` cookie or a one-use `?ticket=`. A caller without access is refused before the upgrade: 401 without valid credentials, 404 for a site that is unknown or not visible to the caller, 403 for a cookie from a foreign origin.",
        "Every message is a JSON `LiveEvent` `{seq, type, site_id, ts, data}`, in seq order. With `?since=<seq>` the events after it still in the replay ring (the last 2000) come first; when that is not far enough back a `stream.truncated` message says so. Send the text `ping` to get `pong` (answered without waking the hub), or `{\"type\":\"replay\",\"since\":<seq>}` to replay again: at most 5 replays in a burst, then one every 10 s; a replay over that limit is answered with a `stream.error` `LiveControlMessage` (`code: \"replay_rate_limited\"`, `retry_after_s`) instead.",
        SUBSCRIBER_RULES,
        "Without an `Upgrade: websocket` header the answer is 200 with the channel's position (`last_seq`, `oldest_seq`, `subscribers`).",
      ].join("\n\n"),
      request: { params: SiteParams, query: SubscribeQuery },
      responses: {
        101: {
          description: "Switching Protocols: the WebSocket. Each message the server sends is one `LiveEvent`, or one of the hub's own `LiveControlMessage`s, as JSON text (the schema below describes a message, not an HTTP body, hence its media type).",
          content: { "application/x-websocket-message": { schema: z.union([LiveEventSchema, LiveControlMessageSchema]) } },
        },
        200: jsonResponse(ChannelState, "No upgrade requested: the channel's position"),
      },
      errors: [403, 429],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      const { since, ticket } = c.req.valid("query");
      const { role } = grantedSite(c);
      const upgrade = c.req.header("Upgrade");
      if (upgrade?.toLowerCase() !== "websocket") return c.json(await channelState(c.env, site_id), 200);
      const ticketId = ticket ? await wsTicketId(ticket) : undefined;
      return subscribe(c.env, site_id, { user: c.var.user!, role, ticketId }, "ws", since, upgrade);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{site_id}/events", auth: "user", authenticate: subscriberAuth, access: { site: "viewer" }, tags: TAGS,
      summary: "Subscribe to the site's live channel (server-sent events)",
      description: [
        "The same stream as the WebSocket, as `text/event-stream`: each event is `id: <seq>` and `data: <LiveEvent JSON>` (no `event:` field, so `EventSource.onmessage` receives them all); the hub's own `LiveControlMessage`s come as `data:` without an `id:`. Resumes after the `Last-Event-ID` header (EventSource sends it on reconnect) or `?since=`; `?since=` wins when both are given. A comment line every 20 s keeps the connection open. Viewer role; bearer token, cookie or `?ticket=`.",
        SUBSCRIBER_RULES,
      ].join("\n\n"),
      request: { params: SiteParams, query: SubscribeQuery },
      responses: {
        200: { description: "The event stream", content: { "text/event-stream": { schema: z.string().openapi({ example: "id: 42\ndata: {\"seq\":42,\"type\":\"device.status\",\"site_id\":\"STORE-001\",\"ts\":\"2026-01-01T12:00:00.000Z\",\"data\":{\"device_id\":\"POS-1\",\"previous\":\"online\",\"status\":\"offline\"}}\n\n" }) } } },
      },
      errors: [403, 429],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      const { since, ticket } = c.req.valid("query");
      const { role } = grantedSite(c);
      const header = c.req.header("Last-Event-ID");
      const lastEventId = parseSince(header);
      if (header !== undefined && header.trim() !== "" && lastEventId === undefined) {
        throw unprocessable([{ loc: ["header", "Last-Event-ID"], msg: "Last-Event-ID must be a non-negative integer (an event seq)", type: "value_error" }]);
      }
      const ticketId = ticket ? await wsTicketId(ticket) : undefined;
      return subscribe(c.env, site_id, { user: c.var.user!, role, ticketId }, "events", since ?? lastEventId);
    },
  );

  return app;
}
