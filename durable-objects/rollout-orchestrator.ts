import { DurableObject } from "cloudflare:workers";
import { drizzle } from "drizzle-orm/d1";
import { eq } from "drizzle-orm";
import * as schema from "../src/db/schema";
import type { HubBindings } from "../src/shared/config";
import type { JobSpec } from "../src/shared/hub-contract";
import { auditRow } from "../src/shared/audit-row";
import { newJobId } from "../src/shared/ids";
import { iso, isoOrNull, systemClock, type Clock } from "../src/shared/time";
import { isOpenCommandStatus } from "../src/shared/vocabulary";
import { inWindow } from "../src/shared/rollout-plan";
import {
  ROLLOUT_EVENTS_KEEPALIVE_MS, ROLLOUT_EVENTS_RETRY_MS, RolloutDeviceReportSchema, RolloutEventsRequestSchema, RolloutPlanSchema,
  type Actor, type ControlResult, type RolloutControl, type RolloutPlan, type RolloutProgress, type RolloutStatus, type TargetCounts, type TargetState,
} from "../src/shared/rollout-contract";
import type { SiteHub } from "./site-hub";

/** What the orchestrator is bound to: the hubs' bindings plus the site hubs it hands work to. */
export interface RolloutBindings extends HubBindings {
  SITE_HUB: DurableObjectNamespace<SiteHub>;
}

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS rollout_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS rollout_targets (
    device_id TEXT PRIMARY KEY,
    site_id TEXT NOT NULL,
    wave INTEGER NOT NULL,
    state TEXT NOT NULL,
    job_id TEXT,
    started_ms INTEGER,
    changed_ms INTEGER,
    finished_ms INTEGER,
    error TEXT
  );
  CREATE INDEX IF NOT EXISTS rollout_targets_wave ON rollout_targets (wave, state);
  CREATE INDEX IF NOT EXISTS rollout_targets_site ON rollout_targets (site_id, state);
  CREATE INDEX IF NOT EXISTS rollout_targets_job ON rollout_targets (job_id);
  CREATE TABLE IF NOT EXISTS rollout_batches (
    job_id TEXT PRIMARY KEY,
    site_id TEXT NOT NULL,
    wave INTEGER NOT NULL,
    kind TEXT NOT NULL,
    device_ids TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    handed INTEGER NOT NULL DEFAULT 0,
    open INTEGER NOT NULL DEFAULT 1,
    cancelled INTEGER NOT NULL DEFAULT 0
  );
  CREATE TABLE IF NOT EXISTS rollout_site_peaks (site_id TEXT PRIMARY KEY, max_in_flight INTEGER NOT NULL);
