import { randomUUID } from "node:crypto";
import { bearer, deviceHeaders, type Api } from "./client";
import { DeviceChannel, type ChannelCommand } from "./channel";
import type { CallKind, FleetStats } from "./stats";

/** How often an emulated device calls (seconds), before jitter. */
export interface Cadence {
  heartbeatS: number;
  telemetryS: number;
  pollS: number;
}

/** `http`: every call over HTTP, commands by polling. `channel`: heartbeat, telemetry and commands over the device channel, HTTP while it is down. */
export type TransportMode = "http" | "channel";

/** How a device gets its key: the site's bootstrap key, or an operator's login creating and claiming an enrolment intent. */
export type EnrolmentMethod = { kind: "bootstrap"; bootstrapKey: string } | { kind: "operator"; email: string; password: string };

export interface DeviceOptions {
  api: Api;
  /** The service's base URL (the channel's WebSocket address is derived from it). */
  url: string;
  mode: TransportMode;
  siteId: string;
  name: string;
  cadence: Cadence;
  enrolment: Enroller;
  stats: FleetStats;
  /** Seconds a restart keeps the device offline. */
  restartS: number;
  /** Share of update commands that fail. */
  updateFailureRate: number;
}

type Outcome<T> = { ok: true; data: T } | { ok: false; status: number | "network"; retryAfterS?: number };

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

const jitter = (ms: number) => ms * (0.9 + Math.random() * 0.2);
const MAX_BACKOFF_MS = 30_000;
const UPDATE_COMMANDS = new Set(["update", "update_config", "update_firmware", "firmware_update", "config_update", "install_update"]);

/**
 * Sleeps `ms`, or less when one of `signals` aborts. Its listeners go when it ends (AbortSignal.any
 * would leave one on the fleet's signal per sleep until garbage collection).
 */
export function sleep(ms: number, ...signals: AbortSignal[]): Promise<void> {
  if (ms <= 0 || signals.some((s) => s.aborted)) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      for (const s of signals) s.removeEventListener("abort", done);
      resolve();
    }
    for (const s of signals) s.addEventListener("abort", done, { once: true });
  });
}

/** One API call, timed and counted; a transport failure is an outcome, not an exception. */
export async function timedCall<T>(stats: FleetStats, kind: CallKind, call: () => Promise<Answer<T>>): Promise<Outcome<T>> {
  const started = performance.now();
  try {
    const answer = await call();
    const ms = performance.now() - started;
    stats.record(kind, answer.response.status, ms);
    if (answer.response.ok && answer.data !== undefined) return { ok: true, data: answer.data };
    const retryAfter = Number(answer.response.headers.get("Retry-After"));
    return { ok: false, status: answer.response.status, retryAfterS: Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : undefined };
  } catch (error) {
    if ((error as { name?: string }).name === "AbortError") return { ok: false, status: "network" };
    stats.record(kind, "network", performance.now() - started);
    stats.recordNetworkCause(error);
    return { ok: false, status: "network" };
  }
}

/** Gets a device its id and key; shared by the whole fleet (one operator login, one enrolment at a time per slot). */
export class Enroller {
  private token: Promise<string> | undefined;
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  /**
   * `concurrency`: enrolments in flight at once. Each costs the service a bcrypt, and it lets one
   * client address run only a few of those at a time before it answers 429.
   */
  constructor(private readonly api: Api, private readonly siteId: string, private readonly method: EnrolmentMethod, private readonly stats: FleetStats, private readonly concurrency = 3) {}

