/**
 * The agents of one site, run inside its SiteHub: simulated agents
 * brought up to now on demand (lifecycle steps, generated telemetry, health checks that count as
 * heartbeats), the agent view of real devices from what they reported, pushes and commands acting on
 * an agent, the 2-second health checks and coalesced heartbeats while someone watches, and the D1
 * records all of that leaves (health_checks, audit events, the agents projection), through the
 * hub's outbox.
 *
 * The state itself lives in the `Agents` store (agent-store.ts) and the health model in
 * agent-model.ts; this module orchestrates them and reaches the rest of the hub only through
 * `AgentHost`, in the style of CommandQueue and JobRunner.
 */
import type {
  AgentDevice, AgentSnapshot, DiagnosticResult, Outcome, PartialHealth, PushInput, PushResult, Sample, SeriesReply,
  SeriesRequest, StoreReason,
} from "../src/shared/hub-contract";
import { refuse } from "../src/shared/hub-contract";
import { realAgentView, type LatestSample } from "../src/shared/agent-view";
import type { AgentState, DiagnosticComponent, PushAction } from "../src/shared/vocabulary";
import { iso } from "../src/shared/time";
import type { TimedPart } from "./timed-part";
import { DEFAULT_INTERVAL_S, type Presence, type Transition } from "./presence";
import type { MetricsStore } from "./metrics";
import {
  HEALTH_CHECK_PERIOD_MS, bootIdOf, configVersionOf, healthAt, incidentsBetween, rand, sampleAt, simulatedDiagnostics, telemetryTimes,
  type HealthRecord,
} from "./agent-model";
import type { AgentRow, AgentWork, Agents, UpdatePlan } from "./agent-store";
import type { D1Outbox } from "./outbox";
import type { CommandRow, SimulatedOutcome } from "./commands";

/** How often stored history is pruned (a prune rides on an alarm that other work already needs). */
export const PRUNE_EVERY_MS = 6 * 3_600_000;

/** What the agent runtime needs from its hub. */
export interface AgentHost {
  siteId(): string;
  /** For reads only (the site's simulated devices); writes go through the outbox. */
  d1(): D1Database;
  outbox: D1Outbox;
  now(): number;
  agents: Agents;
  presence: Presence;
  metrics: MetricsStore;
  /** Appends to the site's live stream and delivers to current subscribers. */
  emit(type: string, data: unknown): void;
  /** Records presence transitions (through the outbox) and publishes them as `device.status` events. */
  applyTransitions(transitions: Transition[]): Promise<void>;
  /** Keeps the hub's alarm at the earliest wake of its parts (see SiteHub.ensureAlarm). */
  ensureAlarm(now: number, neededBy?: number): Promise<void>;
  /** Someone is watching the site: an open WebSocket or server-sent event stream. */
  watching(): boolean;
  meta(key: string): string | undefined;
  setMeta(key: string, value: string): void;
}

type SimulatedDevice = { device_id: string; device_type: string; created_at: string };

export class AgentRuntime {
  private readonly agents: Agents;
  private readonly presence: Presence;
  private readonly metrics: MetricsStore;
  /** Devices heard from since the last coalesced `device.heartbeat` event (kept only while watched). */
  private readonly beats = new Map<string, { status: string; last_seen: string }>();
  private lastTickMs = 0;
  private agentsSyncedAt = 0;
  /** Agent work done by simulated commands finishing, collected while the command queue runs. */
  private commandAgentWork: AgentWork | undefined;

  constructor(private readonly sql: SqlStorage, private readonly host: AgentHost) {
    this.agents = host.agents;
    this.presence = host.presence;
    this.metrics = host.metrics;
  }

  // ---- RPC bodies (the hub binds the site, then delegates) ---------------------------------

  /** The agent view of one device: a simulated agent brought up to now, or what a real device reported. */
  async agent(device: AgentDevice): Promise<AgentSnapshot> {
    return this.withAgentWork((work, now) => this.snapshot(device, now, work));
  }

