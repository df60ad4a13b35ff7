import { DurableObject } from "cloudflare:workers";
import { readConfig, type HubBindings } from "../src/shared/config";
import {
  SUBSCRIBER_HEADER, SubscriberSchema, ok, refuse,
  type Revocation, type RevocationResult,
  type AckBody, type Admission, type AgentDevice, type AgentSnapshot, type CommandRecord, type CommandReport, type HeartbeatResult,
  type JobSpec, type LiveEvent, type NotAdmitted, type Outcome, type PushInput, type PushResult, type QueueInput, type RateLimited,
  type RosterDevice, type Sample, type SeriesRequest, type Sighting, type SiteHealth, type SiteHealthJson, type StoreDecision, type Subscriber,
  type DeviceAnomaly, type DeviceRiskSummary,
} from "../src/shared/hub-contract";
import type { CommandStatus, DiagnosticComponent, JobStatus } from "../src/shared/vocabulary";
import { iso, systemClock, type Clock } from "../src/shared/time";
import { summariseSiteHealth } from "./site-health";
import { LIVE_SCHEMA, LiveRing, migrateLiveEvents } from "./live";
import { DeviceRateLimiter } from "./rate-limit";
import { DeviceCredentials } from "./credentials";
import { DEFAULT_INTERVAL_S, LAST_SEEN_FLUSH_MS, PRESENCE_SCHEMA, Presence, migratePresence, offlineAfterMs, type Transition } from "./presence";
import { METRICS_SCHEMA, MetricsStore, migrateMetricsHistory } from "./metrics";
import { AGENTS_SCHEMA, Agents } from "./agent-store";
import { AgentRuntime, PRUNE_EVERY_MS } from "./agent-runtime";
import {
  SUBSCRIPTION_RETRY_AFTER_S, SseChannel, acceptSubscriber, closeQuietly, handleClientMessage, openSockets, openSocketsOf, parseSince,
  replayFrom, revokeSockets, subscriberOf, subscriptionRefusal, type SubscriptionLimits,
} from "./live-socket";
import { D1Outbox, OUTBOX_FLUSH_MS, OUTBOX_SCHEMA } from "./outbox";
import { COMMANDS_SCHEMA, CommandQueue } from "./commands";
import { JOBS_SCHEMA, JobRunner } from "./jobs";
import { ENROLMENT_QUOTA_SCHEMA, EnrolmentQuota } from "./enrolment-quota";
import type { TimedPart } from "./timed-part";
import type { RolloutDeviceReport } from "../src/shared/rollout-contract";
import { sha256Hex } from "../src/shared/ids";
import { DeviceChannels, isDeviceSocket, keyDigestOf, send, type ChannelHost } from "./device-channel";
import { CHANNEL_CLOSE, DEVICE_CHANNEL_HEADER, DeviceChannelOpenSchema, NOT_ADMITTED_HEADER } from "../src/shared/device-channel";
import { AiAssessor } from "./ai-assessment";
import type { AnomalyAssessment, MetricValues } from "../src/shared/ai-engine";
import { TWINS_SCHEMA, Twins } from "./twins";
import type { DesiredPatchResult, JsonObject, TwinDeviceSeed, TwinDrift, TwinState, TwinSyncChange, TwinTemplateSet } from "../src/shared/twin";
import { ROSTER_SCHEMA, Roster } from "./roster";
import { countWrites, serialiseHealth, type SiteView } from "./site-view";
import { eraseDeviceCommands, eraseDeviceHistory } from "./device-release";
import type { DeviceRelease, ReleasedDevice } from "../src/shared/hub-contract";
import { AUDIT_STREAM_NAME, NUDGE_URL } from "../src/shared/audit-stream-contract";

/** A long poll waits at most this long (real time: it holds the device's request open). */
const MAX_POLL_WAIT_MS = 25_000;

/**
 * One per site (named by site_id): everything live about the site — presence, metrics delta state,
 * command queue, job fan-out, simulated agents — in its own SQLite, plus the fan-out of changes to
 * dashboards. The Worker talks to it over RPC through src/hub/client.ts, whose replies are parsed
 * against src/shared/hub-contract.ts; `fetch` is only for live subscriptions. Everything it writes to
 * D1 goes through its outbox (durable-objects/outbox.ts). docs/architecture.md has the whole picture.
 */
export class SiteHub extends DurableObject<HubBindings> {
  /**
   * Where the hub reads the time and writes D1. Tests replace them inside the object
   * (`runInDurableObject`) to move time and to make D1 fail; nothing else does.
   */
  clock: Clock = systemClock;
  database: D1Database;

  protected readonly sql: SqlStorage;
  protected readonly live: LiveRing;
  protected readonly presence: Presence;
  protected readonly metrics: MetricsStore;
  protected readonly limiter = new DeviceRateLimiter();
  protected readonly credentials: DeviceCredentials;
  protected readonly outbox: D1Outbox;
  protected readonly commands: CommandQueue;
  protected readonly jobs: JobRunner;
  protected readonly agents: Agents;
  protected readonly agentRuntime: AgentRuntime;
  protected readonly enrolments: EnrolmentQuota;
  protected readonly assessor: AiAssessor;
  protected readonly roster: Roster;
  private readonly sse = new SseChannel();
  protected readonly deviceChannels: DeviceChannels;
  protected readonly twins: Twins;
  private readonly subscriptionLimits: SubscriptionLimits;
  private siteIdValue: string | undefined;
  /** In-memory copy of the scheduled alarm time, so hot calls do not read storage to check it. */
  private alarmAt: number | null | undefined;
  /** Statements that changed the hub's storage since it started (site-view.ts). */
  private writes = 0;
  private siteView: SiteView | undefined;

