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
 */
import type { LiveEvent, Subscriber } from "../src/shared/hub-contract";
import { parseSince } from "../src/shared/time";

export { parseSince };

export const PING = "ping";
export const PONG = "pong";
const SSE_KEEPALIVE_MS = 20_000;
/** A stream this many messages behind is dropped (the client reconnects with Last-Event-ID). */
const SSE_MAX_BACKLOG = 1000;

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

export function openSockets(ctx: DurableObjectState): WebSocket[] {
  return ctx.getWebSockets().filter(isOpen);
}

export function subscriberOf(ws: WebSocket): Subscriber | undefined {
  try {
    return (ws.deserializeAttachment() as Subscriber | null) ?? undefined;
  } catch {
    return undefined;
  }
}

/** Accepts a WebSocket for the hub, sends the replay, and returns the 101 response for the client. */
export function acceptSubscriber(ctx: DurableObjectState, subscriber: Subscriber, replay: LiveEvent[]): Response {
  const pair = new WebSocketPair();
  const [client, server] = [pair[0], pair[1]];
  ctx.acceptWebSocket(server, [`user:${subscriber.user_id}`]);
  server.serializeAttachment(subscriber);
  for (const event of replay) server.send(JSON.stringify(event));
  return new Response(null, { status: 101, webSocket: client });
}

/**
 * A message from a subscriber. `ping` is answered by the runtime (auto-response); JSON
 * `{"type": "replay", "since": <seq>}` re-sends what is still in the ring after that seq; anything else
 * is answered with a `stream.error` message and otherwise ignored (the channel is server → client).
 */
export function handleClientMessage(ws: WebSocket, message: string | ArrayBuffer, replay: (since: number) => LiveEvent[], siteId: string) {
  if (typeof message !== "string") return sendError(ws, siteId, "Binary messages are not understood");
  if (message === PING) return ws.send(PONG);
  let parsed: unknown;
  try {
    parsed = JSON.parse(message);
  } catch {
    return sendError(ws, siteId, "Messages must be JSON");
  }
  const body = parsed as { type?: unknown; since?: unknown };
  if (body?.type === "ping") return ws.send(JSON.stringify({ type: "pong", site_id: siteId, ts: new Date().toISOString() }));
  if (body?.type === "replay") {
    const since = typeof body.since === "number" ? parseSince(String(body.since)) : undefined;
    if (since === undefined) return sendError(ws, siteId, "replay needs a non-negative integer `since`");
    for (const event of replay(since)) ws.send(JSON.stringify(event));
    return;
  }
  sendError(ws, siteId, "Unknown message: send {\"type\":\"replay\",\"since\":<seq>} or ping");
}

function sendError(ws: WebSocket, siteId: string, detail: string) {
  try {
    ws.send(JSON.stringify({ type: "stream.error", site_id: siteId, ts: new Date().toISOString(), data: { detail } }));
  } catch {
    // closing
  }
}

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
    if (!this.streams.delete(stream)) return;
    stream.writer.abort("closed").catch(() => undefined);
    if (!this.streams.size && this.keepalive !== undefined) {
      clearInterval(this.keepalive);
      this.keepalive = undefined;
    }
  }
}
