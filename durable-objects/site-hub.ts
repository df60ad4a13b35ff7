import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env";
import { summariseSiteHealth, type SiteHealthDevice } from "../src/services/site-health";
import { LIVE_SCHEMA, LiveRing, type LiveEvent } from "./live";
import { DeviceRateLimiter, type RateLimited } from "./rate-limit";
import { LAST_SEEN_FLUSH_MS, PRESENCE_SCHEMA, Presence, flushLastSeen, offlineAfterMs, recordTransitions, type Sighting, type Transition } from "./presence";
import { METRICS_SCHEMA, MetricsStore, policyFromEnv, type Sample, type StoreReason } from "./metrics";

const PRUNE_EVERY_MS = 6 * 3_600_000;

/**
 * A piece of the hub that needs time: `nextWake` says when it next has work (undefined: none), and
 * `onAlarm` does whatever is due. The hub keeps one alarm at the earliest wake of all parts, so an
 * idle site has no alarm at all.
 */
export interface TimedPart {
  nextWake(now: number): number | undefined;
  onAlarm(now: number): Promise<void>;
}

export interface HeartbeatResult {
  status: string;
  next_heartbeat_s: number;
  server_time: string;
}

/**
 * One per site (named by site_id): everything live about the site — presence, metrics delta state,
 * command queue, job fan-out, simulated agents — in its own SQLite, plus the fan-out of changes to
 * dashboards. The Worker talks to it over RPC; `fetch` is only for WebSocket upgrades.
 */
export class SiteHub extends DurableObject<Env> {
  protected readonly sql: SqlStorage;
  protected readonly live: LiveRing;
  protected readonly presence: Presence;
  protected readonly metrics: MetricsStore;
  protected readonly limiter = new DeviceRateLimiter();
  private siteIdValue: string | undefined;
  /** In-memory copy of the scheduled alarm time, so hot calls do not read storage to check it. */
  private alarmAt: number | null | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(LIVE_SCHEMA + PRESENCE_SCHEMA + METRICS_SCHEMA);
    this.sql.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    this.siteIdValue = this.meta("site_id");
    this.live = new LiveRing(this.sql, () => this.siteIdValue ?? "");
    this.presence = new Presence(this.sql);
    this.metrics = new MetricsStore(this.sql, policyFromEnv(env as unknown as Record<string, unknown>));
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

  // ---- live channel -------------------------------------------------------------------------

  /** Appends an event to the site's live stream and delivers it to current subscribers. */
  async publish(siteId: string, type: string, data: unknown): Promise<LiveEvent> {
    this.bind(siteId);
    return this.emit(type, data);
  }

  protected emit(type: string, data: unknown): LiveEvent {
    const event = this.live.append(type, data);
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
    for (const socket of this.ctx.getWebSockets()) {
      try {
        socket.send(message);
      } catch {
        // A socket closing mid-send is cleaned up by webSocketClose.
      }
    }
  }

  // ---- device calls (the hot path: no D1 write unless something changed) -------------------

  async heartbeat(siteId: string, sighting: Sighting): Promise<HeartbeatResult | RateLimited> {
    this.bind(siteId);
    const now = Date.now();
    const wait = this.limiter.take(sighting.deviceId, now);
    if (wait) return { rateLimited: true, retryAfterS: wait };
    const { row, transition, restarted } = this.presence.sighted(sighting, now);
    if (restarted) this.metrics.noteRestart(sighting.deviceId);
    if (transition) await this.applyTransitions([transition]);
    await this.ensureAlarm(now, now + offlineAfterMs(row.interval_s));
    return { status: row.status, next_heartbeat_s: row.interval_s, server_time: new Date(now).toISOString() };
  }

