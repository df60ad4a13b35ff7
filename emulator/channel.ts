import WebSocket from "ws";
import type { operations } from "./api";
import type { CallKind, FleetStats } from "./stats";

/** Every message of the device channel, both ways, typed from the service's OpenAPI document (the 101 answer of the route). */
type ChannelMessage = operations["get_api_v1_agent_channel"]["responses"][101]["content"]["application/x-websocket-message"];
type DeviceMessageType = "heartbeat" | "telemetry" | "ack" | "result" | "ping";
export type DeviceMessage = Extract<ChannelMessage, { type: DeviceMessageType }>;
export type HubMessage = Exclude<ChannelMessage, { type: DeviceMessageType }>;
export type ChannelCommand = Extract<HubMessage, { type: "command" }>["command"];
/** What the hub answers a device message with, by the message's type. */
type AnswerTo = { heartbeat: "heartbeat.ok"; telemetry: "telemetry.ok"; ack: "ack.ok"; result: "result.ok"; ping: "pong" };

/** An answer, or why there is none, in the HTTP terms the rest of the emulator already handles. */
export type ChannelOutcome<T> = { ok: true; data: T } | { ok: false; status: number | "network"; retryAfterS?: number };

/** Channel errors mapped to the status the same call answers over HTTP. */
const STATUS_OF_ERROR = { bad_message: 400, invalid: 400, not_found: 404, conflict: 409, rate_limited: 429 } as const;
const ANSWER_TIMEOUT_MS = 15_000;

/** How opening the channel went: open, refused with an HTTP status before any socket existed, or unreachable. */
export type OpenOutcome = { ok: true; channel: DeviceChannel } | { ok: false; status: number | "network" };

/**
 * One device's WebSocket to its site's hub (`GET /api/v1/agent/channel`). Each message the device
 * sends carries an id; `request` resolves with the hub's answer carrying it back as `ref`. Commands
 * and pushes the hub sends on its own go to `onCommand`; when the socket closes, `onClose` hears the
 * close code (4401 new key needed, 4403 inactive, 4409 replaced, others: reconnect).
 */
export class DeviceChannel {
  private nextId = 0;
  private readonly pending = new Map<string, (message: HubMessage | undefined) => void>();
  closed = false;
  private opened = false;
  /** The device closed it (a restart, stopping): calls cut short by that are not failures of the service. */
  private closedByDevice = false;
  /** The heartbeat interval the hub asked for in its greeting (seconds), once greeted. */
  helloHeartbeatS: number | undefined;

  private constructor(private readonly socket: WebSocket, private readonly stats: FleetStats, private readonly handlers: ChannelHandlers) {
    socket.on("message", (data) => this.receive(data.toString()));
    socket.on("close", (code) => this.finish(code));
    socket.on("error", () => this.finish(1006));
  }

  /** Opens the channel; refusals (401, 403, 404, 429) come back as an HTTP status, as the route answers them. */
  static open(url: string, headers: Record<string, string>, stats: FleetStats, handlers: ChannelHandlers, signal: AbortSignal): Promise<OpenOutcome> {
    const started = performance.now();
    const socket = new WebSocket(`${url.replace(/^http/, "ws")}/api/v1/agent/channel`, { headers, handshakeTimeout: ANSWER_TIMEOUT_MS });
    return new Promise<OpenOutcome>((resolve) => {
      let settled = false;
      const settle = (outcome: OpenOutcome) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener("abort", abort);
        if (outcome.ok || outcome.status !== "network") stats.record("channel", outcome.ok ? 101 : outcome.status, performance.now() - started);
        else stats.record("channel", "network", 0);
        resolve(outcome);
      };
      const abort = () => {
        settled = true;
        socket.terminate();
        resolve({ ok: false, status: "network" });
      };
      signal.addEventListener("abort", abort, { once: true });
      // Listening before the socket opens, so the greeting and the commands sent right after it are not missed.
      const channel = new DeviceChannel(socket, stats, handlers);
      socket.once("open", () => {
        channel.opened = true;
        settle({ ok: true, channel });
      });
      socket.once("unexpected-response", (_request, response) => {
        settle({ ok: false, status: response.statusCode ?? 0 });
        socket.terminate();
      });
      socket.once("error", () => settle({ ok: false, status: "network" }));
    });
  }

  /** Sends one message and waits for the hub's answer to it; times the round trip as a call of `kind`. */
  async request<T extends DeviceMessageType>(kind: CallKind, message: Extract<DeviceMessage, { type: T }>): Promise<ChannelOutcome<Extract<HubMessage, { type: AnswerTo[T] }>>> {
    if (this.closed || this.socket.readyState !== WebSocket.OPEN) return { ok: false, status: "network" };
    const id = String(++this.nextId);
    const started = performance.now();
    const answer = await new Promise<HubMessage | undefined>((resolve) => {
      const timer = setTimeout(() => done(undefined), ANSWER_TIMEOUT_MS);
      const done = (reply: HubMessage | undefined) => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(reply);
      };
      this.pending.set(id, done);
      this.socket.send(JSON.stringify({ ...message, id }));
    });
    if (!answer) {
      if (!this.closedByDevice) this.stats.record(kind, "network", 0);
      return { ok: false, status: "network" };
    }
    const ms = performance.now() - started;
    if (answer.type === "error") {
      const status = STATUS_OF_ERROR[answer.code];
      this.stats.record(kind, status, ms);
      return { ok: false, status, retryAfterS: answer.retry_after_s };
    }
    this.stats.record(kind, 200, ms);
    return { ok: true, data: answer as Extract<HubMessage, { type: AnswerTo[T] }> };
  }

  close() {
    if (this.closed) return;
    this.closedByDevice = true;
    this.socket.close(1000, "device stopping");
    this.finish(1000);
  }

  private receive(text: string) {
    let message: HubMessage;
    try {
      message = JSON.parse(text) as HubMessage;
    } catch {
      return;
    }
    if (message.type === "hello") {
      this.helloHeartbeatS = message.next_heartbeat_s;
      return;
    }
    if (message.type === "command" || message.type === "push") {
      this.handlers.onCommand(message.command);
      return;
    }
    const ref = "ref" in message ? message.ref : undefined;
    if (ref !== undefined) this.pending.get(ref)?.(message);
  }

  private finish(code: number) {
    if (this.closed) return;
    this.closed = true;
    for (const resolve of [...this.pending.values()]) resolve(undefined);
    // A socket refused before it opened was reported by `open`; only an open channel's end is news.
    if (this.opened) this.handlers.onClose(code);
  }
}

export interface ChannelHandlers {
  onCommand(command: ChannelCommand): void;
  onClose(code: number): void;
}