  /** `GET /devices/{id}/health`: computed on demand for a simulated agent; built from reports for a real device. */
  async agentHealth(device: AgentDevice): Promise<{ health: PartialHealth; agent_state: AgentState; last_updated: string }> {
    return this.withAgentWork((work, now) => {
      const view = this.snapshot(device, now, work);
      return { health: view.health, agent_state: view.state, last_updated: view.health.checked_at };
    });
  }

  /** Diagnostics (`POST /devices/{id}/health`): a recorded health check plus component self-tests. */
  async agentDiagnostics(device: AgentDevice, input: { components: DiagnosticComponent[]; includeLogs: boolean; mode: string }) {
    return this.withAgentWork((work, now) => {
      if (device.source === "simulated") {
        const row = this.liveAgent(device, now, work);
        const health = this.checkAgent(row, now, work, "diagnostic");
        const diagnostics = simulatedDiagnostics(row, health, input.components, now);
        const failed = Object.entries(diagnostics).filter(([, d]) => d.status === "fail").map(([c]) => c);
        this.agents.log(row.device_id, now, "diagnostic", failed.length ? "warning" : "info",
          `Diagnostics (${input.mode}): ${failed.length ? `failed ${failed.join(", ")}` : "all components passed"}`, { components: input.components });
        const logs = input.includeLogs ? this.agents.events(row.device_id, now - 86_400_000, { limit: 50 }) : undefined;
        return { health: health as PartialHealth, agent_state: row.state, diagnostics, logs, timestamp: new Date(now).toISOString() };
      }
      const view = this.snapshot(device, now, work);
      work.health.push({ deviceId: device.deviceId, record: view.health, at: now, reason: "diagnostic" });
      const online = view.status !== "offline";
      const diagnostics: Record<string, DiagnosticResult> = {};
      for (const c of input.components) {
        if (c === "network") {
          diagnostics[c] = online
            ? { status: "pass", detail: `Device reachable: last heartbeat ${view.last_heartbeat}${view.health.response_time_ms !== undefined ? `, reported latency ${view.health.response_time_ms} ms` : ""}` }
            : { status: "fail", detail: view.last_heartbeat ? `No heartbeat since ${view.last_heartbeat}` : "The device has not called in yet" };
        } else {
          diagnostics[c] = { status: "unknown", detail: `A real device reports no ${c} self-test through heartbeats or telemetry; queue a diagnostics command to run one on the device` };
        }
      }
      return { health: view.health, agent_state: view.state, diagnostics, logs: input.includeLogs ? [] : undefined, timestamp: new Date(now).toISOString() };
    });
  }

  /**
   * `POST /devices/{id}/restart` for a simulated agent: it reboots (an update in flight is abandoned),
   * any fault or incident in progress is cleared, and a fresh health check is taken and recorded.
   */
  async restartAgent(device: AgentDevice, reason: string | null) {
    return this.withAgentWork((work, now) => this.rebootAgent(device, reason, now, work));
  }

  /** A push to a simulated agent (every body form of `POST /agents/{id}/push`). */
  async pushToAgent(device: AgentDevice, push: PushInput, requestedBy: string | null): Promise<Outcome<PushResult>> {
    return this.withAgentWork((work, now) => this.push(device, push, requestedBy, now, work));
  }

  /** Series for `GET /agents/{id}/metrics|transactions|errors` from this hub's stored history. */
  async agentSeries(device: AgentDevice, request: SeriesRequest) {
    return this.withAgentWork((work, now) => {
      // History stays readable for a suspended device; only a running agent is brought up to date.
      if (device.source === "simulated" && device.lifecycleState === "active") this.liveAgent(device, now, work);
      return this.series(device.deviceId, request);
    });
  }

  /** A running simulated agent's telemetry generated up to now, so what reads its history sees the present. */
  async bringUpToDate(device: AgentDevice) {
    if (device.source !== "simulated" || device.lifecycleState !== "active") return;
    await this.withAgentWork((work, now) => { this.liveAgent(device, now, work); });
  }

  /** A device left the site: its agent stops (the projection and live events follow). */
  async stopAgent(deviceId: string) {
    if (this.agents.get(deviceId)?.active) {
      this.agents.deactivate(deviceId);
      await this.withAgentWork(() => undefined);
    }
  }