  async telemetry(siteId: string, deviceId: string, samples: Sample[]): Promise<{ stored: boolean; reason: StoreReason }[] | RateLimited> {
    this.bind(siteId);
    const now = Date.now();
    const wait = this.limiter.take(deviceId, now);
    if (wait) return { rateLimited: true, retryAfterS: wait };
    const last = samples[samples.length - 1];
    const { row, transition, restarted } = this.presence.sighted({ deviceId, uptimeS: last?.uptime_seconds, bootId: last?.boot_id }, now);
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

  /** A device left the site's live state (suspended, retired or deleted). */
  async forgetDevice(siteId: string, deviceId: string) {
    this.bind(siteId);
    this.presence.forget(deviceId);
  }

  /** The specification's Site health object: the D1 device list overlaid with live presence. */
  async siteHealth(siteId: string) {
    this.bind(siteId);
    const { results } = await this.env.DB.prepare(
      "SELECT device_id, name, device_type AS type, status, ip_address, last_seen FROM devices WHERE site_id = ? ORDER BY created_at DESC, id DESC",
    ).bind(siteId).all<SiteHealthDevice>();
    const live = new Map(this.presence.all().map((p) => [p.device_id, p]));
    const list = results.map((d) => {
      const p = live.get(d.device_id);
      return p ? { ...d, status: p.status, last_seen: new Date(p.last_seen_ms).toISOString() } : d;
    });
    return summariseSiteHealth(siteId, list);
  }

  /** Live status and last_seen of the given devices (for lists that must agree with site health). */
  async liveStatus(siteId: string): Promise<Record<string, { status: string; last_seen: string }>> {
    this.bind(siteId);
    return Object.fromEntries(this.presence.all().map((p) => [p.device_id, { status: p.status, last_seen: new Date(p.last_seen_ms).toISOString() }]));
  }

  // ---- time ---------------------------------------------------------------------------------

  private async applyTransitions(transitions: Transition[]) {
    await recordTransitions(this.env.DB, this.siteId, transitions);
    for (const t of transitions) {
      this.emit("device.status", { device_id: t.deviceId, previous: t.previous, status: t.next, reason: t.reason, at: new Date(t.at).toISOString() });
    }
  }

  /** Parts that need the alarm, in the order their due work runs. */
  protected timedParts(): TimedPart[] {
    return [
      {
        nextWake: () => this.presence.nextExpiry(),
        onAlarm: async (now) => {
          const expired = this.presence.expire(now);
          if (expired.length) await this.applyTransitions(expired);
        },
      },
      {
        nextWake: (now) => {
          const dirty = this.presence.unflushed().length > 0 || this.metrics.dirtyLatest().length > 0;
          return dirty ? Math.max(now, Number(this.meta("flushed_at") ?? 0) + LAST_SEEN_FLUSH_MS) : undefined;
        },
        onAlarm: async (now) => {
          if (now - Number(this.meta("flushed_at") ?? 0) >= LAST_SEEN_FLUSH_MS) await this.flush(now);
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

  async alarm() {
    this.alarmAt = null;
    const now = Date.now();
    for (const part of this.timedParts()) await part.onAlarm(now);
    const wake = this.nextWake(Date.now());
    if (wake !== undefined) {
      this.alarmAt = Math.max(wake, now + 250);
      await this.ctx.storage.setAlarm(this.alarmAt);
    }
  }

  /** Coalesced D1 writes: last_seen of every device heard from, and each device's latest sample. */
  private async flush(now: number) {
    const seen = this.presence.unflushed();
    const latest = this.metrics.dirtyLatest();
    if (seen.length) await flushLastSeen(this.env.DB, seen);
    if (latest.length) {
      await this.env.DB.prepare(
        `INSERT INTO device_metrics (device_id, site_id, cpu_usage, memory_usage, disk_usage, temperature, network_latency_ms, transaction_count, uptime_seconds, error_rate, recorded_at, updated_at)
         SELECT json_extract(value, '$.device_id'), ?2, json_extract(value, '$.cpu_usage'), json_extract(value, '$.memory_usage'),
                json_extract(value, '$.disk_usage'), json_extract(value, '$.temperature'), json_extract(value, '$.network_latency_ms'),
                json_extract(value, '$.transaction_count'), json_extract(value, '$.uptime_seconds'), json_extract(value, '$.error_rate'),
                json_extract(value, '$.recorded_at'), ?3
         FROM json_each(?1) WHERE true
         ON CONFLICT(device_id) DO UPDATE SET cpu_usage = excluded.cpu_usage, memory_usage = excluded.memory_usage,
           disk_usage = excluded.disk_usage, temperature = excluded.temperature, network_latency_ms = excluded.network_latency_ms,
           transaction_count = excluded.transaction_count, uptime_seconds = excluded.uptime_seconds, error_rate = excluded.error_rate,
           recorded_at = excluded.recorded_at, updated_at = excluded.updated_at`,
      ).bind(JSON.stringify(latest.map((l) => ({ device_id: l.device_id, ...JSON.parse(l.latest) }))), this.siteId, new Date(now).toISOString()).run();
    }
    this.presence.markFlushed(seen);
    this.metrics.markLatestClean(latest.map((l) => l.device_id));
    this.setMeta("flushed_at", String(now));
  }
}
