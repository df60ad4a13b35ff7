import { and, desc, eq, sql, type SQL } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { agents, auditLogs, deviceMetrics, devices, deviceStateHistory, healthChecks } from "../db/schema";
import { conflict } from "../lib/errors";
import { ensureCommandAllowed } from "./consent";
import { HealthRecordSchema, type AgentDevice, type PushInput, type PushResult, type SeriesRequest } from "../shared/hub-contract";
import { AGENT_STATES, LIVE_STATUSES, type DiagnosticComponent } from "../shared/vocabulary";
import { formatUptime, realAgentView } from "../shared/agent-view";
import { siteHub } from "../hub/client";
import { accessibleSiteIds } from "./access";
import { auditRow } from "../shared/audit-row";
import type { DeviceRow } from "./devices";
import { currentDate, workerClock } from "../lib/clock";

export const toAgentDevice = (d: DeviceRow): AgentDevice => ({
  deviceId: d.deviceId,
  name: d.name,
  deviceType: d.deviceType,
  source: d.deviceSource,
  lifecycleState: d.lifecycleState,
  createdAt: d.createdAt,
  firmware: d.firmware,
  osType: d.osType,
  osVersion: d.osVersion,
  osDetails: d.osDetails,
  hostname: d.hostname,
  dna: (d.dna as Record<string, unknown> | null) ?? null,
});

const ensureActive = (device: DeviceRow) => {
  if (device.lifecycleState !== "active") throw conflict(`Device ${device.deviceId} is ${device.lifecycleState}; its agent does not run`);
};

// ---- list (D1 projection) -----------------------------------------------------------------

export const DEVICE_STATUSES = LIVE_STATUSES;
const HEALTH_STATUS = HealthRecordSchema.shape.status;
export const HEALTH_STATUSES = ["healthy", "unhealthy"] as const;
export const AGENT_STATUS_FILTERS = [...AGENT_STATES, ...DEVICE_STATUSES, ...HEALTH_STATUSES] as const;

/** A device without a projection row has never moved: simulated agents start idle; a real device is ready while heard from. */
const stateExpr = sql<string>`coalesce(${agents.state}, CASE WHEN ${devices.deviceSource} = 'real' AND ${devices.status} != 'offline' THEN 'ready' ELSE 'idle' END)`;
const healthExpr = sql<string>`coalesce(${agents.healthStatus}, CASE WHEN ${devices.status} = 'online' THEN 'healthy' ELSE 'unhealthy' END)`;

export interface AgentListFilter {
  siteId?: string;
  deviceType?: string;
  status?: (typeof AGENT_STATUS_FILTERS)[number];
  limit: number;
  offset: number;
}

/**
 * `GET /agents`: one D1 query over devices joined with the agents projection (written by each
 * site's hub on transitions) and the latest metrics — never a call to every site's hub.
 */
export async function listAgents(db: Db, user: AuthUser, filter: AgentListFilter, now = workerClock.now()) {
  const visible = await accessibleSiteIds(db, user);
  let sites = visible;
  if (filter.siteId) sites = !visible || visible.includes(filter.siteId) ? [filter.siteId] : [];
  if (sites && sites.length === 0) return { agents: [], total: 0 };
  let statusFilter: SQL | undefined;
  if (filter.status) {
    if ((AGENT_STATES as readonly string[]).includes(filter.status)) statusFilter = sql`${stateExpr} = ${filter.status}`;
    else if ((DEVICE_STATUSES as readonly string[]).includes(filter.status)) statusFilter = eq(devices.status, filter.status);
    else statusFilter = sql`${healthExpr} = ${filter.status}`;
  }
  const where = and(
    eq(devices.lifecycleState, "active"),
    sites ? sql`${devices.siteId} IN (SELECT value FROM json_each(${JSON.stringify(sites)}))` : undefined,
    filter.deviceType ? sql`lower(${devices.deviceType}) = lower(${filter.deviceType})` : undefined,
    statusFilter,
  );
  const base = () => db.select().from(devices)
    .leftJoin(agents, eq(agents.deviceId, devices.deviceId))
    .leftJoin(deviceMetrics, eq(deviceMetrics.deviceId, devices.deviceId));
  const [rows, count] = await Promise.all([
    base().where(where).orderBy(desc(devices.createdAt), desc(devices.id)).limit(filter.limit).offset(filter.offset).all(),
    db.select({ n: sql<number>`count(*)` }).from(devices).leftJoin(agents, eq(agents.deviceId, devices.deviceId)).where(where).get(),
  ]);
  return { agents: rows.map((r) => toAgentListItem(r.devices, r.agents, r.device_metrics, now)), total: count?.n ?? 0 };
}