  /** For site health: the site's simulated agents (active devices from D1) brought up to now. */
  async syncSite(devices: SimulatedDevice[]) {
    if (devices.length || this.agents.activeCount()) await this.withAgentWork((work, now) => this.syncSimulated(devices, now, work));
  }

  // ---- hooks for the rest of the hub -------------------------------------------------------

  /** A heartbeat seen while watched goes into the next coalesced `device.heartbeat` event (≤ one per 2 s). */
  noteBeat(deviceId: string, status: string, now: number): number | undefined {
    if (!this.host.watching()) return undefined;
    this.beats.set(deviceId, { status, last_seen: new Date(now).toISOString() });
    return this.lastTickMs + HEALTH_CHECK_PERIOD_MS;
  }

  /** A new subscriber: bring the simulated agents up to date (at most once a minute) and start the 2 s checks. */
  async startWatching(now: number) {
    if (now - this.agentsSyncedAt >= 60_000) {
      const devices = await this.loadSimulated();
      const work: AgentWork = { steps: [], transitions: [], health: [], audits: [], metrics: [] };
      this.syncSimulated(devices, now, work);
      await this.finishAgentWork(work, now, false);
    }
    await this.host.ensureAlarm(now, this.lastTickMs + HEALTH_CHECK_PERIOD_MS);
  }

  /** Runs command-queue work (`run`) so simulated commands can act on agents; their agent work is then published and written. */
  async withCommandAgentWork(run: () => void) {
    await this.withAgentWork((work) => {
      this.commandAgentWork = work;
      try {
        run();
      } finally {
        this.commandAgentWork = undefined;
      }
    });
  }

  /**
   * A simulated device's command acts on its agent: restart reboots it (fresh health check), and
   * update_config starts the update lifecycle to the payload's config_version (or one derived from
   * its settings). Commands the agent handles no differently keep the plain simulated result.
   */
  runCommandOnAgent(row: CommandRow, run: SimulatedOutcome, now: number): SimulatedOutcome | undefined {
    const work = this.commandAgentWork;
    const agent = this.agents.get(row.device_id);
    if (!work || !agent?.active) return undefined;
    const device: AgentDevice = {
      deviceId: agent.device_id, name: agent.device_id, deviceType: agent.device_type, source: "simulated", lifecycleState: "active",
      createdAt: iso(agent.created_ms), firmware: null, osType: null, osVersion: null, osDetails: null, hostname: null, dna: null,
    };
    if (row.command_type === "restart") {
      const reboot = this.rebootAgent(device, `command ${row.command_id}`, now, work);
      return { status: "completed", result: { reboot_time_seconds: reboot.reboot_time_seconds, health_check: reboot.health_check, simulated: true } };
    }
    if (row.command_type === "update_config" && run.status === "completed") {
      const payload = JSON.parse(row.payload) as Record<string, unknown>;
      const settings = (run.result as { applied_settings?: Record<string, unknown> } | undefined)?.applied_settings ?? {};
      const configVersion = typeof payload.config_version === "string" ? payload.config_version : undefined;
      const outcome = this.push(device, { config: settings, config_version: configVersion, force: payload.force === true }, row.created_by, now, work);
      if (!outcome.ok) return { status: "failed", error: outcome.error.detail };
      return { status: "completed", result: { ...(run.result as object), agent: { status: outcome.value.status, config_version: outcome.value.config_version, state: outcome.value.state } } };
    }
    return undefined;
  }