  constructor(ctx: DurableObjectState, env: HubBindings) {
    super(ctx, env);
    const config = readConfig(env);
    this.database = env.DB;
    this.subscriptionLimits = config.live;
    this.sql = countWrites(ctx.storage.sql, () => { this.writes++; });
    // Tables whose layout changed are rebuilt before the schema below is taken as it stands.
    migrateLiveEvents(this.sql);
    migrateMetricsHistory(this.sql);
    this.sql.exec(LIVE_SCHEMA + PRESENCE_SCHEMA + METRICS_SCHEMA + AGENTS_SCHEMA + OUTBOX_SCHEMA + COMMANDS_SCHEMA + JOBS_SCHEMA + ENROLMENT_QUOTA_SCHEMA + ROSTER_SCHEMA);
    this.sql.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    migratePresence(this.sql);
    this.siteIdValue = this.meta("site_id");
    const now = () => this.now();
    const d1 = () => this.database;
    const siteId = () => this.siteId;
    const emit = (type: string, data: unknown) => { this.emit(type, data); };
    this.live = new LiveRing(this.sql, siteId);
    this.presence = new Presence(this.sql);
    this.metrics = new MetricsStore(this.sql, config.metrics);
    this.credentials = new DeviceCredentials(d1, siteId);
    this.enrolments = new EnrolmentQuota(this.sql);
    this.roster = new Roster({ sql: this.sql, d1, siteId, meta: (key) => this.meta(key), setMeta: (key, value) => { this.setMeta(key, value); } });
    this.outbox = new D1Outbox(this.sql, d1, siteId, now, () => this.nudgeAuditStream());
    this.agents = new Agents(this.sql, config.agentFailureRate);
    this.agentRuntime = new AgentRuntime(this.sql, {
      siteId, d1, now, emit,
      outbox: this.outbox,
      agents: this.agents,
      presence: this.presence,
      metrics: this.metrics,
      applyTransitions: (transitions) => this.applyTransitions(transitions),
      ensureAlarm: (at, neededBy) => this.ensureAlarm(at, neededBy),
      watching: () => this.watching(),
      meta: (key) => this.meta(key),
      setMeta: (key, value) => { this.setMeta(key, value); },
    });
    this.commands = new CommandQueue(this.sql, {
      siteId, emit,
      outbox: this.outbox,
      onTransition: (row, at) => this.jobs.onCommandTransition(row, at),
      runOnAgent: (row, run, at) => this.agentRuntime.runCommandOnAgent(row, run, at),
    });
    this.jobs = new JobRunner(this.sql, { siteId, d1, now, emit, outbox: this.outbox, commands: this.commands });
    this.deviceChannels = new DeviceChannels(ctx, now, siteId);
    this.assessor = new AiAssessor(this.sql, this.metrics);
    this.sql.exec(TWINS_SCHEMA);
    this.twins = new Twins(this.sql, {
      siteId, now, d1, emit,
      meta: (key) => this.meta(key),
      setMeta: (key, value) => { this.setMeta(key, value); },
      sendDelta: (deviceId, message) => {
        const [socket] = this.deviceChannels.socketsOf(deviceId);
        if (socket) send(socket, message);
      },
    });
    // Subscribers' keep-alive `ping` is answered without waking the hub from hibernation.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  protected now(): number {
    return this.clock.now();
  }

  private meta(key: string): string | undefined {
    return this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = ?", key).toArray()[0]?.value;
  }

