/**
 * Devices' channel sockets, held by the SiteHub next to the live channel's subscribers but apart
 * from them: a device socket carries the `device` tag (and `device:<id>`), never gets live events, and
 * does not count against the subscription caps.
 *
 * Sockets use the hibernation API: the device id and the digest of the key that opened the socket live
 * in its attachment, so the hub can sleep between messages and still know who is talking. The text
 * `ping` is answered with `pong` by the runtime without waking the hub (the hub's auto-response).
 *
 * A message does exactly what the matching HTTP call does, through the same hub methods (admission,
 * the per-device rate limit, presence, metrics deltas, the command state machine): this module only
 * parses, dispatches and answers. docs/device-channel.md is the protocol as a device sees it.
 */
import {
  CHANNEL_BAD_MESSAGE_BURST, CHANNEL_BAD_MESSAGE_REFILL_MS, CHANNEL_CLOSE, CHANNEL_MAX_MESSAGE_BYTES, DEVICE_SOCKET_TAG, DeviceChannelMessageSchema,
  type ChannelErrorCode, type DeviceChannelMessage, type HubChannelMessage,
} from "../src/shared/device-channel";
import type {
  AckBody, Admission, CommandRecord, CommandReport, HeartbeatResult, NotAdmitted, Outcome, RateLimited, Sample, Sighting, StoreDecision,
} from "../src/shared/hub-contract";
import { iso, normaliseTimestamp } from "../src/shared/time";
import { closeQuietly, isOpen } from "./live-socket";

const deviceTag = (deviceId: string) => `device:${deviceId}`;

interface DeviceSocketAttachment {
  kind: "device";
  device_id: string;
  key_digest: string;
  /** SHA-256 of the bcrypt hash the key was verified against when the socket opened. */
  hash_fingerprint: string;
  connected_ms: number;
  bad_tokens?: number;
  bad_at?: number;
}

/** What a channel message needs from the hub: the same methods its HTTP calls use. */
export interface ChannelHost {
  siteId(): string;
  now(): number;
  /**
   * Admits the socket's key again before each message. The hub forgets verified keys when it sleeps;
   * a key verified against a hash that is still the device's is admitted again without a bcrypt.
   */
  readmit(deviceId: string, keyDigest: string, hashFingerprint: string): Promise<Admission>;
  heartbeat(keyDigest: string, sighting: Sighting): Promise<HeartbeatResult | RateLimited | NotAdmitted>;
  telemetry(keyDigest: string, deviceId: string, samples: Sample[]): Promise<StoreDecision[] | RateLimited | NotAdmitted>;
  ack(deviceId: string, commandId: string): Promise<Outcome<AckBody>>;
  report(deviceId: string, commandId: string, report: CommandReport): Promise<Outcome<CommandRecord>>;
}

export const isDeviceSocket = (ctx: DurableObjectState, ws: WebSocket) => ctx.getTags(ws).includes(DEVICE_SOCKET_TAG);

function attachmentOf(ws: WebSocket): DeviceSocketAttachment | undefined {
  try {
    const value = ws.deserializeAttachment() as DeviceSocketAttachment | null;
    return value?.kind === "device" ? value : undefined;
  } catch {
    return undefined;
  }
}

export const deviceOf = (ws: WebSocket) => attachmentOf(ws)?.device_id;
export const keyDigestOf = (ws: WebSocket) => attachmentOf(ws)?.key_digest;

export function send(ws: WebSocket, message: HubChannelMessage): boolean {
  try {
    ws.send(JSON.stringify(message));
    return true;
  } catch {
    // The socket is closing; webSocketClose cleans up.
    return false;
  }
}

export class DeviceChannels {
  constructor(private readonly ctx: DurableObjectState, private readonly now: () => number, private readonly siteId: () => string) {}

  /** The device's open channel sockets (normally one: a new one replaces the old). */
  socketsOf(deviceId: string): WebSocket[] {
    return this.ctx.getWebSockets(deviceTag(deviceId)).filter(isOpen);
  }

  connected(deviceId: string): boolean {
    return this.socketsOf(deviceId).length > 0;
  }