  /** The agents' part of the alarm: lifecycle steps, 2-second health checks while watched or moving, coalesced heartbeats. */
  agentTimedPart(): TimedPart {
    return {
      nextWake: (now) => {
        let wake = this.agents.nextStepAt();
        const ticking = wake !== undefined || (this.host.watching() && (this.beats.size > 0 || this.agents.activeCount() > 0));
        if (ticking) wake = Math.min(wake ?? Number.POSITIVE_INFINITY, this.lastTickMs + HEALTH_CHECK_PERIOD_MS);
        if (this.agents.hasUnprojected()) wake = Math.min(wake ?? Number.POSITIVE_INFINITY, now + 10_000);
        return wake;
      },
      onAlarm: async (now) => {
        const watched = this.host.watching();
        const work: AgentWork = { steps: [], transitions: [], health: [], audits: [], metrics: [] };
        const checkDue = now - this.lastTickMs >= HEALTH_CHECK_PERIOD_MS - 100;
        const checks: Record<string, unknown>[] = [];
        for (const row of this.agents.active()) {
          const moving = row.next_at_ms !== null;
          if (!watched && !moving) continue;
          const r = this.advanceAgent(row, now, work);
          if (!checkDue && !(moving && row.next_at_ms! <= now)) continue;
          const h = this.checkAgent(r, now, work);
          checks.push({
            device_id: r.device_id, state: r.state, status: h.status, response_time_ms: h.response_time_ms,
            cpu_usage_percent: h.metrics.cpu_usage_percent, memory_usage_percent: h.metrics.memory_usage_percent, ...(h.error ? { error: h.error } : {}),
          });
        }
        if (checkDue) this.lastTickMs = now;
        if (watched && checks.length) this.host.emit("agent.health", { checked_at: new Date(now).toISOString(), checks });
        if (watched && this.beats.size) {
          this.host.emit("device.heartbeat", { count: this.beats.size, devices: [...this.beats].map(([device_id, b]) => ({ device_id, ...b })) });
        }
        this.beats.clear();
        if (now - Number(this.host.meta("agents_pruned_at") ?? 0) >= PRUNE_EVERY_MS) {
          this.agents.prune(now);
          this.host.setMeta("agents_pruned_at", String(now));
        }
        await this.finishAgentWork(work, now, false);
      },
    };
  }

  // ---- internals ---------------------------------------------------------------------------

  private async withAgentWork<T>(fn: (work: AgentWork, now: number) => T): Promise<T> {
    const now = this.host.now();
    const work: AgentWork = { steps: [], transitions: [], health: [], audits: [], metrics: [] };
    const result = fn(work, now);
    await this.finishAgentWork(work, now, true);
    return result;
  }

  /** The agent of a simulated device, created on first sight and brought up to `now`. */
  private liveAgent(device: { deviceId: string; deviceType: string; createdAt: string }, now: number, work: AgentWork): AgentRow {
    const { row, created } = this.agents.ensure({ deviceId: device.deviceId, deviceType: device.deviceType, createdMs: Date.parse(device.createdAt) || now }, now);
    if (created) this.agents.log(row.device_id, now, "created", "info", `Simulated agent started (${row.device_type}, config ${row.config_version})`);
    return this.advanceAgent(row, now, work);
  }

  /** Runs the lifecycle steps that are due and generates the telemetry the agent would have sent. */
  private advanceAgent(row: AgentRow, now: number, work: AgentWork): AgentRow {
    let r = row;
    while (r.next_at_ms !== null && r.next_at_ms <= now) {
      this.generateTelemetry(r, r.next_at_ms, now, work);
      const event = this.agents.step(this.agents.get(r.device_id)!);
      work.steps.push(event);
      r = this.agents.get(r.device_id)!;
      if (event.error || event.completed) {
        const record = healthAt(r, event.at);
        this.agents.noteHealth(r.device_id, record, event.at);
        work.health.push({ deviceId: r.device_id, record, at: event.at, reason: event.error ? "update_failed" : "update_completed" });
        work.audits.push(event.error
          ? { eventType: "agent_update_failed", category: "device_management", severity: "error", deviceId: r.device_id,
              description: `Update of ${r.device_id} to ${event.target_version} failed: ${event.error}`,
              metadata: { target_version: event.target_version, config_version: event.config_version, error: event.error, failed_in: event.previous }, at: event.at }
          : { eventType: "config_updated", deviceId: r.device_id, description: `Agent ${r.device_id} now runs config ${event.config_version}`,
              metadata: { config_version: event.config_version }, at: event.at });
      }
      // Back up after a reboot, or still up: the agent is heard from (a failed update reports error).
      if (r.state !== "restarting") this.sightAgent(r, healthAt(r, event.at), now, work);
    }
    this.generateTelemetry(r, now, now, work);
    return this.agents.get(r.device_id)!;
  }

