/**
 * Subscribers of a site's live channel, held by the SiteHub.
 *
 * WebSockets use the hibernation API: the hub accepts them with `ctx.acceptWebSocket`, answers the
 * text message `ping` with `pong` without waking (auto-response), and may be evicted from memory while
 * they stay connected. Each socket carries its subscriber in its attachment, which survives
 * hibernation. Server-sent event streams are plain streaming responses: while one is open the hub
 * stays in memory (they cannot hibernate), with a comment line every 20 s to keep proxies from
 * closing them.
 *
 * Every message is one LiveEvent `{seq, type, site_id, ts, data}`; `seq` increases by one per event
 * of the site. Replay (`?since=<seq>`, Last-Event-ID) comes from the ring in the hub's storage; when the
 * requested point is older than the ring, a `stream.truncated` message (seq = the last seq that can no
 * longer be replayed) comes first, so the client knows it missed events and should reload.
 *
 * The hub also guards the channel: it refuses a subscription past the per-user and per-site caps
 * (429, before any socket exists), meters replay requests per socket, and on a revocation closes a
 * user's subscriptions (4403 "access revoked") or records their lower role. docs/security.md
 * ("Revocation of live connections", "Live channel limits") explains each.
 */
import {
  LIVE_REVOKED_CLOSE_CODE, LIVE_REVOKED_REASON,
  type LiveControlMessage, type LiveEvent, type Revocation, type RevocationResult, type Subscriber,
} from "../src/shared/hub-contract";
import { iso, parseSince } from "../src/shared/time";
import { DEVICE_SOCKET_TAG } from "../src/shared/device-channel";

export { parseSince };

export const PING = "ping";
export const PONG = "pong";
const SSE_KEEPALIVE_MS = 20_000;
/** A stream this many messages behind is dropped (the client reconnects with Last-Event-ID). */
const SSE_MAX_BACKLOG = 1000;

/**
 * Replay requests over an open socket: a burst of this many, then one more every REPLAY_REFILL_MS.
 * A replay can resend the whole ring (2000 events), so an unmetered client could make the hub send
 * tens of thousands of messages a second; reconnecting with `?since=` is not metered (it costs a new
 * authenticated request, and the subscription caps bound it).
 */
export const REPLAY_BURST = 5;
export const REPLAY_REFILL_MS = 10_000;

/** How long a client refused for too many subscriptions is told to wait before trying again. */
export const SUBSCRIPTION_RETRY_AFTER_S = 30;

export interface SubscriptionLimits {
  maxSubscriptionsPerUser: number;
  maxSubscriptionsPerSite: number;
}

/** Why one more subscription for this user would exceed a cap, or undefined when it fits. */
export function subscriptionRefusal(open: { site: number; user: number }, limits: SubscriptionLimits): string | undefined {
  if (open.user >= limits.maxSubscriptionsPerUser) {
    return `You already have ${open.user} live connections to this site (at most ${limits.maxSubscriptionsPerUser}); close one first`;
  }
  if (open.site >= limits.maxSubscriptionsPerSite) {
    return `This site already has ${open.site} live connections (at most ${limits.maxSubscriptionsPerSite}); try again later`;
  }
  return undefined;
}

/** The socket's attachment: its subscriber, plus its replay allowance once it has asked for a replay. */
interface SocketAttachment extends Subscriber {
  replay_tokens?: number;
  replay_at?: number;
}

const controlMessage = (type: LiveControlMessage["type"], siteId: string, now: number, data: LiveControlMessage["data"]): LiveControlMessage =>
  ({ type, site_id: siteId, ts: iso(now), data });

/** What a subscriber resuming after `since` must be sent first. */
export function replayFrom(
  since: number | undefined,
  ring: { since(seq: number): LiveEvent[]; oldestSeq(): number },
  siteId: string,
): LiveEvent[] {
  if (since === undefined) return [];
  const events = ring.since(since);
  const oldest = ring.oldestSeq();
  if (oldest > 0 && since < oldest - 1) {
    return [{ seq: oldest - 1, type: "stream.truncated", site_id: siteId, ts: new Date().toISOString(), data: { requested_since: since, oldest_seq: oldest } }, ...events];
  }
  return events;
}

export const isOpen = (ws: WebSocket) => ws.readyState === WebSocket.OPEN;

/** The open subscriber sockets (devices' channel sockets share the hub but are not subscribers). */
export function openSockets(ctx: DurableObjectState): WebSocket[] {
  return ctx.getWebSockets().filter((ws) => isOpen(ws) && !ctx.getTags(ws).includes(DEVICE_SOCKET_TAG));
}