type AgentProjection = typeof agents.$inferSelect;
type MetricsRow = typeof deviceMetrics.$inferSelect;

function toAgentListItem(d: DeviceRow, a: AgentProjection | null, m: MetricsRow | null, now: number) {
  const base = {
    device_id: d.deviceId,
    site_id: d.siteId,
    name: d.name,
    device_type: d.deviceType,
    device_source: d.deviceSource,
    status: d.status,
    last_heartbeat: d.lastSeen,
  };
  if (d.deviceSource === "real" || !a) {
    // A real device (or a simulated one whose hub has not projected it yet): the one real-device rule.
    const view = realAgentView({
      status: d.status,
      lastSeen: d.lastSeen,
      uptime: m?.uptimeSeconds != null ? { seconds: m.uptimeSeconds, atMs: Date.parse(m.recordedAt) } : null,
      latest: m ? {
        cpu_usage: m.cpuUsage, memory_usage: m.memoryUsage, disk_usage: m.diskUsage, temperature: m.temperature,
        network_latency_ms: m.networkLatencyMs, transaction_count: m.transactionCount, uptime_seconds: m.uptimeSeconds, error_rate: m.errorRate,
      } : null,
      firmware: d.firmware, osType: d.osType, osVersion: d.osVersion, osDetails: d.osDetails, hostname: d.hostname,
      dna: (d.dna as Record<string, unknown> | null) ?? null,
    }, now);
    const simulatedUnseen = d.deviceSource === "simulated";
    return {
      ...base,
      state: simulatedUnseen ? "idle" as const : view.state,
      config_version: view.config_version,
      target_version: null,
      health_status: simulatedUnseen ? null : view.health.status,
      last_health_check: simulatedUnseen ? null : view.health,
      uptime: view.uptime_seconds === null ? null : formatUptime(view.uptime_seconds),
      state_changed_at: null,
    };
  }
  const online = d.status !== "offline";
  const uptimeS = a.bootedAt && online ? Math.floor((now - Date.parse(a.bootedAt)) / 1000) : null;
  return {
    ...base,
    state: a.state,
    config_version: a.configVersion,
    target_version: a.targetVersion ?? null,
    health_status: HEALTH_STATUS.safeParse(a.healthStatus).data ?? null,
    last_health_check: HealthRecordSchema.safeParse(a.lastHealthCheck).data ?? null,
    uptime: uptimeS === null ? null : formatUptime(uptimeS),
    state_changed_at: a.stateChangedAt ?? null,
  };
}

// ---- one agent (through its site's hub) ---------------------------------------------------

export async function agentDetail(env: Env, device: DeviceRow) {
  ensureActive(device);
  const snap = await siteHub(env, device.siteId).agent(toAgentDevice(device));
  return {
    device_id: device.deviceId,
    site_id: device.siteId,
    name: device.name,
    device_type: device.deviceType,
    device_source: device.deviceSource,
    status: snap.status,
    state: snap.state,
    state_since: snap.state_since,
    config_version: snap.config_version,
    target_version: snap.target_version,
    next_transition_at: snap.next_transition_at,
    last_health_check: snap.health,
    uptime: snap.uptime_seconds === null ? null : formatUptime(snap.uptime_seconds),
    uptime_seconds: snap.uptime_seconds,
    version: snap.health.device_info?.firmware ?? null,
    last_heartbeat: snap.last_heartbeat,
    health_metrics: snap.live_metrics,
    configuration: snap.configuration,
    simulation: snap.simulation,
  };
}

/**
 * Starts the agent of a simulated device just registered: it is created idle in its site's hub and
 * seen online at once. Should the hub be unreachable, the registration stands and the agent is
 * created the next time the site is watched or its health is read.
 */