  /** Telemetry for (sim_at, to] through the same delta-storage path as a real device's telemetry. */
  private generateTelemetry(row: AgentRow, to: number, now: number, work: AgentWork) {
    const times = telemetryTimes(row.sim_at_ms, to);
    if (!times.length) return;
    const last = times[times.length - 1];
    for (const incident of incidentsBetween(row.seed, row.sim_at_ms, last)) {
      if (incident.start_ms >= row.created_ms) this.agents.logIncident(row.device_id, incident);
    }
    if (row.state !== "restarting") {
      const samples: Sample[] = [];
      const reasons: StoreReason[] = [];
      for (const t of times) {
        const sample = sampleAt(row, t);
        const result = this.metrics.ingest(row.device_id, sample, t);
        // Only what is fresh reaches the live channel: a backfill of unwatched hours is history, not news.
        if (result.stored && t >= now - 60_000) {
          samples.push(sample);
          reasons.push(result.reason);
        }
      }
      if (samples.length) work.metrics.push({ deviceId: row.device_id, samples, reasons });
    }
    this.agents.setTelemetryAt(row.device_id, last);
  }

  /** A health check of a simulated agent at `now`; it also counts as the agent's heartbeat. */
  private checkAgent(row: AgentRow, now: number, work: AgentWork, reason?: string): HealthRecord {
    const health = healthAt(row, now);
    const { changed } = this.agents.noteHealth(row.device_id, health, now);
    if (changed || reason) work.health.push({ deviceId: row.device_id, record: health, at: now, reason: reason ?? "status_changed" });
    if (row.state !== "restarting") this.sightAgent(row, health, now, work);
    return health;
  }

  /** Simulated agents feed presence exactly as a heartbeat does (an unhealthy agent reports error). */
  private sightAgent(row: AgentRow, health: HealthRecord, now: number, work: AgentWork) {
    const interval = Number((JSON.parse(row.configuration) as { heartbeat_interval_s?: unknown }).heartbeat_interval_s) || DEFAULT_INTERVAL_S;
    const { transition, restarted } = this.presence.sighted({
      deviceId: row.device_id,
      reportedStatus: health.status === "unhealthy" ? "error" : undefined,
      intervalS: interval,
      bootId: bootIdOf(row),
      uptimeS: health.metrics.uptime_seconds,
    }, now);
    if (restarted) this.metrics.noteRestart(row.device_id);
    if (transition) work.transitions.push(transition);
  }

  private snapshot(device: AgentDevice, now: number, work: AgentWork): AgentSnapshot {
    if (device.source === "simulated") {
      const row = this.liveAgent(device, now, work);
      const health = this.checkAgent(row, now, work);
      const presence = this.presence.get(row.device_id);
      const plan = row.plan ? (JSON.parse(row.plan) as UpdatePlan) : null;
      return {
        device_id: row.device_id,
        source: "simulated",
        state: row.state,
        state_since: new Date(row.state_since_ms).toISOString(),
        config_version: row.config_version,
        target_version: plan?.target_version ?? null,
        next_transition_at: row.next_at_ms === null ? null : new Date(row.next_at_ms).toISOString(),
        status: presence?.status ?? "online",
        last_heartbeat: presence ? new Date(presence.last_seen_ms).toISOString() : null,
        health,
        uptime_seconds: health.metrics.uptime_seconds,
        configuration: JSON.parse(row.configuration),
        simulation: { seed: row.seed, failure_rate: row.failure_rate, updates: row.updates, boot_count: row.boot_count },
        live_metrics: {
          cpu_usage: health.metrics.cpu_usage_percent,
          memory_usage: health.metrics.memory_usage_percent,
          disk_usage: health.metrics.disk_usage_percent,
          temperature: health.metrics.temperature_celsius,
          uptime: health.metrics.uptime_seconds,
          network_latency: health.metrics.network_latency_ms,
          transaction_count: health.metrics.transactions_today,
        },
      };
    }
    return this.realSnapshot(device, now);
  }