function attachmentOf(ws: WebSocket): SocketAttachment | undefined {
  try {
    return (ws.deserializeAttachment() as SocketAttachment | null) ?? undefined;
  } catch {
    return undefined;
  }
}

export function subscriberOf(ws: WebSocket): Subscriber | undefined {
  const attachment = attachmentOf(ws);
  if (!attachment) return undefined;
  const { replay_tokens: _tokens, replay_at: _at, ...subscriber } = attachment;
  return subscriber;
}

const userTag = (userId: number) => `user:${userId}`;

/** The user's open WebSockets on this hub. */
export const openSocketsOf = (ctx: DurableObjectState, userId: number) => ctx.getWebSockets(userTag(userId)).filter(isOpen);

/** Accepts a WebSocket for the hub, sends the replay, and returns the 101 response for the client. */
export function acceptSubscriber(ctx: DurableObjectState, subscriber: Subscriber, replay: LiveEvent[]): Response {
  const pair = new WebSocketPair();
  const [client, server] = [pair[0], pair[1]];
  ctx.acceptWebSocket(server, [userTag(subscriber.user_id)]);
  server.serializeAttachment(subscriber);
  for (const event of replay) server.send(JSON.stringify(event));
  return new Response(null, { status: 101, webSocket: client });
}

/**
 * A message from a subscriber. `ping` is answered by the runtime (auto-response); JSON
 * `{"type": "replay", "since": <seq>}` re-sends what is still in the ring after that seq; anything else
 * is answered with a `stream.error` message and otherwise ignored (the channel is server → client).
 */
export function handleClientMessage(ws: WebSocket, message: string | ArrayBuffer, replay: (since: number) => LiveEvent[], siteId: string, now: number) {
  const error = (detail: string, extra: Omit<LiveControlMessage["data"], "detail"> = { code: "bad_message" }) =>
    sendControl(ws, controlMessage("stream.error", siteId, now, { detail, ...extra }));
  if (typeof message !== "string") return error("Binary messages are not understood");
  if (message === PING) return ws.send(PONG);
  let parsed: unknown;
  try {
    parsed = JSON.parse(message);
  } catch {
    return error("Messages must be JSON");
  }
  const body = parsed as { type?: unknown; since?: unknown };
  if (body?.type === "ping") return ws.send(JSON.stringify({ type: "pong", site_id: siteId, ts: iso(now) }));
  if (body?.type === "replay") {
    const since = typeof body.since === "number" ? parseSince(String(body.since)) : undefined;
    if (since === undefined) return error("replay needs a non-negative integer `since`");
    const waitMs = takeReplayToken(ws, now);
    if (waitMs > 0) {
      const retryAfterS = Math.ceil(waitMs / 1000);
      return error(`Too many replay requests; try again in ${retryAfterS} s`, { code: "replay_rate_limited", retry_after_s: retryAfterS });
    }
    for (const event of replay(since)) ws.send(JSON.stringify(event));
    return;
  }
  error("Unknown message: send {\"type\":\"replay\",\"since\":<seq>} or ping");
}

/**
 * Spends one of the socket's replay tokens: 0 when one was there, else how long until the next.
 * The allowance lives in the socket's attachment, so it survives the hub hibernating.
 */
function takeReplayToken(ws: WebSocket, now: number): number {
  const attachment = attachmentOf(ws);
  if (!attachment) return 0;
  const last = attachment.replay_at ?? now;
  const tokens = Math.min(REPLAY_BURST, (attachment.replay_tokens ?? REPLAY_BURST) + Math.max(0, now - last) / REPLAY_REFILL_MS);
  if (tokens < 1) return Math.ceil((1 - tokens) * REPLAY_REFILL_MS);
  ws.serializeAttachment({ ...attachment, replay_tokens: tokens - 1, replay_at: now });
  return 0;
}

function sendControl(ws: WebSocket, message: LiveControlMessage) {
  try {
    ws.send(JSON.stringify(message));
  } catch {
    // closing
  }
}

const revocationMatches = (subscriber: Subscriber | undefined, revocation: Revocation) =>
  subscriber !== undefined && subscriber.user_id === revocation.user_id &&
  (revocation.ticket_id === undefined || subscriber.ticket_id === revocation.ticket_id);

/**
 * Applies a revocation to the user's WebSockets: without a role each gets a `stream.revoked`
 * message and is closed with 4403 "access revoked"; with one, the role is recorded on the socket.
 */