export async function startSimulatedAgent(env: Env, device: typeof devices.$inferInsert) {
  if (device.deviceSource !== "simulated") return;
  try {
    await siteHub(env, device.siteId).agent({
      deviceId: device.deviceId, name: device.name, deviceType: device.deviceType ?? "pos_terminal", source: "simulated",
      lifecycleState: "active", createdAt: currentDate().toISOString(), firmware: null, osType: device.osType ?? null,
      osVersion: device.osVersion ?? null, osDetails: device.osDetails ?? null, hostname: null, dna: null,
    });
  } catch (error) {
    console.error(`starting the simulated agent of ${device.deviceId} failed`, error);
  }
}

// ---- push ---------------------------------------------------------------------------------

/** The command a push becomes for a real device (its agent runs on the device, not in the hub). */
export function pushAsCommand(push: PushInput): { commandType: string; payload: Record<string, unknown> } {
  const action = push.action?.toLowerCase();
  const extras = {
    ...(push.force !== undefined ? { force: push.force } : {}),
    ...(push.backup_data !== undefined ? { backup_data: push.backup_data } : {}),
    ...(push.priority ? { priority: push.priority } : {}),
    ...(push.message ? { message: push.message } : {}),
  };
  if (action === "restart" || action === "reboot") return { commandType: "restart", payload: extras };
  if (push.config !== undefined || push.config_version !== undefined || action === "update" || action === "update_config") {
    return {
      commandType: "update_config",
      payload: { ...extras, ...(push.config_version ? { config_version: push.config_version } : {}), ...(push.config ? { settings: push.config } : {}) },
    };
  }
  if (action && action !== "notify") return { commandType: action, payload: extras };
  return {
    commandType: "notify",
    payload: { ...extras, ...(push.title ? { title: push.title } : {}), ...(push.body ? { body: push.body } : {}), ...(push.data ? { data: push.data } : {}) },
  };
}

export async function pushToAgent(env: Env, db: Db, user: AuthUser, device: DeviceRow, push: PushInput, request?: Request) {
  ensureActive(device);
  const hub = siteHub(env, device.siteId);
  let response: Omit<PushResult, "state" | "config_version"> & { command_id?: string; state?: string; config_version?: string };
  if (device.deviceSource === "simulated") {
    response = await hub.pushToAgent(toAgentDevice(device), push, user.email);
    await db.insert(auditLogs).values(auditRow({
      eventType: "agent_push",
      category: "device_management",
      description: `Push to ${device.deviceId}: ${response.status} — ${response.message}`,
      userId: user.id, siteId: device.siteId, deviceId: device.deviceId,
      metadata: { push, status: response.status, target_version: response.target_version ?? null },
      request,
    }));
  } else {
    // A real device's agent runs on the device: the push becomes a command it receives on its next poll.
    const { commandType, payload } = pushAsCommand(push);
    ensureCommandAllowed(device, commandType, payload);
    const queued = await hub.queueCommand({
      deviceId: device.deviceId, commandType, payload, createdBy: user.email, userId: user.id, simulated: false, reason: "agent push",
    });
    response = {
      status: "accepted",
      message: `Queued as command ${queued.command.command_type} (${queued.command.command_id}); the device receives it on its next poll`,
      timestamp: currentDate().toISOString(),
      command_id: queued.command.command_id,
    };
  }
  return {
    message: `Push ${response.status} for device ${device.deviceId}`,
    device_id: device.deviceId,
    response: { ...response, device_id: device.deviceId },
  };
}

// ---- restart and health -------------------------------------------------------------------