  async enrol(name: string, signal: AbortSignal): Promise<Outcome<{ deviceId: string; apiKey: string }>> {
    while (this.running >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
    try {
      return this.method.kind === "bootstrap" ? await this.bootstrap(name, this.method.bootstrapKey, signal) : await this.claim(name, this.method, signal);
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }

  private async bootstrap(name: string, bootstrapKey: string, signal: AbortSignal): Promise<Outcome<{ deviceId: string; apiKey: string }>> {
    const answer = await timedCall(this.stats, "enrol", () => this.api.POST("/api/v1/devices/bootstrap-provision", {
      body: { site_id: this.siteId, bootstrap_key: bootstrapKey, device_name: name, device_type: "pos_terminal", os_details: "Fleet Edge emulator" },
      signal,
    }));
    return answer.ok ? { ok: true, data: { deviceId: answer.data.device_id, apiKey: answer.data.api_key } } : answer;
  }

  private async claim(name: string, operator: { email: string; password: string }, signal: AbortSignal): Promise<Outcome<{ deviceId: string; apiKey: string }>> {
    const token = await this.login(operator, signal);
    if (!token.ok) return token;
    const headers = bearer(token.data);
    const params = { path: { site_id: this.siteId } };
    const created = await timedCall(this.stats, "enrol", () => this.api.POST("/api/v1/sites/{site_id}/enrolment-intents", { params, headers, body: { expires_in_hours: 1 }, signal }));
    if (!created.ok) return this.loginFailed(created);
    // Only a new intent carries its claim token (a replayed creation does not; none is replayed here).
    if (!("claim_token" in created.data)) return { ok: false, status: 409 };
    const claimToken = created.data.claim_token;
    const intentId = created.data.intent_id;
    const approved = await timedCall(this.stats, "enrol", () => this.api.PUT("/api/v1/sites/{site_id}/enrolment-intents/{intent_id}", {
      params: { path: { site_id: this.siteId, intent_id: intentId } }, headers, body: { status: "approved" }, signal,
    }));
    if (!approved.ok) return this.loginFailed(approved);
    const claimed = await timedCall(this.stats, "enrol", () => this.api.POST("/api/v1/enrolment-intents/{intent_id}/claim", {
      params: { path: { intent_id: intentId } }, body: { claim_token: claimToken, device_name: name }, signal,
    }));
    return claimed.ok ? { ok: true, data: { deviceId: claimed.data.device_id, apiKey: claimed.data.api_key } } : claimed;
  }

  /** A 401 means the operator's token expired (or the service lost its users): log in again next time. */
  private loginFailed<T>(outcome: Outcome<T> & { ok: false }): Outcome<never> {
    if (outcome.status === 401) this.token = undefined;
    return outcome;
  }

  private async login(operator: { email: string; password: string }, signal: AbortSignal): Promise<Outcome<string>> {
    this.token ??= (async () => {
      const answer = await timedCall(this.stats, "enrol", () => this.api.POST("/api/v1/auth/login", { body: { email: operator.email, password: operator.password }, signal }));
      if (!answer.ok) throw Object.assign(new Error("login failed"), { outcome: answer });
      return answer.data.data.access_token;
    })();
    try {
      return { ok: true, data: await this.token };
    } catch (error) {
      this.token = undefined;
      const outcome = (error as { outcome?: Outcome<never> & { ok: false } }).outcome;
      return outcome ?? { ok: false, status: "network" };
    }
  }
}

/** Results a device remembers, so a redelivered command is acknowledged and reported again, never run twice. */
type Report = { status: "completed" | "failed"; result: Record<string, unknown>; error_message?: string };

/**
 * One emulated terminal: enrols, sends its DNA at boot, then heartbeats, sends telemetry and polls for
 * commands on its cadence (jittered), and executes what it receives. It follows the service's
 * `next_heartbeat_s` and `Retry-After`, backs off when the service cannot be reached, enrols again
 * when its key stops working (a service that lost its data) and keeps going until stopped.
 */
export class EmulatedDevice {
  deviceId: string | undefined;
  private apiKey = "";
  private bootId = randomUUID();
  private bootedAt = Date.now();
  private nextBeat = 0;
  private nextTelemetry = 0;
  private nextPoll = 0;
  private offlineUntil = 0;
  private failures = 0;
  private needsBoot = true;
  private nameTaken = 0;
  /** Whether the last heartbeat was answered 200 and the device is not restarting. */
  online = false;
  /** The open device channel, in channel mode; undefined while it is down (HTTP carries the calls meanwhile). */
  channel: DeviceChannel | undefined;
  private nextChannelAttempt = 0;
  private channelFailures = 0;
  /** The service has no device channel (404): this device stays on HTTP. */
  private channelMissing = false;
  /** Commands that came on the channel run one at a time, in the order they came. */
  private commandChain: Promise<void> = Promise.resolve();
  /** Cuts the current wait short when the channel drops, so HTTP takes over at once. */
  private nap = new AbortController();
  private signal: AbortSignal = new AbortController().signal;
  private readonly reports = new Map<string, Report>();
  private readonly metrics = { cpu: 20 + Math.random() * 20, memory: 40 + Math.random() * 20, disk: 50 + Math.random() * 20, transactions: 0 };

  constructor(private readonly options: DeviceOptions) {}

  async run(fleetSignal: AbortSignal): Promise<void> {
    // A stop signal of the device's own, following the fleet's: every call takes one listener on the
    // signal it is given, and fetch caps a signal it is given at 1,500 listeners, which a thousand
    // devices sharing one would pass.
    const own = new AbortController();
    fleetSignal.addEventListener("abort", () => own.abort(), { once: true });
    if (fleetSignal.aborted) own.abort();
    const signal = own.signal;
    const o = this.options;
    this.signal = signal;
    while (!signal.aborted) {
      if (!this.deviceId) {
        const name = this.nameTaken ? `${o.name}-${this.nameTaken}` : o.name;
        const enrolled = await o.enrolment.enrol(name, signal);
        if (signal.aborted) break;
        if (!enrolled.ok) {
          // The name is taken (this device enrolled before and lost its key): enrol under a new one.
          if (enrolled.status === 409) this.nameTaken++;
          await this.backOff(enrolled, signal);
          continue;
        }
        this.deviceId = enrolled.data.deviceId;
        this.apiKey = enrolled.data.apiKey;
        this.failures = 0;
        o.stats.enrolled++;
      }
      const now = Date.now();
      if (this.offlineUntil > now) {
        await sleep(this.offlineUntil - now, signal);
        continue;
      }
      if (this.needsBoot) {
        if (!(await this.boot(signal))) continue;
      }
      if (this.wantsChannel() && now >= this.nextChannelAttempt) {
        await this.openChannel(signal);
        continue;
      }
      // On the channel commands arrive by themselves: no polling.
      const due = Math.min(this.nextBeat, this.nextTelemetry, this.channel ? Infinity : this.nextPoll, this.wantsChannel() ? this.nextChannelAttempt : Infinity);
      if (due > now) {
        this.nap = new AbortController();
        await sleep(due - now, signal, this.nap.signal);
        continue;
      }
      if (now >= this.nextBeat) await this.heartbeat(signal);
      else if (now >= this.nextTelemetry) await this.telemetry(signal);
      else if (!this.channel) await this.poll(signal);
    }
    this.channel?.close();
    this.online = false;
  }

  private wantsChannel() {
    return this.options.mode === "channel" && !this.channel && !this.channelMissing;
  }

  /**
   * Opens the device channel. Refusals are read as the heartbeat's: 401 enrols again, 403 (suspended)
   * retries in a minute, 404 (a service without a channel) stays on HTTP; anything else retries with
   * backoff, HTTP carrying the calls meanwhile.
   */
  private async openChannel(signal: AbortSignal) {
    const opened = await DeviceChannel.open(this.options.url, this.headers(), this.options.stats, {
      onCommand: (command) => this.received(command),
      onClose: (code) => this.channelClosed(code),
    }, signal);
    if (signal.aborted) {
      if (opened.ok) opened.channel.close();
      return;
    }
    if (opened.ok) {
      this.channel = opened.channel;
      this.channelFailures = 0;
      // Presence over the channel starts with a heartbeat on it.
      this.nextBeat = Date.now();
      return;
    }
    if (opened.status === 404) this.channelMissing = true;
    else if (opened.status === 401) this.forgetKey();
    else if (opened.status === 403) this.nextChannelAttempt = Date.now() + jitter(60_000);
    else this.retryChannelLater();
  }

  private retryChannelLater() {
    this.channelFailures++;
    this.nextChannelAttempt = Date.now() + jitter(Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.min(this.channelFailures - 1, 5)));
  }

  /** The hub closed the channel (or it dropped): see docs/device-channel.md, "Closing codes". */
  private channelClosed(code: number) {
    this.channel = undefined;
    if (code === 4401) this.forgetKey();
    else if (code === 4403) {
      this.online = false;
      this.nextChannelAttempt = Date.now() + jitter(60_000);
    } else if (code === 1000) this.nextChannelAttempt = Date.now();
    else this.retryChannelLater();
    // Until it is back, heartbeats and command polls go over HTTP, starting now.
    this.nextPoll = Math.min(this.nextPoll, Date.now());
    this.nap.abort();
  }

  /** A command the hub sent on the channel: run after those before it. */
  private received(command: ChannelCommand) {
    this.commandChain = this.commandChain.then(() => {
      if (this.signal.aborted || this.offlineUntil > Date.now()) return;
      return this.execute(command.command_id, command.command_type, command.payload, this.signal);
    }).catch(() => undefined);
  }

  private forgetKey() {
    this.deviceId = undefined;
    this.needsBoot = true;
    this.online = false;
    this.channel?.close();
  }

  private headers() {
    return deviceHeaders(this.deviceId!, this.apiKey);
  }

  /** After power-on: a new boot id, DNA, then every schedule starts (spread over its interval). */
  private async boot(signal: AbortSignal): Promise<boolean> {
    const o = this.options;
    const dna = await timedCall(o.stats, "dna", () => o.api.POST("/api/v1/agent/device-dna", {
      headers: this.headers(), signal,
      body: {
        mac_address: macOf(this.deviceId!), local_ip: `10.${hash(this.deviceId!) % 250}.${hash(o.name) % 250}.${(hash(this.bootId) % 250) + 2}`,
        hostname: o.name, os_details: "Fleet Edge emulator (Linux 6.6)", firmware: "emu-1.0.0",
      },
    }));
    if (!dna.ok) {
      await this.handleFailure(dna, signal);
      return false;
    }
    this.needsBoot = false;
    const now = Date.now();
    this.nextBeat = now;
    this.nextTelemetry = now + Math.random() * o.cadence.telemetryS * 1000;
    this.nextPoll = now + Math.random() * o.cadence.pollS * 1000;
    return true;
  }

  private async heartbeat(signal: AbortSignal) {
    const o = this.options;
    const body = { status: "online" as const, uptime_seconds: this.uptimeS(), boot_id: this.bootId, heartbeat_interval_s: Math.max(1, Math.round(o.cadence.heartbeatS)), timestamp: new Date().toISOString() };
    const channel = this.channel;
    const answer = channel
      ? await channel.request("heartbeat", { type: "heartbeat", ...body })
      : await timedCall(o.stats, "heartbeat", () => o.api.POST("/api/v1/agent/heartbeat", { headers: this.headers(), signal, body }));
    if (!answer.ok && channel && answer.status === "network") {
      // The channel is gone or stuck: drop it and send this heartbeat over HTTP now.
      channel.close();
      return;
    }
    if (!answer.ok) {
      this.online = false;
      this.nextBeat = Date.now() + jitter(o.cadence.heartbeatS * 1000);
      await this.handleFailure(answer, signal);
      return;
    }
    this.failures = 0;
    this.online = true;
    // The service says when it expects the next one.
    this.nextBeat = Date.now() + jitter(answer.data.next_heartbeat_s * 1000);
  }

  private async telemetry(signal: AbortSignal) {
    const o = this.options;
    const m = this.metrics;
    m.cpu = walk(m.cpu, 8, 2, 98);
    m.memory = walk(m.memory, 3, 10, 95);
    m.disk = walk(m.disk, 0.2, 5, 99);
    m.transactions += Math.floor(Math.random() * 5);
    this.nextTelemetry = Date.now() + jitter(o.cadence.telemetryS * 1000);
    const sample = {
      cpu_usage: round(m.cpu), memory_usage: round(m.memory), disk_usage: round(m.disk), temperature: round(38 + m.cpu / 5),
      network_latency_ms: Math.round(8 + Math.random() * 30), transaction_count: m.transactions, uptime_seconds: this.uptimeS(),
      error_rate: round(Math.random() * 0.02, 3), boot_id: this.bootId, timestamp: new Date().toISOString(),
    };
    const channel = this.channel;
    const answer = channel
      ? await channel.request("telemetry", { type: "telemetry", samples: [sample] })
      : await timedCall(o.stats, "telemetry", () => o.api.POST("/api/v1/agent/telemetry", { headers: this.headers(), signal, body: sample }));
    if (!answer.ok && channel && answer.status === "network") channel.close();
    else if (!answer.ok) await this.handleFailure(answer, signal);
    else this.failures = 0;
  }

  private async poll(signal: AbortSignal) {
    const o = this.options;
    this.nextPoll = Date.now() + jitter(o.cadence.pollS * 1000);
    const answer = await timedCall(o.stats, "poll", () => o.api.GET("/api/v1/devices/pending", { headers: this.headers(), signal }));
    if (!answer.ok) {
      await this.handleFailure(answer, signal);
      return;
    }
    this.failures = 0;
    for (const command of answer.data.commands) {
      if (signal.aborted) return;
      await this.execute(command.command_id, command.command_type, command.payload, signal);
      // A restart takes the device down at once; what is left is delivered again after it is back.
      if (this.offlineUntil > Date.now()) return;
    }
  }

  /** Acknowledges, runs and reports one command; a command already run is only acknowledged and reported again. */
  private async execute(commandId: string, type: string, payload: Record<string, unknown>, signal: AbortSignal) {
    const o = this.options;
    // Acks and results go on whichever path is up: the service takes them on either.
    const ackChannel = this.channel;
    const ack = ackChannel
      ? await ackChannel.request("ack", { type: "ack", command_id: commandId })
      : await timedCall(o.stats, "ack", () => o.api.POST("/api/v1/commands/{command_id}/ack", { params: { path: { command_id: commandId } }, headers: this.headers(), signal }));
    if (!ack.ok && ack.status === "network" && ackChannel) {
      // The channel dropped: the lease lapses and the command comes again, on the next channel or poll.
      ackChannel.close();
      return;
    }
    let report = this.reports.get(commandId);
    // 409: the command is finished or cancelled. Only a command this device already ran is reported again.
    if (!ack.ok && (ack.status !== 409 || !report)) {
      if (ack.status !== 409) await this.handleFailure(ack, signal);
      return;
    }
    if (!report) {
      o.stats.commands.received++;
      o.stats.noteExecution(commandId);
      report = this.perform(type, payload);
      this.reports.set(commandId, report);
      if (this.reports.size > 1000) this.reports.delete(this.reports.keys().next().value!);
    }
    const done = report;
    const reportChannel = this.channel;
    const answer = reportChannel
      ? await reportChannel.request("report", { type: "result", command_id: commandId, status: done.status, result: done.result, error_message: done.error_message ?? null })
      : await timedCall(o.stats, "report", () => o.api.PUT("/api/v1/commands/{command_id}/status", {
        params: { path: { command_id: commandId } }, headers: this.headers(), signal,
        body: { status: done.status, result: done.result, error_message: done.error_message ?? null },
      }));
    if (answer.ok) {
      if (done.status === "completed") o.stats.commands.completed++;
      else o.stats.commands.failed++;
    } else if (answer.status === "network" && reportChannel) {
      reportChannel.close();
    } else if (answer.status !== 409) {
      await this.handleFailure(answer, signal);
    }
    if (type === "restart" || type === "reboot") this.restart();
  }

  /** What a terminal does with a command: a restart reboots it, an update sometimes fails, the rest succeed. */
  private perform(type: string, payload: Record<string, unknown>): Report {
    const o = this.options;
    if (type === "restart" || type === "reboot") return { status: "completed", result: { restarting: true, offline_s: o.restartS } };
    if (UPDATE_COMMANDS.has(type)) {
      const version = String(payload.config_version ?? payload.version ?? "latest");
      if (Math.random() < o.updateFailureRate) {
        return { status: "failed", result: { version, stage: "verify" }, error_message: `Update to ${version} failed: checksum mismatch after download` };
      }
      return { status: "completed", result: { version, applied_at: new Date().toISOString() } };
    }
    return { status: "completed", result: { command_type: type, handled_at: new Date().toISOString() } };
  }

  /** Offline for `restartS`, then boots again (new boot id, uptime from zero, DNA). */
  private restart() {
    this.online = false;
    this.channel?.close();
    this.offlineUntil = Date.now() + jitter(this.options.restartS * 1000);
    this.bootId = randomUUID();
    this.bootedAt = this.offlineUntil;
    this.needsBoot = true;
  }

  /**
   * 429/503: wait as told. 401: the key no longer works (the service lost its data, or the key was
   * rotated): enrol again. Unreachable or 5xx: back off exponentially. Other answers: carry on.
   */
  private async handleFailure(outcome: Outcome<unknown> & { ok: false }, signal: AbortSignal) {
    if (outcome.status === 401) {
      this.forgetKey();
      return;
    }
    if (outcome.status === 403) {
      // Suspended: try again now and then, without hammering.
      this.online = false;
      await sleep(jitter(60_000), signal);
      return;
    }
    await this.backOff(outcome, signal);
  }

  private async backOff(outcome: Outcome<unknown> & { ok: false }, signal: AbortSignal) {
    if (outcome.retryAfterS !== undefined) {
      await sleep(jitter(outcome.retryAfterS * 1000), signal);
      return;
    }
    if (outcome.status === "network" || (typeof outcome.status === "number" && outcome.status >= 500)) {
      this.online = false;
      this.failures++;
      await sleep(jitter(Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.min(this.failures - 1, 5))), signal);
      return;
    }
    // A refusal that waiting will not change (e.g. a name already taken): slow down.
    this.failures++;
    await sleep(jitter(Math.min(MAX_BACKOFF_MS, 5000 * this.failures)), signal);
  }

  private uptimeS() {
    return Math.max(0, Math.floor((Date.now() - this.bootedAt) / 1000));
  }
}

const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits;
const walk = (value: number, step: number, min: number, max: number) => Math.min(max, Math.max(min, value + (Math.random() - 0.5) * 2 * step));

function hash(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

function macOf(deviceId: string): string {
  const h = hash(deviceId);
  const bytes = [0x02, 0xfe, (h >>> 24) & 0xff, (h >>> 16) & 0xff, (h >>> 8) & 0xff, h & 0xff];
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}
