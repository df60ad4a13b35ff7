import {
  assessAnomaly, assessRisk, type AnomalyAssessment, type MetricPoint, type MetricValues, type RiskAssessment,
} from "../src/shared/ai-engine";
import type { DeviceAnomaly, DeviceRiskSummary, RecentDeviceEvent } from "../src/shared/hub-contract";
import { iso } from "../src/shared/time";
import type { MetricsStore } from "./metrics";

/** How much of a device's own history its anomaly baseline reads. */
export const BASELINE_WINDOW_MS = 24 * 3_600_000;
const BASELINE_MAX_ROWS = 500;
/** The most samples a risk assessment reads: the newest, however busy the device was. */
const RISK_MAX_ROWS = 5000;
/** Live-ring events that say something about one device, for the assistant's status block. */
const DEVICE_EVENT_TYPES = ["device.status", "device.metrics", "agent.state", "agent.health", "command.updated", "job.updated"];

type HistoryRow = ReturnType<MetricsStore["history"]>[number];

const pointOf = (row: HistoryRow): MetricPoint => ({
  t: Date.parse(row.recorded_at),
  cpu: row.cpu, memory: row.memory, disk: row.disk, temperature: row.temperature, latency: row.latency, error_rate: row.error_rate,
});

const valuesOfLatest = (sample: NonNullable<ReturnType<MetricsStore["latest"]>>): MetricValues => ({
  cpu: sample.cpu_usage, memory: sample.memory_usage, disk: sample.disk_usage,
  temperature: sample.temperature ?? null, latency: sample.network_latency_ms ?? null, error_rate: sample.error_rate ?? null,
});

/**
 * The assistant's view of a site, read only from this hub's own storage: each device's metrics
 * history (metrics.ts) and the live ring (live.ts) for presence transitions and recent events.
 * Nothing here writes.
 */
export class AiAssessor {
  constructor(private readonly sql: SqlStorage, private readonly metrics: MetricsStore) {}

  /** The device's newest stored samples since `sinceIso` (at most `limit`), oldest first. */
  private newestRows(deviceId: string, sinceIso: string, limit: number): HistoryRow[] {
    return this.sql.exec<HistoryRow>(
      `SELECT recorded_at, cpu, memory, disk, temperature, latency, transaction_count, uptime_s, error_rate, reason FROM metrics_history
       WHERE device_id = ? AND recorded_at >= ? ORDER BY recorded_at DESC, seq DESC LIMIT ?`,
      deviceId, sinceIso, limit,
    ).toArray().reverse();
  }

  private deviceIds(): string[] {
    return this.sql.exec<{ device_id: string }>("SELECT device_id FROM metrics_state ORDER BY device_id").toArray().map((r) => r.device_id);
  }

  /** One device's latest values against its own last day (the latest sample left out), or its peers'. */
  anomaly(deviceId: string, now: number, peerLatest?: Map<string, MetricValues>): AnomalyAssessment & { detected_at: string | null } {
    const latest = this.metrics.latest(deviceId);
    const history = this.newestRows(deviceId, iso(now - BASELINE_WINDOW_MS), BASELINE_MAX_ROWS + 1)
      .filter((row) => row.recorded_at !== latest?.recorded_at)
      .slice(-BASELINE_MAX_ROWS)
      .map(pointOf);
    const peers = [...(peerLatest ?? this.latestValues()).entries()].filter(([id]) => id !== deviceId).map(([, v]) => v);
    return { ...assessAnomaly(latest ? valuesOfLatest(latest) : null, history, peers), detected_at: latest?.recorded_at ?? null };
  }

  private latestValues(): Map<string, MetricValues> {
    const map = new Map<string, MetricValues>();
    for (const id of this.deviceIds()) {
      const latest = this.metrics.latest(id);
      if (latest) map.set(id, valuesOfLatest(latest));
    }
    return map;
  }

  /** Every device of the site whose current anomaly score is at least `minScore`, highest first. */
  anomalies(siteId: string, minScore: number, now: number): DeviceAnomaly[] {
    const peers = this.latestValues();
    const found: DeviceAnomaly[] = [];
    for (const deviceId of peers.keys()) {
      const a = this.anomaly(deviceId, now, peers);
      if (a.score === null || a.score < minScore || a.detected_at === null) continue;
      found.push({ device_id: deviceId, site_id: siteId, score: a.score, is_anomaly: a.is_anomaly, basis: a.basis, reasons: a.reasons, explanation: a.explanation, detected_at: a.detected_at });
    }
    return found.sort((a, b) => b.score - a.score || a.device_id.localeCompare(b.device_id));
  }

  /** Values sent by a caller, against the device's own last day, else its peers'. */
  scoreValues(deviceId: string, values: MetricValues, now: number): AnomalyAssessment {
    const history = this.newestRows(deviceId, iso(now - BASELINE_WINDOW_MS), BASELINE_MAX_ROWS).map(pointOf);
    const peers = [...this.latestValues().entries()].filter(([id]) => id !== deviceId).map(([, v]) => v);
    return assessAnomaly(values, history, peers);
  }

  /** Every device of the site with a risk of at least `minRisk`, highest first. */
  risks(siteId: string, minRisk: number, now: number, windowMs: number): DeviceRiskSummary[] {
    const found: DeviceRiskSummary[] = [];
    for (const deviceId of this.deviceIds()) {
      const r = this.risk(deviceId, now, windowMs);
      if (r.risk_score === null || r.risk_score < minRisk) continue;
      found.push({
        device_id: deviceId, site_id: siteId, risk_score: r.risk_score, risk_level: r.risk_level,
        top_factor: r.factors[0]?.detail ?? null, time_to_threshold: r.time_to_threshold, recommendations: r.recommendations,
      });
    }
    return found.sort((a, b) => b.risk_score - a.risk_score || a.device_id.localeCompare(b.device_id));
  }

  /**
   * One device's failure risk over the last `windowMs`: its stored samples, the restarts they show
   * (a first sample after the window's first one) and its offline transitions in the live ring.
   */
  risk(deviceId: string, now: number, windowMs: number): RiskAssessment {
    const rows = this.newestRows(deviceId, iso(now - windowMs), RISK_MAX_ROWS);
    const restarts = rows.slice(1).filter((r) => r.reason === "first_sample").length;
    const offline = this.deviceEvents(deviceId, now - windowMs)
      .filter((e) => e.type === "device.status" && (e.data as { status?: unknown }).status === "offline").length;
    return assessRisk(rows.map(pointOf), { restarts, offline_transitions: offline }, windowMs);
  }

  /** The device's most recent events in the live ring, newest first. */
  recentEvents(deviceId: string, limit: number): RecentDeviceEvent[] {
    return this.deviceEvents(deviceId, 0).slice(-limit).reverse();
  }

  private deviceEvents(deviceId: string, sinceMs: number): RecentDeviceEvent[] {
    const placeholders = DEVICE_EVENT_TYPES.map(() => "?").join(", ");
    return this.sql.exec<{ type: string; ts: string; data: string }>(
      `SELECT type, ts, data FROM live_events WHERE ts >= ? AND type IN (${placeholders}) AND json_extract(data, '$.device_id') = ? ORDER BY seq`,
      iso(sinceMs), ...DEVICE_EVENT_TYPES, deviceId,
    ).toArray().map((r) => ({ type: r.type, at: r.ts, data: JSON.parse(r.data) }));
  }
}