  /** A real device's agent view from its live presence and latest sample (the one rule in src/shared/agent-view.ts). */
  private realSnapshot(device: AgentDevice, now: number): AgentSnapshot {
    const p = this.presence.get(device.deviceId);
    const latest = this.metrics.latest(device.deviceId);
    const view = realAgentView({
      status: p?.status ?? "offline",
      lastSeen: p ? iso(p.last_seen_ms) : null,
      uptime: p?.uptime_s != null ? { seconds: p.uptime_s, atMs: p.last_seen_ms }
        : latest?.uptime_seconds != null ? { seconds: latest.uptime_seconds, atMs: p?.last_seen_ms ?? now } : null,
      latest: latest as LatestSample | null,
      firmware: device.firmware, osType: device.osType, osVersion: device.osVersion, osDetails: device.osDetails,
      hostname: device.hostname, dna: device.dna,
    }, now);
    return {
      device_id: device.deviceId,
      source: "real",
      state: view.state,
      state_since: null,
      config_version: view.config_version,
      target_version: null,
      next_transition_at: null,
      status: view.status,
      last_heartbeat: view.last_heartbeat,
      health: view.health,
      uptime_seconds: view.uptime_seconds,
      configuration: null,
      simulation: null,
      live_metrics: view.live_metrics,
    };
  }

  private rebootAgent(device: AgentDevice, reason: string | null, now: number, work: AgentWork) {
    const row = this.liveAgent(device, now, work);
    const previous = healthAt(row, now);
    const { events, rebootSeconds } = this.agents.restart(row, now, reason);
    work.steps.push(...events);
    const health = this.checkAgent(this.agents.get(row.device_id)!, now, work, "restart");
    return { previous_health: previous, health_check: health, reboot_time_seconds: rebootSeconds, agent_state: "ready" as AgentState };
  }

  private push(device: AgentDevice, push: PushInput, requestedBy: string | null, now: number, work: AgentWork): Outcome<PushResult> {
    const row = this.liveAgent(device, now, work);
    const at = new Date(now).toISOString();
    const action = push.action?.toLowerCase() as PushAction | undefined;
    const done = (status: PushResult["status"], message: string, extra: Partial<PushResult> = {}): Outcome<PushResult> => {
      const r = this.agents.get(row.device_id)!;
      this.agents.log(row.device_id, now, "push", "info", `${status}: ${message}`, { push, requested_by: requestedBy });
      work.pushes = [...(work.pushes ?? []), { device_id: row.device_id, status, message, action: action ?? null, priority: push.priority ?? null, title: push.title ?? null }];
      return { ok: true, value: { status, message, timestamp: at, state: r.state, config_version: r.config_version, ...extra } };
    };
    if (push.backup_data && action !== "backup") {
      this.agents.log(row.device_id, now, "backup", "info", "Data backed up before the requested change", { size_mb: Math.round(20 + 200 * rand(row.seed, 900, row.updates + row.boot_count)) });
    }

    if (action === "restart" || action === "reboot") {
      const r = this.rebootAgent(device, push.message ?? push.title ?? "push", now, work);
      return done("completed", `Restarted in ${r.reboot_time_seconds} s; health check ${r.health_check.status}`, { health_check: r.health_check, result: { reboot_time_seconds: r.reboot_time_seconds } });
    }

    const wantsUpdate = push.config !== undefined || push.config_version !== undefined || action === "update" || action === "update_config";
    if (wantsUpdate) {
      const configuration = JSON.parse(row.configuration) as Record<string, unknown>;
      const config = push.config ?? null;
      const target = push.config_version ?? (config ? configVersionOf({ ...configuration, ...config }) : undefined);
      if (!target) return refuse(422, `The action '${action}' needs a config_version or a config object`);
      const plan = row.plan ? (JSON.parse(row.plan) as UpdatePlan) : null;
      if (plan) {
        if (plan.target_version === target && !push.force) return done("in_progress", `Already updating to ${target} (${row.state})`, { target_version: target });
        if (!push.force) {
          return refuse(409, `Agent ${row.device_id} is ${row.state} for an update to ${plan.target_version}; push again with "force": true to replace it`);
        }
        this.agents.abandon(row, `superseded by a forced push of ${target}`, now);
      } else if (target === row.config_version && !push.force) {
        return done("up_to_date", `Already running config ${target}`);
      }
      const current = this.agents.get(row.device_id)!;
      work.steps.push(this.agents.startUpdate(current, { targetVersion: target, config, backup: !!push.backup_data, requestedBy }, now));
      const started = this.agents.get(row.device_id)!;
      return done("accepted", `Update ${current.config_version} → ${target} started: downloading`, { target_version: target, state: started.state });
    }

    if (action === "health_check" || action === "diagnostics") {
      const health = this.checkAgent(row, now, work, "push");
      return done("completed", `Health check: ${health.status}${health.error ? ` (${health.error})` : ""}`, { health_check: health });
    }
    if (action === "ping") {
      const latency = 5 + Math.floor(rand(row.seed, 901, Math.floor(now / 1000)) * 46);
      return done("completed", `Pong in ${latency} ms`, { result: { latency_ms: latency } });
    }
    if (action === "backup") {
      const size = Math.round(20 + 200 * rand(row.seed, 902, Math.floor(now / 60_000)));
      return done("completed", `Backup of ${size} MB completed`, { result: { backup_size_mb: size } });
    }
    if (action === "clear_cache") {
      const freed = Math.round(5 + 120 * rand(row.seed, 903, Math.floor(now / 60_000)));
      return done("completed", `Cache cleared (${freed} MB freed)`, { result: { freed_mb: freed } });
    }
    const text = push.title ?? push.message ?? push.body ?? "notification";
    return done("delivered", `Notification delivered: ${text}`);
  }

