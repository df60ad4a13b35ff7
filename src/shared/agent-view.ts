/**
 * The agent view of a real device — its agent runs on the device, so all the service knows is what
 * the device reported: presence, its latest telemetry sample and its DNA. The site hub builds the
 * detail view from its live state and the Worker builds the fleet list from D1's copies of the same
 * facts; both go through `realAgentView`, so the two can only differ by how fresh their inputs are.
 */
import type { AgentState } from "./vocabulary";
import type { PartialHealth } from "./hub-contract";
import { iso } from "./time";

/** The latest telemetry sample as stored (hub: metrics_state.latest; D1: device_metrics). */
export interface LatestSample {
  cpu_usage?: number | null;
  memory_usage?: number | null;
  disk_usage?: number | null;
  temperature?: number | null;
  network_latency_ms?: number | null;
  transaction_count?: number | null;
  uptime_seconds?: number | null;
  error_rate?: number | null;
}

export interface RealDeviceFacts {
  status: string;
  lastSeen: string | null;
  /** Uptime the device last reported, and when (epoch ms) that was true. */
  uptime: { seconds: number; atMs: number } | null;
  latest: LatestSample | null;
  firmware: string | null;
  osType: string | null;
  osVersion: string | null;
  osDetails: string | null;
  hostname: string | null;
  dna: Record<string, unknown> | null;
}

const text = (v: unknown) => (typeof v === "string" && v ? v : undefined);
const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
const orNull = (v: number | null | undefined) => (v === undefined ? null : v);

export function realAgentView(facts: RealDeviceFacts, now: number) {
  const { status, lastSeen, latest } = facts;
  const online = status !== "offline";
  const uptimeS = facts.uptime ? facts.uptime.seconds + (online ? Math.max(0, Math.floor((now - facts.uptime.atMs) / 1000)) : 0) : null;
  const dna = facts.dna ?? {};
  const error = status === "error" ? "The device reported an error"
    : status === "offline" ? (lastSeen ? `No heartbeat since ${lastSeen}` : "The device has not called in yet") : undefined;
  const os = text(facts.osDetails) ?? ([facts.osType, facts.osVersion].filter(Boolean).join(" ") || undefined);
  const health: PartialHealth = {
    status: error ? "unhealthy" : "healthy",
    config_version: text(dna.config_version),
    last_restart: uptimeS !== null ? iso(now - uptimeS * 1000) : undefined,
    response_time_ms: num(latest?.network_latency_ms) !== undefined ? Math.round(latest!.network_latency_ms!) : undefined,
    device_info: {
      model: text(dna.model) ?? text(facts.hostname),
      firmware: text(facts.firmware),
      os,
      memory_mb: num(dna.memory_mb),
      storage_gb: num(dna.storage_gb),
      uptime_hours: uptimeS !== null ? Math.round(uptimeS / 360) / 10 : undefined,
    },
    services: { network: online ? "connected" : "disconnected" },
    metrics: latest ? {
      cpu_usage_percent: num(latest.cpu_usage),
      memory_usage_percent: num(latest.memory_usage),
      disk_usage_percent: num(latest.disk_usage),
      transactions_today: num(latest.transaction_count),
      uptime_seconds: num(latest.uptime_seconds),
      temperature_celsius: num(latest.temperature),
      network_latency_ms: num(latest.network_latency_ms),
      error_rate: num(latest.error_rate),
    } : undefined,
    error,
    checked_at: iso(now),
  };
  const state: AgentState = online ? "ready" : "idle";
  return {
    state,
    status,
    last_heartbeat: lastSeen,
    config_version: health.config_version ?? null,
    health,
    uptime_seconds: uptimeS,
    live_metrics: latest ? {
      cpu_usage: orNull(latest.cpu_usage),
      memory_usage: orNull(latest.memory_usage),
      disk_usage: orNull(latest.disk_usage),
      temperature: orNull(latest.temperature),
      uptime: orNull(latest.uptime_seconds),
      network_latency: orNull(latest.network_latency_ms),
      transaction_count: orNull(latest.transaction_count),
    } : null,
  };
}

/** "3d 4h 12m" */
export function formatUptime(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s % 60}s`;
}