export async function restartDevice(env: Env, db: Db, user: AuthUser, device: DeviceRow, reason: string | undefined, request?: Request) {
  ensureActive(device);
  const hub = siteHub(env, device.siteId);
  if (device.deviceSource === "simulated") {
    const r = await hub.restartAgent(toAgentDevice(device), reason ?? null);
    await db.insert(auditLogs).values(auditRow({
      eventType: "device_restart",
      description: `Device ${device.deviceId} restarted in ${r.reboot_time_seconds} s${reason ? `: ${reason}` : ""} (${r.previous_health.status} → ${r.health_check.status})`,
      userId: user.id, siteId: device.siteId, deviceId: device.deviceId,
      metadata: { reason: reason ?? null, reboot_time_seconds: r.reboot_time_seconds, previous_health: r.previous_health.status, health: r.health_check.status, previous_error: r.previous_health.error ?? null },
      request,
    }));
    return {
      message: `Device ${device.deviceId} restarted`,
      device_id: device.deviceId,
      response: {
        status: "success",
        message: `Restart completed in ${r.reboot_time_seconds} s; health check ${r.health_check.status}`,
        device_id: device.deviceId,
        health_check: r.health_check,
        reboot_time_seconds: r.reboot_time_seconds,
        previous_status: r.previous_health.status,
      },
    };
  }
  ensureCommandAllowed(device, "restart");
  const queued = await hub.queueCommand({
    deviceId: device.deviceId, commandType: "restart", payload: reason ? { reason } : {}, createdBy: user.email, userId: user.id,
    simulated: false, reason: reason ? `restart: ${reason}` : "restart",
  });
  const current = await hub.agentHealth(toAgentDevice(device));
  await db.insert(auditLogs).values(auditRow({
    eventType: "device_restart",
    description: `Restart of ${device.deviceId} queued as command ${queued.command.command_id}${reason ? `: ${reason}` : ""}`,
    userId: user.id, siteId: device.siteId, deviceId: device.deviceId,
    metadata: { reason: reason ?? null, command_id: queued.command.command_id, queued: true },
    request,
  }));
  return {
    message: `Restart queued for device ${device.deviceId}`,
    device_id: device.deviceId,
    response: {
      status: "queued",
      message: `The device restarts when it polls its commands (command ${queued.command.command_id}); the health check is its last reported state`,
      device_id: device.deviceId,
      health_check: current.health,
      command_id: queued.command.command_id,
    },
  };
}

export async function deviceHealth(env: Env, device: DeviceRow) {
  ensureActive(device);
  const r = await siteHub(env, device.siteId).agentHealth(toAgentDevice(device));
  return { device_id: device.deviceId, health: r.health, agent_state: r.agent_state, last_updated: r.last_updated };
}

export interface DiagnosticsInput {
  force_check?: boolean;
  diagnostic_mode?: string;
  include_logs?: boolean;
  test_components?: DiagnosticComponent[];
}

export async function runDiagnostics(env: Env, db: Db, user: AuthUser, device: DeviceRow, input: DiagnosticsInput, request?: Request) {
  ensureActive(device);
  const mode = input.diagnostic_mode ?? "standard";
  const components = [...new Set(input.test_components ?? ["payment", "printer", "display", "network"])] as DiagnosticComponent[];
  const r = await siteHub(env, device.siteId).agentDiagnostics(toAgentDevice(device), {
    components, includeLogs: !!input.include_logs, mode,
  });
  const failed = Object.entries(r.diagnostics).filter(([, d]) => d.status === "fail").map(([c]) => c);
  await db.insert(auditLogs).values(auditRow({
    eventType: "device_health_check",
    description: `Diagnostics (${mode}) on ${device.deviceId}: ${r.health.status}${failed.length ? `, failed ${failed.join(", ")}` : ""}`,
    severity: r.health.status === "healthy" ? "info" : "warning",
    userId: user.id, siteId: device.siteId, deviceId: device.deviceId,
    metadata: { mode, components, force_check: !!input.force_check, health: r.health.status, failed },
    request,
  }));
  return {
    device_id: device.deviceId,
    health: r.health,
    agent_state: r.agent_state,
    diagnostic_mode: mode,
    diagnostics: r.diagnostics,
    ...(input.include_logs ? { logs: r.logs ?? [] } : {}),
    timestamp: r.timestamp,
  };
}

/** Recorded health checks of a device, newest first (for tests and the detail views). */
export const recentHealthChecks = (db: Db, deviceId: string, limit = 20) =>
  db.select().from(healthChecks).where(eq(healthChecks.deviceId, deviceId)).orderBy(desc(healthChecks.createdAt), desc(healthChecks.id)).limit(limit).all();

// ---- series -------------------------------------------------------------------------------

export interface Period {
  label: string;
  ms: number;
  bucketMs: number;
}

const MAX_PERIOD_MS = 90 * 86_400_000;