  private series(deviceId: string, request: SeriesRequest): SeriesReply {
    const fromIso = new Date(request.fromMs).toISOString();
    const b = request.bucketMs;
    const bucketOf = "(CAST(strftime('%s', recorded_at) AS INTEGER) * 1000 / CAST(? AS INTEGER)) * CAST(? AS INTEGER)";
    if (request.kind === "metrics") {
      const rows = this.sql.exec<Extract<SeriesReply, { kind: "metrics" }>["rows"][number]>(
        `SELECT ${bucketOf} AS bucket, count(*) AS samples,
           avg(cpu) AS cpu_avg, max(cpu) AS cpu_max, avg(memory) AS memory_avg, max(memory) AS memory_max,
           avg(disk) AS disk_avg, max(disk) AS disk_max, avg(temperature) AS temperature_avg,
           avg(latency) AS latency_avg, max(latency) AS latency_max, avg(error_rate) AS error_rate_avg
         FROM metrics_history WHERE device_id = ? AND recorded_at >= ? GROUP BY bucket ORDER BY bucket`,
        b, b, deviceId, fromIso,
      ).toArray();
      return { kind: "metrics" as const, rows };
    }
    if (request.kind === "transactions") {
      const samples = this.sql.exec<{ recorded_at: string; transaction_count: number }>(
        "SELECT recorded_at, transaction_count FROM metrics_history WHERE device_id = ? AND recorded_at >= ? AND transaction_count IS NOT NULL ORDER BY recorded_at, seq",
        deviceId, fromIso,
      ).toArray();
      // The counter is cumulative (transactions today); a drop means it was reset (midnight, reinstall).
      const totals = new Map<number, number>();
      let previous: number | undefined;
      for (const s of samples) {
        const delta = previous === undefined ? 0 : s.transaction_count >= previous ? s.transaction_count - previous : s.transaction_count;
        previous = s.transaction_count;
        const bucket = Math.floor(Date.parse(s.recorded_at) / b) * b;
        totals.set(bucket, (totals.get(bucket) ?? 0) + delta);
      }
      return {
        kind: "transactions" as const,
        rows: [...totals.entries()].map(([bucket, transactions]) => ({ bucket, transactions })),
        latest: samples.length ? samples[samples.length - 1].transaction_count : null,
      };
    }
    const rates = this.sql.exec<{ bucket: number; error_rate_avg: number | null; samples: number }>(
      `SELECT ${bucketOf} AS bucket, avg(error_rate) AS error_rate_avg, count(*) AS samples FROM metrics_history
       WHERE device_id = ? AND recorded_at >= ? GROUP BY bucket ORDER BY bucket`,
      b, b, deviceId, fromIso,
    ).toArray();
    const counts = new Map(this.agents.errorBuckets(deviceId, request.fromMs, b).map((r) => [r.bucket, r.n]));
    const buckets = new Set([...rates.map((r) => r.bucket), ...counts.keys()]);
    const byBucket = new Map(rates.map((r) => [r.bucket, r]));
    return {
      kind: "errors" as const,
      rows: [...buckets].sort((x, y) => x - y).map((bucket) => ({ bucket, errors: counts.get(bucket) ?? 0, error_rate_avg: byBucket.get(bucket)?.error_rate_avg ?? null })),
      events: this.agents.events(deviceId, request.fromMs, { levels: ["error", "warning"], limit: 100 }),
    };
  }