  private setMeta(key: string, value: string) {
    this.sql.exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value);
  }

  /** Every RPC names its site; the first one is remembered so alarms know where they are. */
  protected bind(siteId: string) {
    if (this.siteIdValue === siteId) return;
    this.siteIdValue = siteId;
    this.setMeta("site_id", siteId);
  }

  get siteId(): string {
    return this.siteIdValue ?? "";
  }

  // ---- service ------------------------------------------------------------------------------

  /** Liveness probe for the service status: answers from the hub's own storage. */
  async ping(): Promise<{ ok: true; events: number }> {
    return { ok: true, events: this.live.oldestSeq() };
  }

  // ---- device calls (the hot path: no D1 read or write unless something changed) -------------

  /** Admits a device call by its key digest (see credentials.ts); the Worker answers 401/403 from it. */
  async admitDevice(siteId: string, deviceId: string, keyDigest: string): Promise<Admission> {
    this.bind(siteId);
    return this.credentials.admit(deviceId, keyDigest, this.now());
  }

  async confirmDeviceKey(siteId: string, deviceId: string, keyDigest: string, bcryptHash: string): Promise<Admission> {
    this.bind(siteId);
    return this.credentials.confirm(deviceId, keyDigest, bcryptHash, this.now());
  }

  /**
   * The device's key, lifecycle or settings changed in D1: its credential is re-read at once, and an
   * operator's new heartbeat interval applies to presence right away.
   */
  async deviceChanged(siteId: string, deviceId: string): Promise<void> {
    this.bind(siteId);
    const now = this.now();
    await this.roster.refreshDevice(deviceId);
    const interval = await this.credentials.refresh(deviceId, now);
    await this.closeChannelsNoLongerAdmitted(deviceId, now);
    await this.twins.refreshSegment(deviceId);
    if (interval === undefined || !this.presence.get(deviceId)) return;
    this.presence.configure(deviceId, interval);
    await this.ensureAlarm(now);
  }

  /**
   * Takes one of the device's call tokens for a device call served outside the hub (its logs, audit
   * events, configuration history, push polls), so every call a device makes shares one budget.
   * Returns 0 when admitted, else the seconds to wait.
   */
  async takeDeviceCallToken(siteId: string, deviceId: string): Promise<number> {
    this.bind(siteId);
    return this.limiter.take(deviceId, this.now());
  }

  async heartbeat(siteId: string, keyDigest: string, sighting: Sighting): Promise<HeartbeatResult | RateLimited | NotAdmitted> {
    this.bind(siteId);
    const now = this.now();
    const admission = await this.credentials.admit(sighting.deviceId, keyDigest, now);
    if (admission.result !== "ok") return { notAdmitted: admission };
    const wait = this.limiter.take(sighting.deviceId, now);
    if (wait) return { rateLimited: true, retryAfterS: wait };
    const { row, transition, restarted } = this.presence.sighted(sighting, now, this.credentials.configuredIntervalS(sighting.deviceId));
    if (restarted) this.metrics.noteRestart(sighting.deviceId);
    if (transition) await this.applyTransitions([transition]);
    await this.ensureAlarm(now, now + offlineAfterMs(row.interval_s));
    const beatBy = this.agentRuntime.noteBeat(sighting.deviceId, row.status, now);
    if (beatBy !== undefined) await this.ensureAlarm(now, beatBy);
    return { status: row.status, next_heartbeat_s: row.interval_s, server_time: iso(now), desired_version: await this.twinVersionOf(sighting.deviceId) };
  }

  async telemetry(siteId: string, keyDigest: string, deviceId: string, samples: Sample[]): Promise<StoreDecision[] | RateLimited | NotAdmitted> {
    this.bind(siteId);
    const now = this.now();
    const admission = await this.credentials.admit(deviceId, keyDigest, now);
    if (admission.result !== "ok") return { notAdmitted: admission };
    const wait = this.limiter.take(deviceId, now);
    if (wait) return { rateLimited: true, retryAfterS: wait };
    const last = samples[samples.length - 1];
    const { row, transition, restarted } = this.presence.sighted(
      { deviceId, uptimeS: last?.uptime_seconds, bootId: last?.boot_id }, now, this.credentials.configuredIntervalS(deviceId));
    if (restarted) this.metrics.noteRestart(deviceId);
    if (transition) await this.applyTransitions([transition]);
    const results = samples.map((sample) => this.metrics.ingest(deviceId, sample, now));
    const stored = samples.filter((_, i) => results[i].stored);
    if (stored.length) this.emit("device.metrics", { device_id: deviceId, samples: stored, reasons: results.filter((r) => r.stored).map((r) => r.reason) });
    await this.ensureAlarm(now, now + offlineAfterMs(row.interval_s));
    return results;
  }

  /** Stored metric samples of one device since `sinceIso`, oldest first. */
  async metricsHistory(siteId: string, deviceId: string, sinceIso: string) {
    this.bind(siteId);
    return this.metrics.history(deviceId, sinceIso);
  }

  async storedSampleCount(siteId: string, deviceId: string): Promise<number> {
    this.bind(siteId);
    return this.metrics.storedCount(deviceId);
  }

  // ---- enrolment (enrolment-quota.ts) ----------------------------------------------------------

  /** One of the site's `perHour` bootstrap enrolments for the rolling hour, or 429 with Retry-After. */
  async takeEnrolmentSlot(siteId: string, perHour: number): Promise<Outcome<{ slot: string }>> {
    this.bind(siteId);
    return this.enrolments.take(perHour, this.now());
  }

  /** The enrolment that took `slot` failed: the slot is free again. */
  async giveBackEnrolmentSlot(siteId: string, slot: string): Promise<void> {
    this.bind(siteId);
    this.enrolments.give(slot);
  }

  /** A device left the site's live state (suspended, retired or deleted). */
  async forgetDevice(siteId: string, deviceId: string): Promise<void> {
    this.bind(siteId);
    this.presence.forget(deviceId);
    this.deviceChannels.close(deviceId, CHANNEL_CLOSE.inactive);
    await this.agentRuntime.stopAgent(deviceId);
  }

  /**
   * The device leaves this site for good (device-release.ts): its open commands are cancelled with
   * the operator's reason, its presence and agent stop, its cached credential goes, and what
   * `drop` names is erased. The D1 side (command ends, audit, agent projection) is written before
   * this returns, so the Worker's own D1 changes come after it; before a purge that write must
   * succeed (a late one would bring rows back), otherwise a failed one is retried by the alarm.
   */
  async releaseDevice(siteId: string, deviceId: string, release: DeviceRelease): Promise<ReleasedDevice> {
    this.bind(siteId);
    const now = this.now();
    const cancelled: string[] = [];
    for (const commandId of this.commands.openOfDevice(deviceId)) {
      if (this.commands.cancel(commandId, now, { userId: release.userId, reason: release.reason, force: true }).ok) cancelled.push(commandId);
    }
    this.presence.forget(deviceId);
    await this.agentRuntime.stopAgent(deviceId);
    this.credentials.invalidate(deviceId);
    // A transferred device's key changed with its site; a retired, archived or purged one is done.
    this.deviceChannels.close(deviceId, release.drop === "history" ? CHANNEL_CLOSE.credentials : CHANNEL_CLOSE.inactive);
    // A purge deletes the D1 row only after this returns, so the roster cannot learn it from D1.
    if (release.drop === "everything") await this.roster.forget(deviceId);
    else await this.roster.refreshDevice(deviceId);
    if (release.drop !== "live") {
      eraseDeviceHistory(this.sql, deviceId);
      this.twins.forget(deviceId);
    }
    if (release.drop === "everything") {
      eraseDeviceCommands(this.sql, deviceId);
      await this.outbox.flush();
    } else {
      await this.outbox.flushQuietly();
    }
    await this.ensureAlarm(now);
    return { cancelledCommands: cancelled };
  }

  /**
   * A device row of this site changed in D1 in a way only the device list sees (registration, name,
   * address, DNA): the roster re-reads it. Changes to the key, lifecycle or interval use deviceChanged.
   */
  async rosterChanged(siteId: string, deviceId: string): Promise<void> {
    this.bind(siteId);
    await this.roster.refreshDevice(deviceId);
  }

  /**
   * The site's devices, newest first: the roster with live presence laid over it (no D1 read),
   * serialised, so one string crosses to the Worker instead of an object per device.
   */
  async siteDevicesJson(siteId: string): Promise<string> {
    this.bind(siteId);
    const view = await this.currentSiteView();
    view.devicesJson ??= JSON.stringify(view.devices);
    return view.devicesJson;
  }

  /** The site's health: counts by live status over the site's device list. */
  async siteHealth(siteId: string): Promise<SiteHealth> {
    this.bind(siteId);
    const view = await this.currentSiteView();
    view.health ??= this.workOutHealth(view.devices);
    return { ...view.health, last_updated: iso(this.now()) };
  }

  /** siteHealth serialised once per view, with this answer's time (SiteHealthJson). */
  async siteHealthJson(siteId: string): Promise<SiteHealthJson> {
    this.bind(siteId);
    const view = await this.currentSiteView();
    view.health ??= this.workOutHealth(view.devices);
    view.healthJson ??= serialiseHealth(view.health);
    return { ...view.healthJson, last_updated: iso(this.now()) };
  }

  /**
   * The device list as of now: the one last worked out while nothing in the hub's storage has changed
   * since, else a fresh one. Simulated agents report on demand, as time passes rather than as storage
   * changes, so a site with any is worked out afresh on every read.
   */
  private async currentSiteView(): Promise<SiteView> {
    const now = this.now();
    const reused = this.siteView;
    if (reused && reused.writes === this.writes && !this.agents.activeCount()) {
      this.roster.noteRead(now);
      await this.ensureAlarm(now, this.roster.nextResync());
      return reused;
    }
    // Counted before the work: a change made while it awaits D1 makes the next read work it out again.
    const writes = this.writes;
    const devices = await this.roster.devices(now);
    await this.ensureAlarm(now, this.roster.nextResync());
    // Simulated agents report on demand: bring them up to now, so their status is current.
    const simulated = devices.filter((d) => d.device_source === "simulated" && d.lifecycle_state === "active");
    await this.agentRuntime.syncSite(simulated.map((d) => ({ device_id: d.device_id, device_type: d.device_type, created_at: d.created_at })));
    const live = new Map(this.presence.all().map((p) => [p.device_id, p]));
    const view: SiteView = {
      writes,
      devices: devices.map((d) => {
        const p = live.get(d.device_id);
        return p ? { ...d, status: p.status, last_seen: iso(p.last_seen_ms) } : d;
      }),
    };
    this.siteView = simulated.length ? undefined : view;
    return view;
  }

  private workOutHealth(devices: RosterDevice[]): SiteHealth {
    const list = devices.map((d) => ({ device_id: d.device_id, name: d.name, type: d.device_type, status: d.status, ip_address: d.ip_address, last_seen: d.last_seen }));
    const twins = this.twins.counts(list.map((d) => d.device_id));
    return { ...summariseSiteHealth(this.siteId, list, this.now()), twin_in_sync_devices: twins.in_sync, twin_drifted_devices: twins.drifted };
  }

  // ---- device twins (twins.ts) --------------------------------------------------------------

  /**
   * For the heartbeat: hub-local once the hub holds the twin. The first call for a device seeds it
   * (one D1 read, as its first credential check does); if that fails the heartbeat still answers.
   */
  private async twinVersionOf(deviceId: string): Promise<number> {
    const version = this.twins.desiredVersion(deviceId);
    if (version) return version;
    try {
      return (await this.twins.ensure(deviceId))?.effective_version ?? 0;
    } catch {
      return 0;
    }
  }

  /** The device's twin; undefined when the device is not on this site. */
  async twin(siteId: string, deviceId: string): Promise<TwinState | undefined> {
    this.bind(siteId);
    return this.twins.twin(deviceId);
  }

  async patchTwinDesired(siteId: string, deviceId: string, ifMatch: number, patch: JsonObject): Promise<Outcome<DesiredPatchResult> | undefined> {
    this.bind(siteId);
    return this.twins.patchDesired(deviceId, ifMatch, patch);
  }

  async patchTwinReported(siteId: string, deviceId: string, patch: JsonObject): Promise<Outcome<{ twin: TwinState; in_sync_changed: boolean }> | undefined> {
    this.bind(siteId);
    return this.twins.patchReported(deviceId, patch);
  }

  /** The site's template set changed: every listed device is recomputed here, in one call. */
  async setTwinTemplates(siteId: string, templates: TwinTemplateSet, devices: TwinDeviceSeed[]): Promise<TwinSyncChange[]> {
    this.bind(siteId);
    return this.twins.setTemplates(templates, devices);
  }

  async twinDrift(siteId: string): Promise<TwinDrift[]> {
    this.bind(siteId);
    return this.twins.drift();
  }

  // ---- commands and jobs (commands.ts, jobs.ts) ---------------------------------------------

  /**
   * Queues a command for one of the site's devices (operators, agent pushes, job fan-out). The D1
   * side (command index, command_queued audit) is written before this returns, so the command can be
   * read by id at once; a D1 failure leaves it in the outbox for the alarm to retry.
   */
  async queueCommand(siteId: string, input: QueueInput): Promise<Outcome<{ command: CommandRecord; created: boolean; delivered_on_channel: boolean }>> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const outcome = this.commands.queue(input, now);
    if (!outcome.ok) return outcome;
    let { command } = outcome.value;
    let deliveredOnChannel = false;
    if (outcome.value.created && command.status === "pending") {
      const sent = this.deliverOnChannel(command.device_id, now).find((c) => c.command_id === command.command_id);
      if (sent) [command, deliveredOnChannel] = [sent, true];
    }
    await this.afterCommandChange(now, before, true);
    return ok({ command, created: outcome.value.created, delivered_on_channel: deliveredOnChannel });
  }

  /**
   * Queues several commands at once (push fan-out): one outcome per input, in order, so one device
   * refused (at its cap, say) does not hold back the others. D1 hears of them before this returns,
   * as for queueCommand.
   */
  async queueCommandBatch(siteId: string, inputs: QueueInput[]): Promise<Outcome<{ command: CommandRecord; created: boolean; delivered_on_channel: boolean }>[]> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const outcomes = inputs.map((input) => this.commands.queue(input, now));
    // Devices on their channel get what was just queued at once, one delivery per device.
    const sent = new Map<string, CommandRecord>();
    const devices = new Set(outcomes.flatMap((o) => (o.ok && o.value.created ? [o.value.command.device_id] : [])));
    for (const deviceId of devices) for (const command of this.deliverOnChannel(deviceId, now)) sent.set(command.command_id, command);
    await this.afterCommandChange(now, before, true);
    return outcomes.map((o) => {
      if (!o.ok) return o;
      const delivered = sent.get(o.value.command.command_id);
      return ok({ command: delivered ?? o.value.command, created: o.value.created, delivered_on_channel: delivered !== undefined });
    });
  }

  /** The commands with these ids that the hub still holds, brought up to now. */
  async getCommandBatch(siteId: string, commandIds: string[]): Promise<CommandRecord[]> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const records = commandIds.flatMap((id) => this.commands.get(id, now) ?? []);
    await this.afterCommandChange(now, before, false);
    return records;
  }

  /**
   * A device's poll: its pending commands, leased for 60 s. With `waitS` (at most 25) an empty poll
   * waits here until a command is queued for the device (queueCommand wakes it) or the time is up.
   * Writes only this object's SQLite; what D1 must hear is flushed by the alarm.
   */
  async pollCommands(siteId: string, deviceId: string, waitS = 0): Promise<Outcome<CommandRecord[]>> {
    this.bind(siteId);
    const now = this.now();
    const wait = this.limiter.take(deviceId, now);
    if (wait) return refuse(429, "Too many calls from this device", wait);
    const before = this.outbox.added;
    let commands = this.commands.poll(deviceId, now);
    // The wait is real time (it holds a request open), whatever the hub's clock says.
    const until = Date.now() + Math.min(Math.max(waitS * 1000, 0), MAX_POLL_WAIT_MS);
    while (!commands.length && Date.now() < until) {
      await this.commands.waitFor(deviceId, until - Date.now());
      commands = this.commands.poll(deviceId, this.now());
    }
    await this.afterCommandChange(this.now(), before, false);
    return ok(commands);
  }

  async ackCommand(siteId: string, deviceId: string, commandId: string): Promise<Outcome<AckBody>> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const outcome = this.commands.ack(deviceId, commandId, now);
    await this.afterCommandChange(now, before, false);
    return outcome;
  }

  async reportCommand(siteId: string, deviceId: string, commandId: string, report: CommandReport): Promise<Outcome<CommandRecord>> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const outcome = this.commands.report(deviceId, commandId, report, now);
    await this.afterCommandChange(now, before, false);
    return outcome;
  }

  async getCommand(siteId: string, commandId: string): Promise<CommandRecord | null> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const record = this.commands.get(commandId, now) ?? null;
    await this.afterCommandChange(now, before, false);
    return record;
  }

  async listCommands(siteId: string, deviceId: string, query: { status?: CommandStatus; limit: number; offset: number }): Promise<{ commands: CommandRecord[]; total: number }> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const page = this.commands.list(deviceId, query, now);
    await this.afterCommandChange(now, before, false);
    return page;
  }

  async cancelCommand(siteId: string, commandId: string, by: { userId: number | null; reason: string }): Promise<Outcome<CommandRecord>> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    const outcome = this.commands.cancel(commandId, now, by);
    await this.afterCommandChange(now, before, true);
    return outcome;
  }

  /** Cron safety net: applies lapsed leases, passed TTLs and due simulated results now. */
  async sweepCommands(siteId: string): Promise<number> {
    this.bind(siteId);
    const now = this.now();
    const before = this.outbox.added;
    await this.agentRuntime.withCommandAgentWork(() => this.commands.onAlarm(now));
    await this.afterCommandChange(now, before, true);
    return this.outbox.added - before;
  }

  /** A job just created in D1: the hub starts it at once through its alarm (within a second or two). */
  async scheduleJob(siteId: string, spec: JobSpec): Promise<void> {
    this.bind(siteId);
    const now = this.now();
    this.jobs.schedule(spec, now);
    await this.ensureAlarm(now, now);
  }

  /**
   * Cron re-drive of a job D1 shows as queued or sent: adopts it when this hub never heard of it,
   * starts or times out what is due now, and writes the outcome. Idempotent. Null: no such job here.
   */
  async driveJob(siteId: string, jobId: string): Promise<JobStatus | null> {
    this.bind(siteId);
    const status = await this.jobs.adopt(jobId);
    if (status === undefined) return null;
    await this.jobs.onAlarm(this.now());
    await this.outbox.flushQuietly();
    await this.ensureAlarm(this.now());
    return this.jobs.run(jobId)?.status ?? status;
  }

  /** Cancels a queued or sent job and its open commands; D1 is written before this returns. */
  async cancelJob(siteId: string, jobId: string, by: { userId: number | null; name: string }): Promise<Outcome<JobStatus>> {
    this.bind(siteId);
    const status = await this.jobs.adopt(jobId);
    if (status === undefined) return refuse(404, "Job not found");
    if (!this.jobs.run(jobId)) return refuse(409, `Job ${jobId} is already ${status}`);
    const now = this.now();
    const outcome = this.jobs.cancel(jobId, now, by.userId, by.name);
    if (!outcome.ok) return refuse(409, `Job ${jobId} is already ${outcome.status}`);
    await this.outbox.flush();
    await this.ensureAlarm(now);
    return ok(outcome.status);
  }

  // ---- rollouts (the orchestrator asks; see docs/rollouts.md) --------------------------------

  /**
   * Where each device of these jobs stands: its execution and its own condition, so a rollout's
   * orchestrator learns outcomes and recoveries from the hub instead of polling D1 per device. A job
   * the hub no longer knows (evicted, or the hand-off not yet arrived) is adopted from D1 first.
   */
  async rolloutReport(siteId: string, jobIds: string[]): Promise<RolloutDeviceReport[]> {
    this.bind(siteId);
    const reports: RolloutDeviceReport[] = [];
    for (const jobId of jobIds) {
      if (!this.jobs.run(jobId)) await this.jobs.adopt(jobId);
      for (const t of this.jobs.targetsOf(jobId)) {
        reports.push({ job_id: jobId, device_id: t.device_id, execution: t.status, error: t.error_message, condition: this.deviceCondition(t.device_id) });
      }
    }
    await this.ensureAlarm(this.now());
    return reports;
  }

  /** A simulated agent by its lifecycle and fault; a real device by its presence. */
  private deviceCondition(deviceId: string): RolloutDeviceReport["condition"] {
    const agent = this.agents.get(deviceId);
    if (agent?.active) {
      if (agent.next_at_ms !== null) return "busy";
      return agent.fault ? "unhealthy" : "healthy";
    }
    const presence = this.presence.get(deviceId);
    if (!presence || presence.status === "offline") return "offline";
    return presence.status === "error" ? "unhealthy" : "healthy";
  }

  /** After a call changed something: flush D1 now (`flush`) or within the outbox window, and keep the alarm right. */
  private async afterCommandChange(now: number, outboxBefore: number, flush: boolean) {
    if (this.outbox.added === outboxBefore) return;
    if (flush) {
      await this.outbox.flushQuietly();
      await this.ensureAlarm(now);
    } else {
      await this.ensureAlarm(now, now + OUTBOX_FLUSH_MS);
    }
  }

  // ---- agents (agent-store.ts state, agent-model.ts health, agent-runtime.ts orchestration) ---

  /** The agent view of one device: a simulated agent brought up to now, or what a real device reported. */
  async agent(siteId: string, device: AgentDevice): Promise<AgentSnapshot> {
    this.bind(siteId);
    return this.agentRuntime.agent(device);
  }

  /** Device health: computed on demand for a simulated agent; built from reports for a real device. */
  async agentHealth(siteId: string, device: AgentDevice) {
    this.bind(siteId);
    return this.agentRuntime.agentHealth(device);
  }

  /** Diagnostics: a recorded health check plus component self-tests. */
  async agentDiagnostics(siteId: string, device: AgentDevice, input: { components: DiagnosticComponent[]; includeLogs: boolean; mode: string }) {
    this.bind(siteId);
    return this.agentRuntime.agentDiagnostics(device, input);
  }

  /**
   * A simulated agent's restart: it reboots (an update in flight is abandoned), any fault or incident
   * in progress is cleared, and a fresh health check is taken and recorded.
   */
  async restartAgent(siteId: string, device: AgentDevice, reason: string | null) {
    this.bind(siteId);
    return this.agentRuntime.restartAgent(device, reason);
  }

  /** A push to a simulated agent (every body form of the agents' push). */
  async pushToAgent(siteId: string, device: AgentDevice, push: PushInput, requestedBy: string | null): Promise<Outcome<PushResult>> {
    this.bind(siteId);
    return this.agentRuntime.pushToAgent(device, push, requestedBy);
  }

  /** Metrics, transactions and errors series from this hub's stored history. */
  async agentSeries(siteId: string, device: AgentDevice, request: SeriesRequest) {
    this.bind(siteId);
    return this.agentRuntime.agentSeries(device, request);
  }

  // ---- the device channel (device-channel.ts) -----------------------------------------------

  /**
   * The Worker's hand-off of a device's upgrade (`/device-channel`). The key digest is admitted
   * here, like every device call; a key not (yet) admitted gets the admission back, marked with
   * NOT_ADMITTED_HEADER, so the Worker can run bcrypt or answer 401/403 before any socket exists.
   */
  private async openDeviceChannel(request: Request, siteId: string | null): Promise<Response> {
    let device: { device_id: string; key_digest: string } | undefined;
    try {
      device = DeviceChannelOpenSchema.parse(JSON.parse(request.headers.get(DEVICE_CHANNEL_HEADER) ?? "null"));
    } catch {
      device = undefined;
    }
    if (!siteId || !device) return Response.json({ detail: "Device channels come through the Worker" }, { status: 400 });
    this.bind(siteId);
    const now = this.now();
    const admission = await this.credentials.admit(device.device_id, device.key_digest, now);
    if (admission.result !== "ok") return Response.json({ notAdmitted: admission }, { status: 401, headers: { [NOT_ADMITTED_HEADER]: "1" } });
    if (request.headers.get("Upgrade")?.toLowerCase() !== "websocket") return Response.json({ detail: "Expected a WebSocket upgrade" }, { status: 426 });
    const interval = this.presence.get(device.device_id)?.interval_s ?? this.credentials.configuredIntervalS(device.device_id) ?? DEFAULT_INTERVAL_S;
    const hashFingerprint = await sha256Hex(this.credentials.verifiedHash(device.device_id, device.key_digest) ?? "");
    const { response } = this.deviceChannels.accept(device.device_id, device.key_digest, hashFingerprint, { next_heartbeat_s: interval, desired_version: await this.twinVersionOf(device.device_id) });
    // What was queued while the device was away goes out now, leased as a poll would lease it.
    const before = this.outbox.added;
    this.deliverOnChannel(device.device_id, now);
    await this.afterCommandChange(now, before, false);
    return response;
  }

  /**
   * Sends the device's pending commands on its channel socket, each leased exactly as a poll leases
   * it (so a socket that drops before the ack loses nothing: the lease lapses and the command is
   * delivered again). Answers what was sent; nothing when the device has no open socket.
   */
  protected deliverOnChannel(deviceId: string, now: number): CommandRecord[] {
    const [socket] = this.deviceChannels.socketsOf(deviceId);
    if (!socket) return [];
    const commands = this.commands.poll(deviceId, now);
    return commands.filter((command) => send(socket, { type: command.command_type === "notify" ? "push" : "command", command }));
  }

  /** After a key, lifecycle or deletion change: sockets whose key no longer opens the device are closed. */
  private async closeChannelsNoLongerAdmitted(deviceId: string, now: number) {
    for (const socket of this.deviceChannels.socketsOf(deviceId)) {
      const admission = await this.credentials.admit(deviceId, keyDigestOf(socket) ?? "", now);
      if (admission.result === "ok") continue;
      this.deviceChannels.close(deviceId, admission.result === "inactive" ? CHANNEL_CLOSE.inactive : CHANNEL_CLOSE.credentials);
      return;
    }
  }

  /** A lease that lapsed while the device is on its channel: the command goes out again at once. */
  private redeliverOnChannels(now: number) {
    const connected = new Set(this.deviceChannels.connectedDevices());
    if (!connected.size) return;
    for (const deviceId of this.commands.devicesWithPending()) if (connected.has(deviceId)) this.deliverOnChannel(deviceId, now);
  }

  /** A channel message does what the matching HTTP call does, through the same methods. */
  private readonly channelHost: ChannelHost = {
    siteId: () => this.siteId,
    now: () => this.now(),
    readmit: async (deviceId, keyDigest, hashFingerprint) => {
      const now = this.now();
      const admission = await this.credentials.admit(deviceId, keyDigest, now);
      if (admission.result !== "verify" || (await sha256Hex(admission.bcryptHash)) !== hashFingerprint) return admission;
      return this.credentials.confirm(deviceId, keyDigest, admission.bcryptHash, now);
    },
    heartbeat: (keyDigest, sighting) => this.heartbeat(this.siteId, keyDigest, sighting),
    telemetry: (keyDigest, deviceId, samples) => this.telemetry(this.siteId, keyDigest, deviceId, samples),
    ack: (deviceId, commandId) => this.ackCommand(this.siteId, deviceId, commandId),
    report: (deviceId, commandId, report) => this.reportCommand(this.siteId, deviceId, commandId, report),
  };

  /** Devices with an open channel socket here (for tests, the bench and operators). */
  async channelDevices(siteId: string): Promise<string[]> {
    this.bind(siteId);
    return this.deviceChannels.connectedDevices();
  }

  // ---- the assistant (ai-assessment.ts): read-only assessments from this hub's own storage ------

  /** The site's devices whose current anomaly score is at least `minScore`, highest first. */
  async aiAnomalies(siteId: string, minScore: number): Promise<DeviceAnomaly[]> {
    this.bind(siteId);
    return this.assessor.anomalies(siteId, minScore, this.now());
  }

  /** The site's devices whose failure risk over `windowMs` is at least `minRisk`, highest first. */
  async aiRisks(siteId: string, minRisk: number, windowMs: number): Promise<DeviceRiskSummary[]> {
    this.bind(siteId);
    return this.assessor.risks(siteId, minRisk, this.now(), windowMs);
  }

  /** Values a caller sent, scored against the device's own baseline (or its peers'). */
  async aiScoreValues(siteId: string, deviceId: string, values: MetricValues): Promise<AnomalyAssessment> {
    this.bind(siteId);
    return this.assessor.scoreValues(deviceId, values, this.now());
  }

  /** One device's failure risk over `windowMs`, its current anomaly and its last `eventLimit` events. */
  async aiDeviceAssessment(siteId: string, device: AgentDevice, windowMs: number, eventLimit: number) {
    this.bind(siteId);
    await this.agentRuntime.bringUpToDate(device);
    const now = this.now();
    return {
      risk: this.assessor.risk(device.deviceId, now, windowMs),
      anomaly: this.assessor.anomaly(device.deviceId, now),
      recent_events: this.assessor.recentEvents(device.deviceId, eventLimit),
    };
  }

  // ---- the live channel (live.ts ring, live-socket.ts subscribers) ----------------------------

  /** Appends an event to the site's live stream and delivers it to current subscribers. */
  async publish(siteId: string, type: string, data: unknown): Promise<LiveEvent> {
    this.bind(siteId);
    return this.emit(type, data);
  }

  protected emit(type: string, data: unknown): LiveEvent {
    const event = this.live.append(type, data, this.now());
    this.broadcast(event);
    return event;
  }

  /** Events after `seq`, oldest first (replay for reconnecting subscribers). */
  async eventsSince(siteId: string, seq: number): Promise<LiveEvent[]> {
    this.bind(siteId);
    return this.live.since(seq);
  }

  protected broadcast(event: LiveEvent) {
    const message = JSON.stringify(event);
    for (const socket of openSockets(this.ctx)) {
      try {
        socket.send(message);
      } catch {
        // A socket closing mid-send is cleaned up by webSocketClose.
      }
    }
    this.sse.send(event);
  }

  /** Someone is watching the site: an open WebSocket or server-sent event stream. */
  protected watching(): boolean {
    return this.sse.size > 0 || openSockets(this.ctx).length > 0;
  }

  /**
   * Only for subscriptions, forwarded by the Worker after it has authenticated the user and checked
   * their role on the site: `/ws` (WebSocket upgrade) and `/events` (server-sent events), with
   * `site_id`, optional `since` and the subscriber in the subscriber header. Also `/device-channel`:
   * a device's channel upgrade, which the hub admits itself (openDeviceChannel).
   */
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const siteId = url.searchParams.get("site_id");
    if (url.pathname === "/device-channel") return this.openDeviceChannel(request, siteId);
    let subscriber: Omit<Subscriber, "channel"> | undefined;
    try {
      subscriber = SubscriberSchema.omit({ channel: true }).parse(JSON.parse(request.headers.get(SUBSCRIBER_HEADER) ?? "null"));
    } catch {
      subscriber = undefined;
    }
    if (!siteId || !subscriber) return Response.json({ detail: "Subscriptions come through the Worker" }, { status: 400 });
    this.bind(siteId);
    // Checked before any socket exists, so a refused WebSocket client gets a plain 429, not an upgrade.
    const refusal = subscriptionRefusal(
      { site: openSockets(this.ctx).length + this.sse.size, user: openSocketsOf(this.ctx, subscriber.user_id).length + this.sse.countOf(subscriber.user_id) },
      this.subscriptionLimits,
    );
    if (refusal) return Response.json({ detail: refusal }, { status: 429, headers: { "Retry-After": String(SUBSCRIPTION_RETRY_AFTER_S) } });
    const replay = replayFrom(parseSince(url.searchParams.get("since")), this.live, siteId);
    let response: Response;
    if (url.pathname === "/ws") {
      if (request.headers.get("Upgrade")?.toLowerCase() !== "websocket") return Response.json({ detail: "Expected a WebSocket upgrade" }, { status: 426 });
      response = acceptSubscriber(this.ctx, { ...subscriber, channel: "ws" }, replay);
    } else if (url.pathname === "/events") {
      response = this.sse.open({ ...subscriber, channel: "sse" }, replay);
    } else {
      return Response.json({ detail: "Not Found" }, { status: 404 });
    }
    await this.agentRuntime.startWatching(this.now());
    return response;
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer) {
    if (isDeviceSocket(this.ctx, ws)) return this.deviceChannels.handle(ws, message, this.channelHost);
    handleClientMessage(ws, message, (since) => replayFrom(since, this.live, this.siteId), this.siteId, this.now());
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string) {
    closeQuietly(ws, code, reason);
  }

  async webSocketError(ws: WebSocket) {
    closeQuietly(ws, 1011, "error");
  }

  /** Where the site's stream is: the last seq published and the oldest still replayable. */
  async liveHead(siteId: string): Promise<{ last_seq: number; oldest_seq: number }> {
    this.bind(siteId);
    const last = this.sql.exec<{ seq: number | null }>("SELECT max(seq) AS seq FROM live_events").one().seq ?? 0;
    return { last_seq: last, oldest_seq: this.live.oldestSeq() };
  }

  /** Who is connected (for tests, the bench and operators). */
  async subscribers(siteId: string): Promise<{ websockets: number; sse: number; users: number[]; subscriptions: Pick<Subscriber, "user_id" | "channel" | "role">[] }> {
    this.bind(siteId);
    const sockets = openSockets(this.ctx);
    const all = [...sockets.map((ws) => subscriberOf(ws)), ...this.sse.subscribers()].filter((s): s is Subscriber => s !== undefined);
    const users = [...new Set(sockets.map((ws) => subscriberOf(ws)?.user_id).filter((u): u is number => u !== undefined))];
    return { websockets: sockets.length, sse: this.sse.size, users, subscriptions: all.map(({ user_id, channel, role }) => ({ user_id, channel, role })) };
  }

  /**
   * A user's access to the site changed (membership removed or lowered, user deleted or
   * deactivated, ticket revoked): their open WebSockets and event streams here are closed, or keep
   * going with the role they still have.
   */
  async revokeSubscriber(siteId: string, revocation: Revocation): Promise<RevocationResult> {
    this.bind(siteId);
    const now = this.now();
    const sockets = revokeSockets(this.ctx, revocation, siteId, now);
    const streams = this.sse.revoke(revocation, siteId, now);
    return { closed: sockets.closed + streams.closed, downgraded: sockets.downgraded + streams.downgraded };
  }

  // ---- time ---------------------------------------------------------------------------------

  /**
   * Presence transitions go to D1 through the outbox, flushed at once so the device's status there
   * does not lag (a failed flush is retried by the alarm), and out to subscribers as `device.status`.
   */
  private async applyTransitions(transitions: Transition[]) {
    if (!transitions.length) return;
    const now = this.now();
    for (const t of transitions) {
      this.outbox.transition(t, now);
      this.roster.noteStatus(t.deviceId, t.next, iso(t.at));
      this.emit("device.status", { device_id: t.deviceId, previous: t.previous, status: t.next, reason: t.reason, at: iso(t.at) });
    }
    if (!(await this.outbox.flushQuietly())) await this.ensureAlarm(now);
  }

  /** Parts that need the alarm, in the order their due work runs. */
  protected timedParts(): TimedPart[] {
    return [
      {
        // Simulated agents are alive while their hub is: they never expire.
        nextWake: () => this.presence.nextExpiry(this.agents.activeIds()),
        onAlarm: async (now) => {
          const expired = this.presence.expire(now, this.agents.activeIds());
          if (expired.length) await this.applyTransitions(expired);
        },
      },
      {
        nextWake: (now) => {
          const dirty = this.presence.unflushed().length > 0 || this.metrics.dirtyLatest().length > 0;
          return dirty ? Math.max(now, Number(this.meta("flushed_at") ?? 0) + LAST_SEEN_FLUSH_MS) : undefined;
        },
        onAlarm: async (now) => {
          if (now - Number(this.meta("flushed_at") ?? 0) < LAST_SEEN_FLUSH_MS) return;
          this.queueLastSeen(now);
        },
      },
      {
        // Pruning rides on alarms that other work already needs; it never wakes the hub by itself.
        nextWake: () => undefined,
        onAlarm: async (now) => {
          if (now - Number(this.meta("pruned_at") ?? 0) < PRUNE_EVERY_MS) return;
          this.metrics.prune(now);
          this.setMeta("pruned_at", String(now));
        },
      },
      this.agentRuntime.agentTimedPart(),
      this.roster.timedPart(),
      // Jobs before commands: a job past its deadline times out before its commands' own TTL could fail it.
      { nextWake: () => this.jobs.nextWake(), onAlarm: (now) => this.jobs.onAlarm(now) },
      { nextWake: () => this.commands.nextWake(), onAlarm: (now) => this.agentRuntime.withCommandAgentWork(() => this.commands.onAlarm(now)) },
      // Commands whose lease just lapsed go straight back out to devices on their channel.
      { nextWake: () => undefined, onAlarm: async (now) => { this.redeliverOnChannels(now); } },
      // Last: whatever the parts above wrote for D1 goes out in one batch.
      { nextWake: (now) => this.outbox.nextWake(now), onAlarm: async () => { await this.outbox.flushQuietly(); } },
    ];
  }

  private nextWake(now: number): number | undefined {
    const wakes = this.timedParts().map((p) => p.nextWake(now)).filter((t): t is number => t !== undefined);
    return wakes.length ? Math.min(...wakes) : undefined;
  }

  /**
   * Makes sure an alarm is set when some part has work. A caller that knows its own deadline passes
   * `neededBy`: when the alarm already fires by then nothing is scanned (the heartbeat hot path).
   */
  protected async ensureAlarm(now: number, neededBy?: number) {
    if (this.alarmAt === undefined) this.alarmAt = await this.ctx.storage.getAlarm();
    if (neededBy !== undefined && this.alarmAt !== null && this.alarmAt <= neededBy) return;
    const wake = this.nextWake(now);
    if (wake === undefined) return;
    if (this.alarmAt !== null && this.alarmAt <= wake) return;
    this.alarmAt = wake;
    await this.ctx.storage.setAlarm(wake);
  }

  // ---- audit stream -----------------------------------------------------------------------------

  /**
   * The outbox wrote audit rows: the audit stream seals and publishes them now rather than at the
   * next cron. Not awaited by the flush; a failed nudge is made up by the minute cron.
   */
  private nudgeAuditStream() {
    const namespace = this.env.AUDIT_STREAM;
    if (!namespace) return;
    const nudged = namespace.get(namespace.idFromName(AUDIT_STREAM_NAME)).fetch(NUDGE_URL, { method: "POST" })
      .then((response) => response.body?.cancel())
      .catch((error: unknown) => console.error("audit stream nudge failed; the cron will catch up", error));
    this.ctx.waitUntil(nudged);
  }

  async alarm() {
    this.alarmAt = null;
    const now = this.now();
    for (const part of this.timedParts()) await part.onAlarm(now);
    // Parts may have asked for an alarm while they ran; what is left to do is decided here, once.
    const wake = this.nextWake(this.now());
    if (wake !== undefined) {
      this.alarmAt = Math.max(wake, now + 250);
      await this.ctx.storage.setAlarm(this.alarmAt);
    } else if (this.alarmAt !== null) {
      this.alarmAt = null;
      await this.ctx.storage.deleteAlarm();
    }
  }

  /** Coalesced last_seen of every device heard from and each device's latest sample, into the outbox. */
  private queueLastSeen(now: number) {
    const seen = this.presence.unflushed();
    const latest = this.metrics.dirtyLatest();
    for (const p of seen) {
      this.outbox.lastSeen(p.device_id, p.last_seen_ms, now);
      this.roster.noteLastSeen(p.device_id, iso(p.last_seen_ms));
    }
    for (const l of latest) this.outbox.latestSample(l.device_id, JSON.parse(l.latest), now);
    this.presence.markFlushed(seen);
    this.metrics.markLatestClean(latest.map((l) => l.device_id));
    this.setMeta("flushed_at", String(now));
  }
}