/** `24h`, `1d`, `7d` (any 1–2160 h or 1–90 d): the window and its bucket (1 h up to 2 days, 6 h up to 14 days, else 1 day). */
export function parsePeriod(label: string): Period | undefined {
  const m = /^(\d{1,4})([hd])$/.exec(label);
  if (!m) return undefined;
  const ms = Number(m[1]) * (m[2] === "h" ? 3_600_000 : 86_400_000);
  if (ms < 3_600_000 || ms > MAX_PERIOD_MS) return undefined;
  const bucketMs = ms <= 2 * 86_400_000 ? 3_600_000 : ms <= 14 * 86_400_000 ? 6 * 3_600_000 : 86_400_000;
  return { label, ms, bucketMs };
}

const bucketStarts = (fromMs: number, toMs: number, bucketMs: number) => {
  const starts: number[] = [];
  for (let t = Math.floor(fromMs / bucketMs) * bucketMs; t <= toMs; t += bucketMs) starts.push(t);
  return starts;
};

const round = (v: number | null | undefined, digits = 1) => (v === null || v === undefined ? null : Math.round(v * 10 ** digits) / 10 ** digits);

export async function agentSeries(env: Env, db: Db, device: DeviceRow, kind: SeriesRequest["kind"], period: Period, now = workerClock.now()) {
  const fromMs = now - period.ms;
  const r = await siteHub(env, device.siteId).agentSeries(toAgentDevice(device), { kind, fromMs, bucketMs: period.bucketMs });
  const head = {
    device_id: device.deviceId,
    device_source: device.deviceSource,
    period: period.label,
    from: new Date(fromMs).toISOString(),
    to: new Date(now).toISOString(),
    bucket_seconds: period.bucketMs / 1000,
  };
  const starts = bucketStarts(fromMs, now, period.bucketMs);
  const iso = (t: number) => new Date(t).toISOString();
  if (r.kind === "metrics") {
    const rows = new Map(r.rows.map((row) => [Number(row.bucket), row]));
    const series = starts.map((t) => {
      const row = rows.get(t);
      return {
        timestamp: iso(t),
        samples: Number(row?.samples ?? 0),
        cpu_usage_avg: round(row?.cpu_avg), cpu_usage_max: round(row?.cpu_max),
        memory_usage_avg: round(row?.memory_avg), memory_usage_max: round(row?.memory_max),
        disk_usage_avg: round(row?.disk_avg), disk_usage_max: round(row?.disk_max),
        temperature_avg: round(row?.temperature_avg),
        network_latency_ms_avg: round(row?.latency_avg), network_latency_ms_max: round(row?.latency_max),
        error_rate_avg: round(row?.error_rate_avg, 4),
      };
    });
    return { ...head, samples: series.reduce((n, s) => n + s.samples, 0), series };
  }
  if (r.kind === "transactions") {
    const rows = new Map(r.rows.map((row) => [row.bucket, row.transactions]));
    const series = starts.map((t) => ({ timestamp: iso(t), transactions: rows.get(t) ?? 0 }));
    return { ...head, total: series.reduce((n, s) => n + s.transactions, 0), transactions_today: r.latest ?? null, series };
  }
  const rows = new Map(r.rows.map((row) => [row.bucket, row]));
  let events = r.events.map((e) => ({ ...e, data: e.data ?? null }));
  if (device.deviceSource === "real") {
    // A real device's errors are its reported error states (device_state_history).
    const history = await db.select().from(deviceStateHistory)
      .where(and(eq(deviceStateHistory.deviceId, device.deviceId), eq(deviceStateHistory.newState, "error"), sql`${deviceStateHistory.timestamp} >= ${head.from}`))
      .orderBy(desc(deviceStateHistory.timestamp)).limit(100).all();
    events = history.map((h) => ({ timestamp: h.timestamp, kind: "device_error", level: "error", message: h.reason ?? "The device reported an error", data: null }));
    for (const h of history) {
      const bucket = Math.floor(Date.parse(h.timestamp) / period.bucketMs) * period.bucketMs;
      const row = rows.get(bucket) ?? { bucket, errors: 0, error_rate_avg: null };
      row.errors += 1;
      rows.set(bucket, row);
    }
  }
  const series = starts.map((t) => ({ timestamp: iso(t), errors: rows.get(t)?.errors ?? 0, error_rate_avg: round(rows.get(t)?.error_rate_avg, 4) }));
  return { ...head, total_errors: series.reduce((n, s) => n + s.errors, 0), series, recent: events };
}