`;

/** While devices are executing or recovering, the orchestrator asks their hubs this often. */
export const ROLLOUT_POLL_MS = 5_000;
/** A site outside its start window is looked at again this often. */
const WINDOW_RECHECK_MS = 60_000;
const IN_FLIGHT = "('executing', 'recovering')";
const OPEN = "('pending', 'executing', 'recovering')";

type TargetRow = {
  device_id: string;
  site_id: string;
  wave: number;
  state: TargetState;
  job_id: string | null;
  started_ms: number | null;
  changed_ms: number | null;
  finished_ms: number | null;
  error: string | null;
};

type BatchRow = { job_id: string; site_id: string; wave: number; kind: "rollout" | "rollback"; device_ids: string; created_ms: number; handed: number; open: number; cancelled: number };

/** An open progress stream: who opened it (a revocation names them) and where its frames go. */
interface ProgressStream {
  userId: number;
  writer: WritableStreamDefaultWriter<Uint8Array>;
}

const encoder = new TextEncoder();
const isFinished = (status: RolloutStatus) => status === "completed" || status === "aborted";

const AUDIT_OF: Record<RolloutControl, string> = {
  pause: "rollout_paused", resume: "rollout_resumed", abort: "rollout_aborted", promote: "rollout_promoted",
};

/**
 * One per rollout (named by rollout_id): decides which devices start next within each site's
 * disruption budget, hands them to their site hubs as jobs (so the command queue and its
 * at-least-once delivery do the work), learns their outcomes from the hubs on its alarm, evaluates the
 * abort criteria and moves the waves. Everything it knows is in its own SQLite, so an eviction or a
 * restart loses nothing: every step is written before the call that acts on it, and a hand-off is
 * repeated until it is confirmed (the job id is chosen first, so a repeat creates nothing twice).
 * docs/rollouts.md has the rules.
 */
export class RolloutOrchestrator extends DurableObject<RolloutBindings> {
  /** Tests replace it (`runInDurableObject`) to move time; nothing else does. */
  clock: Clock = systemClock;
  private readonly sql: SqlStorage;
  /** Ticks and controls run one at a time: a hub call in one must not interleave with another's writes. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Open progress streams. They live in memory: a stream holds this instance for as long as it is open. */
  private streams = new Set<ProgressStream>();
  private keepalive: ReturnType<typeof setInterval> | undefined;
  /** The progress last numbered (its JSON), so that a tick that changed nothing sends nothing. */
  private lastNumbered: string | undefined;

  constructor(ctx: DurableObjectState, env: RolloutBindings) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(SCHEMA);
  }

  private now() {
    return this.clock.now();
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  // ---- RPC ------------------------------------------------------------------------------------

  /** Takes the plan the Worker computed; a repeat (the same rollout handed over again) changes nothing. */
  async initialise(plan: RolloutPlan): Promise<RolloutProgress> {
    return this.serial(async () => {
      if (!this.plan()) {
        const parsed = RolloutPlanSchema.parse(plan);
        this.ctx.storage.transactionSync(() => {
          for (const t of parsed.targets) {
            this.sql.exec("INSERT OR IGNORE INTO rollout_targets (device_id, site_id, wave, state) VALUES (?, ?, ?, 'pending')", t.deviceId, t.siteId, t.wave);
          }
          this.setMeta("status", "scheduled");
          this.setMeta("wave", "1");
          // The targets live in their table; the stored plan keeps the rest, so reading it stays cheap.
          this.setMeta("plan", JSON.stringify({ ...parsed, targets: [] }));
        });
        await this.tick();
      }
      return this.progress();
    });
  }

  async getProgress(): Promise<RolloutProgress | null> {
    return this.plan() ? this.progress() : null;
  }

  /** The cron's re-drive: one tick now (and the alarm set again), whatever happened to the last one. */
  async drive(): Promise<RolloutStatus | null> {
    if (!this.plan()) return null;
    return this.serial(async () => {
      await this.tick();
      return this.status();
    });
  }

  /** pause, resume, abort or promote; refused (ok: false, 409) where the status does not allow it. */
  async control(kind: RolloutControl, actor: Actor): Promise<ControlResult> {
    return this.serial(async () => {
      const plan = this.plan();
      if (!plan) return { ok: false, status: "aborted", detail: "Rollout not initialised" };
      const status = this.status();
      const now = this.now();
      const refuse = (detail: string): ControlResult => ({ ok: false, status, detail });
      const terminal = status === "completed" || status === "aborted";
      if (terminal) return refuse(`The rollout is already ${status}`);
      if (kind === "pause") {
        if (status === "paused") return { ok: true, status };
        this.setMeta("status", "paused");
      } else if (kind === "resume") {
        if (status !== "paused") return refuse(`Only a paused rollout resumes; this one is ${status}`);
        this.setMeta("status", this.meta("started_ms") ? "running" : "scheduled");
      } else if (kind === "promote") {
        this.setMeta("promoted", "1");
      } else {
        await this.abortNow(plan, now, `Aborted by ${actor?.email ?? "the system"}`, actor);
        await this.tick();
        return { ok: true, status: this.status() };
      }
      await this.record(plan, now, AUDIT_OF[kind], `Rollout ${plan.rolloutId} (${plan.name}): ${kind} by ${actor?.email ?? "the system"}`, actor);
      await this.tick();
      return { ok: true, status: this.status() };
    });
  }

  async alarm() {
    await this.serial(() => this.tick());
  }

  /**
   * A progress stream for a subscriber the Worker has authorised: `retry:`, then a snapshot of the
   * progress (its `id:` the rollout's event sequence number), then a frame on every change, until
   * the rollout finishes. A finished rollout gets its final snapshot and the stream ends; a client
   * that already had that snapshot (Last-Event-ID) gets 204, which stops EventSource reconnecting.
   */
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const parsed = RolloutEventsRequestSchema.safeParse(Object.fromEntries(url.searchParams));
    if (url.pathname !== "/events" || !parsed.success || !this.plan()) return new Response("Not found", { status: 404 });
    const { user_id: userId, last_event_id: lastEventId } = parsed.data;
    return this.serial(async () => {
      const { seq, frame, status } = this.numberedProgress();
      if (isFinished(status) && lastEventId !== undefined && lastEventId >= seq) return new Response(null, { status: 204 });
      const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
      const stream: ProgressStream = { userId, writer: writable.getWriter() };
      this.write(stream, `retry: ${ROLLOUT_EVENTS_RETRY_MS}\n\n${frame}`);
      if (isFinished(status)) {
        this.end(stream);
      } else {
        this.streams.add(stream);
        stream.writer.closed.catch(() => undefined).finally(() => this.forget(stream));
        this.keepalive ??= setInterval(() => {
          for (const open of this.streams) this.write(open, ": keep-alive\n\n");
        }, ROLLOUT_EVENTS_KEEPALIVE_MS);
      }
      return new Response(readable, {
        headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no" },
      });
    });
  }

  /** The user lost access to every site of the rollout: their streams get a last comment and end. Answers how many. */
  async revokeSubscriber(userId: number): Promise<number> {
    let ended = 0;
    for (const stream of [...this.streams]) {
      if (stream.userId !== userId) continue;
      this.write(stream, ": access revoked\n\n");
      this.end(stream);
      ended++;
    }
    return ended;
  }

  /** Open progress streams (tests and status). */
  async streamCount(): Promise<number> {
    return this.streams.size;
  }

  // ---- state --------------------------------------------------------------------------------

  private meta(key: string): string | undefined {
    return this.sql.exec<{ value: string }>("SELECT value FROM rollout_meta WHERE key = ?", key).toArray()[0]?.value;
  }

  private setMeta(key: string, value: string | null) {
    if (value === null) this.sql.exec("DELETE FROM rollout_meta WHERE key = ?", key);
    else this.sql.exec("INSERT INTO rollout_meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value);
  }

  private plan(): RolloutPlan | undefined {
    const raw = this.meta("plan");
    return raw ? RolloutPlanSchema.parse(JSON.parse(raw)) : undefined;
  }

  private status(): RolloutStatus {
    return (this.meta("status") ?? "scheduled") as RolloutStatus;
  }

  private wave(): number {
    return Number(this.meta("wave") ?? 1);
  }

  private counts(where: string, ...args: (string | number)[]): TargetCounts {
    const rows = this.sql.exec<{ state: TargetState; n: number }>(`SELECT state, count(*) AS n FROM rollout_targets ${where} GROUP BY state`, ...args).toArray();
    const c: TargetCounts = { total: 0, pending: 0, running: 0, succeeded: 0, failed: 0, skipped: 0 };
    for (const { state, n } of rows) {
      c.total += n;
      if (state === "executing" || state === "recovering") c.running += n;
      else c[state] += n;
    }
    return c;
  }

  private progress(): RolloutProgress {
    const plan = this.plan()!;
    const status = this.status();
    const soakUntil = this.meta("soak_until");
    const peaks = new Map(this.sql.exec<{ site_id: string; max_in_flight: number }>("SELECT * FROM rollout_site_peaks").toArray().map((p) => [p.site_id, p.max_in_flight]));
    return {
      rollout_id: plan.rolloutId,
      status,
      current_wave: this.meta("started_ms") ? Math.min(this.wave(), plan.waveCount) : 0,
      wave_count: plan.waveCount,
      abort_reason: this.meta("abort_reason") ?? null,
      soak_until: soakUntil ? iso(Number(soakUntil)) : null,
      started_at: isoOrNull(this.meta("started_ms") ? Number(this.meta("started_ms")) : null),
      finished_at: isoOrNull(this.meta("finished_ms") ? Number(this.meta("finished_ms")) : null),
      counts: this.counts(""),
      waves: Array.from({ length: plan.waveCount }, (_, i) => ({ wave: i + 1, counts: this.counts("WHERE wave = ?", i + 1) })),
      sites: plan.sites.map((s) => ({ site_id: s.siteId, budget: s.budget, max_in_flight: peaks.get(s.siteId) ?? 0, counts: this.counts("WHERE site_id = ?", s.siteId) })),
    };
  }

  // ---- the tick -----------------------------------------------------------------------------

  private async tick() {
    const plan = this.plan();
    if (!plan) return;
    const now = this.now();
    const touched = new Set<string>();
    const before = this.status();
    await this.handOff(plan, now);
    await this.learn(plan, now, touched);
    if (before !== "completed" && before !== "aborted") {
      const reason = this.abortReason(plan);
      if (reason) await this.abortNow(plan, now, reason, null);
    }
    const status = this.status();
    if (status === "running" || status === "scheduled") {
      await this.advanceWaves(plan, now);
      if (this.status() === "running" || this.status() === "scheduled") await this.startWithinBudget(plan, now, touched);
    }
    if (this.status() === "aborted") await this.cancelOpenJobs(plan);
    // New batches (or a rollback after an abort) go to their hubs in the same tick.
    await this.handOff(plan, now);
    if (this.status() !== before) for (const s of plan.sites) touched.add(s.siteId);
    await this.publish(plan, touched);
    this.broadcast();
    await this.scheduleNext(now);
  }

  // ---- progress streams ---------------------------------------------------------------------

  /**
   * The progress now as a frame, numbered: the sequence moves on whenever the progress differs from
   * the one last numbered (and once after a restart, which forgot it), and is kept in storage so
   * that ids only grow.
   */
  private numberedProgress() {
    const progress = this.progress();
    const json = JSON.stringify(progress);
    let seq = Number(this.meta("event_seq") ?? 0);
    if (json !== this.lastNumbered) {
      seq++;
      this.setMeta("event_seq", String(seq));
      this.lastNumbered = json;
    }
    return { seq, status: progress.status, frame: `id: ${seq}\ndata: ${json}\n\n` };
  }

  /** After a tick: a changed progress goes to every open stream; a finished rollout ends them all. */
  private broadcast() {
    if (!this.streams.size) return;
    const before = this.lastNumbered;
    const { frame, status } = this.numberedProgress();
    if (this.lastNumbered !== before) for (const stream of this.streams) this.write(stream, frame);
    if (isFinished(status)) for (const stream of [...this.streams]) this.end(stream);
  }

  private write(stream: ProgressStream, text: string) {
    stream.writer.write(encoder.encode(text)).catch(() => this.forget(stream));
  }

  /** Closes the stream once what was written before has gone out. */
  private end(stream: ProgressStream) {
    this.forget(stream);
    stream.writer.close().catch(() => undefined);
  }

  private forget(stream: ProgressStream) {
    if (!this.streams.delete(stream)) return;
    if (!this.streams.size && this.keepalive !== undefined) {
      clearInterval(this.keepalive);
      this.keepalive = undefined;
    }
  }

  /** Learns from each hub where its devices stand; moves executing → recovering → succeeded, or failed. */
  private async learn(plan: RolloutPlan, now: number, touched: Set<string>) {
    const batches = this.sql.exec<{ job_id: string; site_id: string }>(
      "SELECT job_id, site_id FROM rollout_batches WHERE kind = 'rollout' AND handed = 1 AND open = 1").toArray();
    const bySite = new Map<string, string[]>();
    for (const b of batches) bySite.set(b.site_id, [...(bySite.get(b.site_id) ?? []), b.job_id]);
    const aborted = this.status() === "aborted";
    for (const [siteId, jobIds] of bySite) {
      let reports;
      try {
        reports = RolloutDeviceReportSchema.array().parse(await this.hub(siteId).rolloutReport(siteId, jobIds));
      } catch (error) {
        console.error(`rollout ${plan.rolloutId}: site ${siteId} could not report; asking again on the next alarm`, error);
        continue;
      }
      for (const r of reports) {
        const target = this.sql.exec<TargetRow>("SELECT * FROM rollout_targets WHERE device_id = ? AND job_id = ?", r.device_id, r.job_id).toArray()[0];
        if (!target) continue;
        let state = target.state;
        if (state === "executing") {
          if (isOpenCommandStatus(r.execution)) continue;
          if (r.execution === "completed") {
            this.sql.exec("UPDATE rollout_targets SET state = 'recovering', changed_ms = ? WHERE device_id = ?", now, r.device_id);
            state = "recovering";
            touched.add(siteId);
          } else if (r.execution === "skipped") {
            // The device's owner has not granted what the action needs: not a failure of the change.
            this.finishTarget(r.device_id, "skipped", r.error ?? "Skipped by its site", now);
            touched.add(siteId);
            continue;
          } else {
            const error = r.execution === "cancelled" ? "The execution was cancelled or timed out" : r.error ?? `Execution ${r.execution}`;
            this.finishTarget(r.device_id, "failed", error, now);
            touched.add(siteId);
            continue;
          }
        }
        if (state !== "recovering") continue;
        const changedMs = target.changed_ms ?? now;
        const overdue = now - changedMs >= plan.recoveryTimeoutS * 1000;
        if (r.condition === "healthy") this.finishTarget(r.device_id, "succeeded", null, now);
        else if (r.condition === "unhealthy") this.finishTarget(r.device_id, "failed", r.error ?? "Unhealthy after the change", now);
        else if (r.condition === "offline" && overdue) {
          if (plan.abort.offlineCountsAsFailure) this.finishTarget(r.device_id, "failed", "Offline after the change", now);
          else this.finishTarget(r.device_id, "succeeded", "Still offline after the change; released from the budget", now);
        } else if (overdue) this.finishTarget(r.device_id, "failed", `Not back online and healthy ${plan.recoveryTimeoutS} s after the change`, now);
        else continue;
        touched.add(siteId);
      }
      for (const jobId of jobIds) {
        const open = this.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM rollout_targets WHERE job_id = ? AND state IN ${IN_FLIGHT}`, jobId).one().n;
        // An aborted rollout's batch stays open until its cancellation reached the hub.
        if (open === 0 && (!aborted || this.batch(jobId)?.cancelled)) this.sql.exec("UPDATE rollout_batches SET open = 0 WHERE job_id = ?", jobId);
      }
    }
  }

  private batch(jobId: string): BatchRow | undefined {
    return this.sql.exec<BatchRow>("SELECT * FROM rollout_batches WHERE job_id = ?", jobId).toArray()[0];
  }

  private finishTarget(deviceId: string, state: "succeeded" | "failed" | "skipped", error: string | null, now: number) {
    this.sql.exec("UPDATE rollout_targets SET state = ?, error = ?, finished_ms = ? WHERE device_id = ?", state, error, now, deviceId);
  }

  /** Why the rollout must stop now, or undefined: the current wave's failure rate, or the failures so far. */
  private abortReason(plan: RolloutPlan): string | undefined {
    const wave = this.counts("WHERE wave = ?", this.wave());
    const executions = wave.succeeded + wave.failed;
    if (executions >= plan.abort.minExecutions && executions > 0 && wave.failed / executions > plan.abort.maxFailureRate) {
      return `Wave ${this.wave()}: ${wave.failed} of ${executions} executions failed (more than ${Math.round(plan.abort.maxFailureRate * 1000) / 10} %)`;
    }
    const failed = this.counts("").failed;
    if (plan.abort.maxFailures !== null && failed >= plan.abort.maxFailures) return `${failed} executions failed (the limit is ${plan.abort.maxFailures})`;
    return undefined;
  }

  /** A finished wave soaks; after its soak (or at once when promoted) the next one starts. The last one completes the rollout. */
  private async advanceWaves(plan: RolloutPlan, now: number) {
    for (;;) {
      const wave = this.wave();
      if (wave > plan.waveCount) break;
      const open = this.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM rollout_targets WHERE wave = ? AND state IN ${OPEN}`, wave).one().n;
      if (open > 0) return;
      if (wave >= plan.waveCount) break;
      const soakUntil = this.meta("soak_until") ? Number(this.meta("soak_until")) : now + plan.soakSeconds * 1000;
      if (!this.meta("soak_until")) this.setMeta("soak_until", String(soakUntil));
      if (now < soakUntil && !this.meta("promoted")) return;
      this.setMeta("wave", String(wave + 1));
      this.setMeta("soak_until", null);
      this.setMeta("promoted", null);
      await this.writeStatus(plan, now);
    }
    this.setMeta("status", "completed");
    this.setMeta("soak_until", null);
    this.setMeta("finished_ms", String(now));
    const counts = this.counts("");
    await this.record(plan, now, "rollout_completed", `Rollout ${plan.rolloutId} (${plan.name}) completed: ${counts.succeeded} succeeded, ${counts.failed} failed`, null, { counts });
  }

  /** Starts the current wave's pending devices of each site, as many as its budget has room for. */
  private async startWithinBudget(plan: RolloutPlan, now: number, touched: Set<string>) {
    if (this.meta("soak_until")) return;
    const wave = this.wave();
    let started = 0;
    for (const site of plan.sites) {
      if (plan.window && !inWindow(plan.window, site.timeZone, now)) continue;
      const inFlight = this.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM rollout_targets WHERE site_id = ? AND state IN ${IN_FLIGHT}`, site.siteId).one().n;
      const room = site.budget - inFlight;
      if (room <= 0) continue;
      const chosen = this.sql.exec<{ device_id: string }>(
        "SELECT device_id FROM rollout_targets WHERE site_id = ? AND wave = ? AND state = 'pending' ORDER BY device_id LIMIT ?", site.siteId, wave, room).toArray().map((r) => r.device_id);
      if (!chosen.length) continue;
      const jobId = newJobId();
      this.ctx.storage.transactionSync(() => {
        this.sql.exec("INSERT INTO rollout_batches (job_id, site_id, wave, kind, device_ids, created_ms) VALUES (?, ?, ?, 'rollout', ?, ?)", jobId, site.siteId, wave, JSON.stringify(chosen), now);
        for (const id of chosen) this.sql.exec("UPDATE rollout_targets SET state = 'executing', job_id = ?, started_ms = ? WHERE device_id = ?", jobId, now, id);
        this.sql.exec(
          "INSERT INTO rollout_site_peaks (site_id, max_in_flight) VALUES (?, ?) ON CONFLICT(site_id) DO UPDATE SET max_in_flight = max(max_in_flight, excluded.max_in_flight)",
          site.siteId, inFlight + chosen.length);
      });
      started += chosen.length;
      touched.add(site.siteId);
    }
    if (started && this.status() === "scheduled") {
      this.setMeta("status", "running");
      this.setMeta("started_ms", String(now));
      await this.record(plan, now, "rollout_started", `Rollout ${plan.rolloutId} (${plan.name}) started`, null);
    }
  }

  /** Creates each batch's job in D1 and hands it to its site's hub; repeated until both are done. */
  private async handOff(plan: RolloutPlan, now: number) {
    const aborted = this.status() === "aborted";
    const batches = this.sql.exec<BatchRow>("SELECT * FROM rollout_batches WHERE handed = 0 ORDER BY created_ms").toArray();
    for (const b of batches) {
      if (aborted && b.kind === "rollout") continue;
      const rollback = b.kind === "rollback" ? plan.rollback : null;
      const action = rollback ? rollback.action : plan.action;
      const payload = { ...((rollback ? rollback.payload : plan.payload) ?? {}), rollout_id: plan.rolloutId };
      const spec: JobSpec = {
        jobId: b.job_id, action, priority: "medium",
        description: rollback ? `Rollback of rollout ${plan.rolloutId} (${plan.name})` : `Rollout ${plan.rolloutId} (${plan.name}), wave ${b.wave}`,
        targetDeviceIds: JSON.parse(b.device_ids) as string[], deviceType: null,
        configUrl: rollback ? null : plan.configUrl, configVersion: rollback ? null : plan.configVersion,
        createdBy: plan.createdBy, createdAt: iso(b.created_ms), deadlineAt: iso(b.created_ms + plan.executionDeadlineS * 1000), payload,
      };
      try {
        const db = drizzle(this.env.DB, { schema });
        const inserted = await db.insert(schema.jobs).values({
          jobId: spec.jobId, siteId: b.site_id, action, description: spec.description, priority: "medium", status: "queued",
          configUrl: spec.configUrl, configVersion: spec.configVersion, targetDeviceIds: spec.targetDeviceIds, deadlineAt: spec.deadlineAt,
          createdBy: plan.createdBy, createdAt: spec.createdAt, updatedAt: iso(now), rolloutId: plan.rolloutId, payload,
        }).onConflictDoNothing().returning({ jobId: schema.jobs.jobId });
        if (inserted.length) {
          await db.insert(schema.auditLogs).values(auditRow({
            eventType: "job_created", userId: plan.createdByUserId, siteId: b.site_id, jobId: b.job_id,
            description: `Job ${b.job_id} (${action}) created by rollout ${plan.rolloutId} for ${spec.targetDeviceIds!.length} device(s) of site ${b.site_id}`,
            metadata: { action, rollout_id: plan.rolloutId, wave: b.wave, kind: b.kind },
          }));
        }
        await this.hub(b.site_id).scheduleJob(b.site_id, spec);
        this.sql.exec("UPDATE rollout_batches SET handed = 1 WHERE job_id = ?", b.job_id);
      } catch (error) {
        console.error(`rollout ${plan.rolloutId}: hand-off of job ${b.job_id} failed; retrying on the next alarm`, error);
      }
    }
  }

  /** Stops everything: nothing starts again, queued executions are cancelled, and the rollback is queued for changed devices. */
  private async abortNow(plan: RolloutPlan, now: number, reason: string, actor: Actor) {
    this.ctx.storage.transactionSync(() => {
      this.setMeta("status", "aborted");
      this.setMeta("abort_reason", reason);
      this.setMeta("finished_ms", String(now));
      this.setMeta("soak_until", null);
      this.sql.exec("UPDATE rollout_targets SET state = 'skipped', finished_ms = ?, error = 'The rollout was aborted' WHERE state IN ('pending', 'executing')", now);
      if (plan.rollback) {
        const changed = this.sql.exec<{ site_id: string; device_id: string }>(
          "SELECT site_id, device_id FROM rollout_targets WHERE changed_ms IS NOT NULL ORDER BY site_id, device_id").toArray();
        const bySite = new Map<string, string[]>();
        for (const c of changed) bySite.set(c.site_id, [...(bySite.get(c.site_id) ?? []), c.device_id]);
        for (const [siteId, ids] of bySite) {
          this.sql.exec("INSERT INTO rollout_batches (job_id, site_id, wave, kind, device_ids, created_ms, open) VALUES (?, ?, 0, 'rollback', ?, ?, 0)", newJobId(), siteId, JSON.stringify(ids), now);
        }
      }
    });
    await this.record(plan, now, "rollout_aborted", `Rollout ${plan.rolloutId} (${plan.name}) aborted: ${reason}`, actor, { reason, counts: this.counts("") });
  }

  /** After an abort: each rollout job still open is cancelled in its hub (which cancels its queued commands). */
  private async cancelOpenJobs(plan: RolloutPlan) {
    const batches = this.sql.exec<BatchRow>("SELECT * FROM rollout_batches WHERE kind = 'rollout' AND cancelled = 0").toArray();
    for (const b of batches) {
      try {
        // A job already finished (409) or never created (404) needs nothing more.
        await this.hub(b.site_id).cancelJob(b.site_id, b.job_id, { userId: null, name: `rollout ${plan.rolloutId}` });
        this.sql.exec("UPDATE rollout_batches SET cancelled = 1, handed = 1 WHERE job_id = ?", b.job_id);
      } catch (error) {
        console.error(`rollout ${plan.rolloutId}: cancelling job ${b.job_id} failed; retrying on the next alarm`, error);
      }
    }
  }

  private async scheduleNext(now: number) {
    const status = this.status();
    const inFlight = this.sql.exec<{ n: number }>(`SELECT count(*) AS n FROM rollout_targets WHERE state IN ${IN_FLIGHT}`).one().n;
    const unhanded = this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM rollout_batches WHERE handed = 0").one().n;
    const uncancelled = status === "aborted"
      ? this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM rollout_batches WHERE kind = 'rollout' AND cancelled = 0").one().n : 0;
    const wakes: number[] = [];
    if (inFlight + unhanded + uncancelled > 0) wakes.push(now + ROLLOUT_POLL_MS);
    if (status === "running" || status === "scheduled") {
      const soak = this.meta("soak_until");
      if (soak) wakes.push(Number(soak));
      else if (this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM rollout_targets WHERE state = 'pending'").one().n > 0) wakes.push(now + WINDOW_RECHECK_MS);
    }
    if (!wakes.length) {
      await this.ctx.storage.deleteAlarm();
      return;
    }
    await this.ctx.storage.setAlarm(Math.max(Math.min(...wakes), now + 250));
  }

  // ---- the world outside ----------------------------------------------------------------------

  private hub(siteId: string) {
    return this.env.SITE_HUB.get(this.env.SITE_HUB.idFromName(siteId));
  }

  /** The rollout's row in D1 follows its status and wave. */
  private async writeStatus(plan: RolloutPlan, now: number) {
    const db = drizzle(this.env.DB, { schema });
    await db.update(schema.rollouts).set({
      status: this.status(), currentWave: this.meta("started_ms") ? Math.min(this.wave(), plan.waveCount) : 0,
      abortReason: this.meta("abort_reason") ?? null, finishedAt: isoOrNull(this.meta("finished_ms") ? Number(this.meta("finished_ms")) : null), updatedAt: iso(now),
    }).where(eq(schema.rollouts.rolloutId, plan.rolloutId));
  }

  /** An audit event of the rollout (on each of its sites' trails) and the D1 row brought up to date. */
  private async record(plan: RolloutPlan, now: number, eventType: string, description: string, actor: Actor, metadata: Record<string, unknown> = {}) {
    await this.writeStatus(plan, now);
    const db = drizzle(this.env.DB, { schema });
    const rows = plan.sites.map((s) => auditRow({
      eventType, description, userId: actor?.userId ?? null, siteId: s.siteId, at: iso(now),
      metadata: { rollout_id: plan.rolloutId, status: this.status(), wave: this.wave(), ...metadata },
    }));
    // D1 binds at most 100 parameters per statement: a few rows per insert.
    for (let i = 0; i < rows.length; i += 6) await db.insert(schema.auditLogs).values(rows.slice(i, i + 6));
  }

  /** `rollout.progress` on the live channel of each site whose figures moved. */
  private async publish(plan: RolloutPlan, sites: Set<string>) {
    if (!sites.size) return;
    const progress = this.progress();
    for (const siteId of sites) {
      const site = progress.sites.find((s) => s.site_id === siteId);
      try {
        await this.hub(siteId).publish(siteId, "rollout.progress", {
          rollout_id: plan.rolloutId, name: plan.name, status: progress.status, current_wave: progress.current_wave,
          wave_count: progress.wave_count, counts: progress.counts, site: site ?? null,
        });
      } catch (error) {
        console.error(`rollout ${plan.rolloutId}: progress to site ${siteId} not published`, error);
      }
    }
  }
}