  /** Publishes what a piece of agent work changed and writes what D1 must hear, in one batch. */
  private async finishAgentWork(work: AgentWork, now: number, schedule: boolean) {
    for (const e of work.steps) {
      this.host.emit("agent.state", {
        device_id: e.device_id, previous: e.previous, state: e.state, config_version: e.config_version,
        target_version: e.target_version, at: new Date(e.at).toISOString(), ...(e.error ? { error: e.error } : {}),
      });
    }
    for (const p of work.pushes ?? []) this.host.emit("agent.push", p);
    for (const m of work.metrics) this.host.emit("device.metrics", { device_id: m.deviceId, samples: m.samples, reasons: m.reasons });
    const before = this.host.outbox.added;
    this.writeAgentRecords(work, now);
    await this.host.applyTransitions(work.transitions);
    // What an agent did is in D1 when the call that did it answers (a failed flush is retried by the alarm).
    if (this.host.outbox.added !== before) await this.host.outbox.flushQuietly();
    if (schedule) await this.host.ensureAlarm(now);
  }

  /** health_checks rows, audit events and the agents projection (rows changed since last written), into the outbox. */
  private writeAgentRecords(work: AgentWork, now: number) {
    const outbox = this.host.outbox;
    for (const h of work.health) {
      outbox.healthCheck({
        device_id: h.deviceId, status: h.record.status, response_time_ms: h.record.response_time_ms ?? null,
        details: { ...h.record, reason: h.reason }, created_at: iso(h.at),
      }, now);
    }
    for (const a of work.audits) {
      outbox.audit({
        eventType: a.eventType, category: a.category, severity: a.severity, description: a.description,
        deviceId: a.deviceId, metadata: a.metadata, at: iso(a.at),
      }, now);
    }
    const unprojected = this.agents.unprojected();
    for (const r of unprojected) {
      const plan = r.plan ? (JSON.parse(r.plan) as UpdatePlan) : null;
      outbox.agentProjection({
        device_id: r.device_id, state: r.state, config_version: r.config_version, target_version: plan?.target_version ?? null,
        health_status: r.health_status, last_health_check: r.last_health,
        last_health_at: r.checked_at_ms === null ? null : iso(r.checked_at_ms), booted_at: iso(r.boot_ms), state_changed_at: iso(r.state_since_ms),
      }, now);
    }
    this.agents.markProjected(unprojected.map((r) => r.device_id));
  }

  /**
   * Simulated agents of the site, from D1: created if missing, stopped when their device is no longer
   * active. Runs when someone starts watching (at most once a minute) and for site health.
   */
  private syncSimulated(devices: SimulatedDevice[], now: number, work: AgentWork) {
    const wanted = new Set(devices.map((d) => d.device_id));
    for (const id of this.agents.activeIds()) {
      if (!wanted.has(id)) {
        this.agents.deactivate(id);
        this.presence.forget(id);
      }
    }
    for (const d of devices) {
      const row = this.liveAgent({ deviceId: d.device_id, deviceType: d.device_type, createdAt: d.created_at }, now, work);
      this.checkAgent(row, now, work);
    }
    this.agentsSyncedAt = now;
  }

  private async loadSimulated(): Promise<SimulatedDevice[]> {
    const { results } = await this.host.d1().prepare(
      "SELECT device_id, device_type, created_at FROM devices WHERE site_id = ? AND device_source = 'simulated' AND lifecycle_state = 'active'",
    ).bind(this.host.siteId()).all<SimulatedDevice>();
    return results;
  }
}