  /** Every device with an open channel socket here. */
  connectedDevices(): string[] {
    const ids = this.ctx.getWebSockets(DEVICE_SOCKET_TAG).filter(isOpen).map(deviceOf).filter((id): id is string => id !== undefined);
    return [...new Set(ids)];
  }

  /**
   * Accepts an admitted device's socket (closing an older one of the same device), greets it, and
   * returns the 101 for the Worker to hand back.
   */
  accept(deviceId: string, keyDigest: string, hashFingerprint: string, hello: { next_heartbeat_s: number; desired_version: number }): { response: Response; socket: WebSocket } {
    for (const old of this.socketsOf(deviceId)) closeQuietly(old, CHANNEL_CLOSE.replaced.code, CHANNEL_CLOSE.replaced.reason);
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server, [DEVICE_SOCKET_TAG, deviceTag(deviceId)]);
    const now = this.now();
    server.serializeAttachment({
      kind: "device", device_id: deviceId, key_digest: keyDigest, hash_fingerprint: hashFingerprint, connected_ms: now,
    } satisfies DeviceSocketAttachment);
    send(server, { type: "hello", device_id: deviceId, site_id: this.siteId(), next_heartbeat_s: hello.next_heartbeat_s, server_time: iso(now), desired_version: hello.desired_version });
    return { response: new Response(null, { status: 101, webSocket: client }), socket: server };
  }

  /** Closes every channel socket of the device with the given close code (a lifecycle or key change). */
  close(deviceId: string, why: (typeof CHANNEL_CLOSE)[keyof typeof CHANNEL_CLOSE]): number {
    const sockets = this.socketsOf(deviceId);
    for (const ws of sockets) closeQuietly(ws, why.code, why.reason);
    return sockets.length;
  }

  /** One message from a device socket: parsed, done through the host, answered on the same socket. */
  async handle(ws: WebSocket, raw: string | ArrayBuffer, host: ChannelHost): Promise<void> {
    const attachment = attachmentOf(ws);
    if (!attachment) return closeQuietly(ws, 1011, "unknown socket");
    if (typeof raw !== "string") return this.bad(ws, undefined, "Binary messages are not understood; send JSON text");
    if (raw === "ping") return void ws.send("pong");
    if (raw.length > CHANNEL_MAX_MESSAGE_BYTES) return this.bad(ws, undefined, `Messages are limited to ${CHANNEL_MAX_MESSAGE_BYTES} bytes`);
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch {
      return this.bad(ws, undefined, "Messages must be JSON");
    }
    const parsed = DeviceChannelMessageSchema.safeParse(json);
    if (!parsed.success) {
      const ref = typeof json === "object" && json !== null && "id" in json && typeof json.id === "string" ? json.id : undefined;
      const issue = parsed.error.issues[0];
      const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
      return this.bad(ws, ref, `${where}${issue?.message ?? "invalid message"} (types: heartbeat, telemetry, ack, result, ping)`);
    }
    await this.dispatch(ws, attachment, parsed.data, host);
  }

  private async dispatch(ws: WebSocket, socket: DeviceSocketAttachment, message: DeviceChannelMessage, host: ChannelHost) {
    const { device_id: deviceId, key_digest: keyDigest } = socket;
    const ref = message.id;
    const now = () => iso(host.now());
    const admission = await host.readmit(deviceId, keyDigest, socket.hash_fingerprint);
    if (admission.result !== "ok") return this.closeFor(ws, admission);
    switch (message.type) {
      case "ping":
        send(ws, { type: "pong", ref, server_time: now() });
        return;
      case "heartbeat": {
        const result = await host.heartbeat(keyDigest, {
          deviceId,
          reportedStatus: message.status === "error" || message.status === "unhealthy" ? "error" : undefined,
          intervalS: message.heartbeat_interval_s,
          bootId: message.boot_id,
          uptimeS: message.uptime_seconds,
          reportedAt: message.timestamp ? normaliseTimestamp(message.timestamp) : undefined,
        });
        if (this.refused(ws, ref, result)) return;
        send(ws, { type: "heartbeat.ok", ref, device_status: result.status, next_heartbeat_s: result.next_heartbeat_s, server_time: result.server_time, desired_version: result.desired_version });
        return;
      }
      case "telemetry": {
        const samples = message.samples.map((sample) => ({ ...sample, timestamp: sample.timestamp ? normaliseTimestamp(sample.timestamp) : undefined }));
        const results = await host.telemetry(keyDigest, deviceId, samples);
        if (this.refused(ws, ref, results)) return;
        send(ws, { type: "telemetry.ok", ref, results, stored_count: results.filter((r) => r.stored).length, server_time: now() });
        return;
      }
      case "ack": {
        const outcome = await host.ack(deviceId, message.command_id);
        if (!outcome.ok) return this.refusal(ws, ref, outcome.error);
        send(ws, { type: "ack.ok", ref, command_id: outcome.value.command_id, acknowledged_at: outcome.value.acknowledged_at });
        return;
      }
      case "result": {
        const status = message.status === "success" || message.status === "completed" ? "completed" : "failed";
        const outcome = await host.report(deviceId, message.command_id, { status, result: message.result, errorMessage: message.error_message ?? null });
        if (!outcome.ok) return this.refusal(ws, ref, outcome.error);
        send(ws, { type: "result.ok", ref, command: outcome.value });
        return;
      }
    }
  }

  /**
   * A heartbeat or telemetry the hub did not take: a key no longer admitted closes the socket (the
   * device must reconnect, and so be admitted again); a rate limit is an error message.
   */
  private refused<T>(ws: WebSocket, ref: string | undefined, result: T | RateLimited | NotAdmitted): result is RateLimited | NotAdmitted {
    if (typeof result !== "object" || result === null) return false;
    if ("notAdmitted" in result) {
      this.closeFor(ws, result.notAdmitted);
      return true;
    }
    if ("rateLimited" in result) {
      this.error(ws, ref, "rate_limited", "Too many calls from this device", result.retryAfterS);
      return true;
    }
    return false;
  }

  /** A key no longer admitted ends the socket: the device must reconnect, and so be admitted afresh. */
  private closeFor(ws: WebSocket, admission: Exclude<Admission, { result: "ok" }>) {
    const why = admission.result === "inactive" ? CHANNEL_CLOSE.inactive : CHANNEL_CLOSE.credentials;
    closeQuietly(ws, why.code, why.reason);
  }

  private refusal(ws: WebSocket, ref: string | undefined, error: { status: number; detail: string; retryAfterS?: number }) {
    const code: ChannelErrorCode = error.status === 404 ? "not_found" : error.status === 409 ? "conflict" : error.status === 429 ? "rate_limited" : "invalid";
    this.error(ws, ref, code, error.detail, error.retryAfterS);
  }

  private error(ws: WebSocket, ref: string | undefined, code: ChannelErrorCode, detail: string, retryAfterS?: number) {
    send(ws, { type: "error", ref, code, detail, ...(retryAfterS ? { retry_after_s: retryAfterS } : {}) });
  }

  /**
   * A message the hub could not understand: answered with an error, and counted. A socket that keeps
   * sending them (more than the burst, faster than the refill) is closed: it is broken or hostile,
   * and every message wakes the hub.
   */
  private bad(ws: WebSocket, ref: string | undefined, detail: string) {
    const attachment = attachmentOf(ws);
    if (!attachment) return;
    const now = this.now();
    const last = attachment.bad_at ?? now;
    const tokens = Math.min(CHANNEL_BAD_MESSAGE_BURST, (attachment.bad_tokens ?? CHANNEL_BAD_MESSAGE_BURST) + Math.max(0, now - last) / CHANNEL_BAD_MESSAGE_REFILL_MS);
    if (tokens < 1) {
      this.error(ws, ref, "bad_message", `${detail}. Too many bad messages: closing`);
      closeQuietly(ws, CHANNEL_CLOSE.abuse.code, CHANNEL_CLOSE.abuse.reason);
      return;
    }
    ws.serializeAttachment({ ...attachment, bad_tokens: tokens - 1, bad_at: now });
    this.error(ws, ref, "bad_message", detail);
  }
}