export function revokeSockets(ctx: DurableObjectState, revocation: Revocation, siteId: string, now: number): RevocationResult {
  const result = { closed: 0, downgraded: 0 };
  for (const ws of openSocketsOf(ctx, revocation.user_id)) {
    const attachment = attachmentOf(ws);
    if (!attachment || !revocationMatches(attachment, revocation)) continue;
    if (revocation.role === null) {
      sendControl(ws, revokedMessage(siteId, now));
      closeQuietly(ws, LIVE_REVOKED_CLOSE_CODE, LIVE_REVOKED_REASON);
      result.closed++;
    } else if (attachment.role !== revocation.role) {
      ws.serializeAttachment({ ...attachment, role: revocation.role });
      result.downgraded++;
    }
  }
  return result;
}

const revokedMessage = (siteId: string, now: number) =>
  controlMessage("stream.revoked", siteId, now, { detail: "Your access to this site was revoked", code: "access_revoked" });

/** Completes the closing handshake the client started (a reserved code cannot be echoed). */
export function closeQuietly(ws: WebSocket, code?: number, reason?: string) {
  const sendable = code !== undefined && code >= 1000 && code < 5000 && ![1004, 1005, 1006, 1015].includes(code);
  try {
    ws.close(sendable ? code : 1000, sendable ? reason : "closing");
  } catch {
    // already closed
  }
}

const encoder = new TextEncoder();

export const sseFrame = (event: LiveEvent) => `id: ${event.seq}\ndata: ${JSON.stringify(event)}\n\n`;
/** A control message carries no `id:`, so it does not move the client's Last-Event-ID. */
const sseControlFrame = (message: LiveControlMessage) => `data: ${JSON.stringify(message)}\n\n`;

interface SseStream {
  writer: WritableStreamDefaultWriter<Uint8Array>;
  backlog: number;
  subscriber: Subscriber;
}

/** The open server-sent event streams of one hub (in memory: they keep the hub awake). */
export class SseChannel {
  private readonly streams = new Set<SseStream>();
  private keepalive: ReturnType<typeof setInterval> | undefined;

  get size() {
    return this.streams.size;
  }

  subscribers(): Subscriber[] {
    return [...this.streams].map((s) => s.subscriber);
  }

  countOf(userId: number): number {
    let n = 0;
    for (const s of this.streams) if (s.subscriber.user_id === userId) n++;
    return n;
  }

  /** Like `revokeSockets`: a revoked stream gets `stream.revoked` and ends; otherwise its role is recorded. */
  revoke(revocation: Revocation, siteId: string, now: number): RevocationResult {
    const result = { closed: 0, downgraded: 0 };
    for (const stream of [...this.streams]) {
      if (!revocationMatches(stream.subscriber, revocation)) continue;
      if (revocation.role === null) {
        this.write(stream, sseControlFrame(revokedMessage(siteId, now)));
        this.end(stream);
        result.closed++;
      } else if (stream.subscriber.role !== revocation.role) {
        stream.subscriber = { ...stream.subscriber, role: revocation.role };
        result.downgraded++;
      }
    }
    return result;
  }

  open(subscriber: Subscriber, replay: LiveEvent[]): Response {
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
    const stream: SseStream = { writer: writable.getWriter(), backlog: 0, subscriber };
    this.streams.add(stream);
    this.write(stream, "retry: 3000\n\n");
    for (const event of replay) this.write(stream, sseFrame(event));
    stream.writer.closed.catch(() => undefined).finally(() => this.drop(stream));
    this.keepalive ??= setInterval(() => {
      for (const s of this.streams) this.write(s, ": keep-alive\n\n");
    }, SSE_KEEPALIVE_MS);
    return new Response(readable, {
      headers: {
        "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-cache, no-transform",
        "X-Accel-Buffering": "no",
      },
    });
  }

  send(event: LiveEvent) {
    if (!this.streams.size) return;
    const frame = sseFrame(event);
    for (const s of this.streams) this.write(s, frame);
  }

  private write(stream: SseStream, text: string) {
    if (stream.backlog > SSE_MAX_BACKLOG) {
      this.drop(stream);
      return;
    }
    stream.backlog++;
    stream.writer.write(encoder.encode(text)).then(
      () => { stream.backlog--; },
      () => this.drop(stream),
    );
  }

  private drop(stream: SseStream) {
    if (!this.forget(stream)) return;
    stream.writer.abort("closed").catch(() => undefined);
  }

  /** Closes the stream after what was already written to it (a clean end, unlike drop). */
  private end(stream: SseStream) {
    if (!this.forget(stream)) return;
    stream.writer.close().catch(() => undefined);
  }

  private forget(stream: SseStream): boolean {
    if (!this.streams.delete(stream)) return false;
    if (!this.streams.size && this.keepalive !== undefined) {
      clearInterval(this.keepalive);
      this.keepalive = undefined;
    }
    return true;
  }
}
