import { api, enc } from "./api";

export interface LiveEvent { seq?: number; type: string; site_id: string; ts: string; data: unknown }
export type ChannelState = "connecting" | "live" | "live (events)" | "reconnecting" | "closed";

const MAX_BACKOFF_MS = 30_000;
/** After this many WebSocket attempts in a row that never opened, the server-sent events stream is used. */
const WS_FAILURES_BEFORE_SSE = 3;

/**
 * A site's live channel. Each connection starts with a one-use ticket (a browser cannot put a token
 * on a WebSocket handshake, and the page never holds one), then opens the WebSocket with `?ticket=`
 * and `?since=` the last event it saw, so nothing is missed across a reconnect. A dropped connection
 * is retried with exponential backoff and jitter; when WebSockets keep failing (a proxy that refuses
 * upgrades) it falls back to the server-sent events stream, which resumes the same way.
 */
/** The seq of the site's latest event (the live channel's position), read without subscribing. */
export async function channelPosition(siteId: string): Promise<number> {
  return (await api<{ last_seq: number }>(`/api/v1/sites/${enc(siteId)}/ws`)).last_seq;
}

export class LiveChannel {
  private lastSeq: number | undefined;
  private attempt = 0;
  private wsFailures = 0;
  private socket: WebSocket | undefined;
  private source: EventSource | undefined;
  private timer: number | undefined;
  private closed = false;

  constructor(
    private readonly siteId: string,
    private readonly onEvent: (event: LiveEvent) => void,
    private readonly onState: (state: ChannelState) => void,
    /** Events older than the replay ring were missed: the caller reloads what it shows. */
    private readonly onTruncated: () => void,
  ) {}

  /**
   * Connects, replaying from `since`: the channel's position taken (with `channelPosition`) before the
   * page read what it shows, so nothing that changed in between is lost.
   */
  start(since: number | undefined) {
    this.lastSeq = since;
    void this.connect();
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    this.socket?.close(1000, "page left");
    this.source?.close();
    this.onState("closed");
  }

  private async connect() {
    if (this.closed) return;
    this.onState(this.attempt === 0 ? "connecting" : "reconnecting");
    let ticket: string;
    try {
      ticket = (await api<{ ticket: string }>(`/api/v1/sites/${enc(this.siteId)}/ws-ticket`, { method: "POST" })).ticket;
    } catch {
      return this.retry();
    }
    if (this.closed) return;
    const query = new URLSearchParams({ ticket });
    if (this.lastSeq !== undefined) query.set("since", String(this.lastSeq));
    if (this.wsFailures >= WS_FAILURES_BEFORE_SSE || typeof WebSocket === "undefined") this.openEvents(query);
    else this.openSocket(query);
  }

  private openSocket(query: URLSearchParams) {
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/sites/${enc(this.siteId)}/ws?${query}`;
    const socket = new WebSocket(url);
    this.socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this.attempt = 0;
      this.wsFailures = 0;
      this.onState("live");
    };
    socket.onmessage = (message) => {
      if (typeof message.data === "string" && message.data !== "pong") this.receive(message.data);
    };
    socket.onclose = () => {
      if (this.socket !== socket) return;
      this.socket = undefined;
      if (!opened) this.wsFailures++;
      this.retry();
    };
  }

  private openEvents(query: URLSearchParams) {
    const source = new EventSource(`/api/v1/sites/${enc(this.siteId)}/events?${query}`);
    this.source = source;
    source.onopen = () => {
      this.attempt = 0;
      this.onState("live (events)");
    };
    source.onmessage = (message) => this.receive(message.data);
    // EventSource would reconnect by itself, but with the spent ticket: start over with a new one.
    source.onerror = () => {
      source.close();
      if (this.source !== source) return;
      this.source = undefined;
      this.retry();
    };
  }

  private receive(text: string) {
    let event: LiveEvent;
    try {
      event = JSON.parse(text) as LiveEvent;
    } catch {
      return;
    }
    if (typeof event.seq === "number") {
      if (this.lastSeq !== undefined && event.seq <= this.lastSeq) return;
      this.lastSeq = event.seq;
    }
    if (event.type === "stream.truncated") this.onTruncated();
    else this.onEvent(event);
  }

  private retry() {
    if (this.closed) return;
    this.onState("reconnecting");
    const base = Math.min(MAX_BACKOFF_MS, 500 * 2 ** this.attempt++);
    this.timer = window.setTimeout(() => void this.connect(), base / 2 + Math.random() * (base / 2));
  }
}
