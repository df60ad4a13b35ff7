import { DurableObject } from "cloudflare:workers";
import { drizzle } from "drizzle-orm/d1";
import { and, asc, desc, eq, gt, isNotNull, isNull, lt, lte, max, type SQL } from "drizzle-orm";
import * as schema from "../src/db/schema";
import type { HubBindings } from "../src/shared/config";
import { GENESIS_HASH, canonicalAuditEvent, chainHash, chainOf } from "../src/shared/audit-chain";
import { chainedFieldsOf, toAuditEventView, type AuditRow } from "../src/shared/audit-view";
import { AlertEvaluator } from "./audit-alerts";
import { emailAvailable, outboundPolicy, retryBaseMs } from "../src/shared/audit-settings";
import {
  AUDIT_STREAM_KEEPALIVE_MS, AuditStreamFilterSchema, matchesFilter, type AuditStreamFilter, type NudgeReply, type WatchedSites,
} from "../src/shared/audit-stream-contract";

const { auditLogs } = schema;

/** Rows read from D1 per tail step, and steps per nudge (the alarm continues a longer backlog). */
const TAIL_BATCH = 200;
const TAIL_STEPS = 25;
/** A failed tail is retried by the alarm after this long. */
const RETRY_MS = 5_000;
/** Published events kept in memory for resuming subscribers; older ones are replayed from D1. */
const RING_SIZE = 2_000;
/** A resume replays at most this many events, then ends the stream; the client reconnects from the last id. */
const REPLAY_MAX = 5_000;
/** A subscriber this many frames behind is dropped (it reconnects with Last-Event-ID). */
const MAX_BACKLOG = 1_000;

interface Published {
  id: number;
  category: string;
  severity: string;
  event_type: string;
  site_id: string | null;
  frame: string;
}

interface Subscription {
  filter: AuditStreamFilter;
  writer: WritableStreamDefaultWriter<Uint8Array>;
  backlog: number;
}

const encoder = new TextEncoder();

function publishedOf(row: AuditRow): Published {
  const view = toAuditEventView(row);
  return {
    id: row.id, category: row.category, severity: row.severity, event_type: row.eventType, site_id: row.siteId,
    frame: `id: ${row.id}\ndata: ${JSON.stringify(view)}\n\n`,
  };
}

/**
 * The service-wide audit fan-out point (one instance, named AUDIT_STREAM_NAME). It tails
 * `audit_logs` by id: D1 commits in id order, so reading `id > cursor` in order never skips a row
 * that a later read would find. Every audit write nudges it (the Worker after a request that wrote
 * audit rows, a hub after its outbox flushed some, the minute cron as a safety net), and a failed
 * tail is retried by the alarm, so a lost nudge delays a publication and never drops one.
 *
 * As it tails, it is the single sealer of the hash chains (src/shared/audit-chain.ts): each row is
 * linked to the previous row of its chain in id order, so chains cannot fork whoever inserted the
 * rows. Then the row goes to the ring and to every matching subscriber. docs/audit.md has the
 * whole picture.
 */
export class AuditStream extends DurableObject<HubBindings> {
  /** Every row with an id up to this is sealed and published; undefined until read from D1. */
  private cursor: number | undefined;
  /** The hash of each chain's last sealed row (a cache: D1 holds the truth). */
  private heads = new Map<string, string>();
  private ring: Published[] = [];
  /** The ring holds every published row with an id above this. */
  private ringFloor = 0;
  private busy: Promise<unknown> | undefined;
  private nextTail: Promise<void> | undefined;
  private subscriptions = new Set<Subscription>();
  private keepalive: ReturnType<typeof setInterval> | undefined;
  private readonly alerts: AlertEvaluator;

  constructor(ctx: DurableObjectState, env: HubBindings) {
    super(ctx, env);
    this.alerts = new AlertEvaluator(ctx.storage.sql, () => this.env.DB, () => Date.now());
  }

  private db() {
    return drizzle(this.env.DB, { schema });
  }

  /** Seals and publishes every row inserted so far. */
  async nudge(): Promise<NudgeReply> {
    await this.tail();
    return { sealed_through: this.cursor ?? 0 };
  }

  async alarm() {
    await this.tail();
    await this.alerts.deliverDue({
      policy: outboundPolicy(this.env),
      retryBaseMs: retryBaseMs(this.env),
      rootSecret: this.env.JWT_SECRET ?? "",
      email: emailAvailable(this.env) ? this.env.ALERT_EMAIL : undefined,
      emailFrom: this.env.ALERT_EMAIL_FROM,
    });
    const due = this.alerts.nextDue();
    if (due !== undefined) await this.wakeAt(due);
  }

  /** The Worker changed alert rules in D1. */
  async alertRulesChanged(): Promise<void> {
    await this.alerts.rulesChanged();
  }

  /** Sets the alarm to `at` unless it is already set earlier. */
  private async wakeAt(at: number) {
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > at) await this.ctx.storage.setAlarm(at);
  }

  /** Open audit streams (for status reports). */
  async subscriberCount(): Promise<number> {
    return this.subscriptions.size;
  }

  /** What the user's open subscriptions watch, for the Worker to check against their access now. */
  async watchedSites(userId: number): Promise<WatchedSites> {
    const mine = [...this.subscriptions].filter((s) => s.filter.user_id === userId);
    return {
      unscoped: mine.some((s) => s.filter.site_id === undefined),
      site_ids: [...new Set(mine.flatMap((s) => (s.filter.site_id === undefined ? [] : [s.filter.site_id])))],
    };
  }

  /**
   * Ends the user's subscriptions that their access no longer allows: every one naming no site
   * unless `allowed.unscoped` (still an administrator), and every one naming a site not in
   * `allowed.site_ids`. Each gets a last comment saying why. Answers how many were ended.
   */
  async revokeSubscriber(userId: number, allowed: WatchedSites): Promise<number> {
    let ended = 0;
    for (const subscription of [...this.subscriptions]) {
      if (subscription.filter.user_id !== userId) continue;
      const site = subscription.filter.site_id;
      const stillAllowed = site === undefined ? allowed.unscoped : allowed.unscoped || allowed.site_ids.includes(site);
      if (stillAllowed) continue;
      this.forget(subscription);
      const { writer } = subscription;
      void writer.write(encoder.encode(": access revoked\n\n")).catch(() => undefined).finally(() => writer.close().catch(() => undefined));
      ended++;
    }
    return ended;
  }

  /** Runs `work` alone: tails and replays never interleave, so a resuming subscriber misses nothing. */
  private async exclusive<T>(work: () => Promise<T>): Promise<T> {
    while (this.busy) await this.busy.catch(() => undefined);
    const running = work();
    this.busy = running;
    try {
      return await running;
    } finally {
      this.busy = undefined;
    }
  }

  /**
   * A tail that starts after this call. Nudges that arrive while one tail runs share the one tail
   * queued behind it, so a burst of writes costs two tails, not one per nudge.
   */
  private tail(): Promise<void> {
    this.nextTail ??= (async () => {
      // Yield first, so that `nextTail` holds this promise before the code below can clear it.
      await undefined;
      while (this.busy) await this.busy.catch(() => undefined);
      // From here on, a new caller needs a tail of its own: this one may read before its rows land.
      this.nextTail = undefined;
      try {
        await this.exclusive(() => this.tailSteps());
      } catch (error) {
        console.error("audit stream tail failed; the alarm retries", error);
        await this.wakeAt(Date.now() + RETRY_MS);
      }
    })();
    return this.nextTail;
  }

  private async tailSteps() {
    const db = this.db();
    if (this.cursor === undefined) {
      const sealed = await db.select({ id: max(auditLogs.id) }).from(auditLogs).where(isNotNull(auditLogs.hash)).get();
      this.cursor = sealed?.id ?? 0;
      this.ringFloor = this.cursor;
    }
    for (let step = 0; step < TAIL_STEPS; step++) {
      const rows = await db.select().from(auditLogs).where(gt(auditLogs.id, this.cursor)).orderBy(asc(auditLogs.id)).limit(TAIL_BATCH).all();
      if (!rows.length) return;
      await this.seal(rows);
      this.cursor = rows[rows.length - 1].id;
      for (const row of rows) this.publish(publishedOf(row));
      await this.evaluateAlerts(rows);
      if (rows.length < TAIL_BATCH) return;
    }
    await this.wakeAt(Date.now());
  }

  /**
   * Alert rules and integrations see every published row; what they send is queued for the alarm
   * (tries, retries and the delivery log: durable-objects/audit-alerts.ts).
   */
  private async evaluateAlerts(rows: AuditRow[]) {
    try {
      const views = rows.map(toAuditEventView);
      const queued = (await this.alerts.observe(views)) + (await this.alerts.forward(views));
      if (queued) await this.wakeAt(Date.now());
    } catch (error) {
      console.error("alert evaluation failed for a batch of audit events", error);
    }
  }

  /** Links each unsealed row to its chain's head and writes the links; heads advance only once D1 has them. */
  private async seal(rows: AuditRow[]) {
    const heads = new Map(this.heads);
    const links: { id: number; p: string; h: string }[] = [];
    for (const row of rows) {
      const chain = chainOf(row.siteId);
      if (row.hash) {
        heads.set(chain, row.hash);
        continue;
      }
      const prev = heads.get(chain) ?? await this.headBefore(row.siteId, row.id);
      const hash = await chainHash(prev, canonicalAuditEvent(chainedFieldsOf(row)));
      heads.set(chain, hash);
      links.push({ id: row.id, p: prev, h: hash });
      row.prevHash = prev;
      row.hash = hash;
    }
    if (links.length) {
      const field = (name: string) => `(SELECT json_extract(value, '$.${name}') FROM json_each(?1) WHERE json_extract(value, '$.id') = audit_logs.id)`;
      await this.env.DB.prepare(
        `UPDATE audit_logs SET prev_hash = ${field("p")}, hash = ${field("h")}
         WHERE id IN (SELECT json_extract(value, '$.id') FROM json_each(?1)) AND hash IS NULL`,
      ).bind(JSON.stringify(links)).run();
    }
    this.heads = heads;
  }

  /** The hash of the chain's last sealed row before `id`, or the genesis hash. */
  private async headBefore(siteId: string | null, id: number): Promise<string> {
    const row = await this.db().select({ hash: auditLogs.hash }).from(auditLogs)
      .where(and(siteId === null ? isNull(auditLogs.siteId) : eq(auditLogs.siteId, siteId), lt(auditLogs.id, id), isNotNull(auditLogs.hash)))
      .orderBy(desc(auditLogs.id)).limit(1).get();
    return row?.hash ?? GENESIS_HASH;
  }

  private publish(event: Published) {
    this.ring.push(event);
    if (this.ring.length > RING_SIZE) this.ringFloor = this.ring.shift()!.id;
    for (const subscription of this.subscriptions) {
      if (matchesFilter(subscription.filter, event)) this.write(subscription, event.frame);
    }
  }

  /** A subscription (already authorised by the Worker), or a nudge from a site hub. */
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/nudge" && request.method === "POST") return Response.json(await this.nudge());
    const parsed = AuditStreamFilterSchema.safeParse(Object.fromEntries(url.searchParams));
    if (url.pathname !== "/subscribe" || !parsed.success) return new Response("Not found", { status: 404 });
    const filter = parsed.data;
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
    const subscription: Subscription = { filter, writer: writable.getWriter(), backlog: 0 };
    this.write(subscription, "retry: 3000\n\n");
    await this.exclusive(async () => {
      if (this.cursor === undefined) await this.tailSteps();
      const complete = await this.replay(subscription, filter.since);
      if (!complete) {
        void subscription.writer.close().catch(() => undefined);
        return;
      }
      this.subscriptions.add(subscription);
      subscription.writer.closed.catch(() => undefined).finally(() => this.forget(subscription));
      this.keepalive ??= setInterval(() => {
        for (const s of this.subscriptions) this.write(s, ": keep-alive\n\n");
      }, AUDIT_STREAM_KEEPALIVE_MS);
    });
    return new Response(readable, {
      headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no" },
    });
  }

  /**
   * Sends what the subscriber missed after `since` up to the cursor: from the ring when it reaches
   * back that far, else from D1. False when the replay stopped at REPLAY_MAX (the stream then ends
   * and the client resumes from the last id it got).
   */
  private async replay(subscription: Subscription, since: number | undefined): Promise<boolean> {
    const cursor = this.cursor ?? 0;
    if (since === undefined || since >= cursor) return true;
    const { filter } = subscription;
    if (since >= this.ringFloor) {
      for (const event of this.ring) if (event.id > since && matchesFilter(filter, event)) this.write(subscription, event.frame);
      return true;
    }
    const conditions: (SQL | undefined)[] = [
      lte(auditLogs.id, cursor),
      filter.category ? eq(auditLogs.category, filter.category) : undefined,
      filter.severity ? eq(auditLogs.severity, filter.severity) : undefined,
      filter.event_type ? eq(auditLogs.eventType, filter.event_type) : undefined,
      filter.site_id ? eq(auditLogs.siteId, filter.site_id) : undefined,
    ];
    let after = since;
    let sent = 0;
    while (sent < REPLAY_MAX) {
      const rows = await this.db().select().from(auditLogs).where(and(gt(auditLogs.id, after), ...conditions))
        .orderBy(asc(auditLogs.id)).limit(Math.min(TAIL_BATCH, REPLAY_MAX - sent)).all();
      for (const row of rows) this.write(subscription, publishedOf(row).frame);
      sent += rows.length;
      if (rows.length === 0 || rows.length < TAIL_BATCH) return true;
      after = rows[rows.length - 1].id;
    }
    return false;
  }

  private write(subscription: Subscription, text: string) {
    if (subscription.backlog > MAX_BACKLOG) {
      this.forget(subscription);
      subscription.writer.abort("too far behind").catch(() => undefined);
      return;
    }
    subscription.backlog++;
    subscription.writer.write(encoder.encode(text)).then(
      () => { subscription.backlog--; },
      () => this.forget(subscription),
    );
  }

  private forget(subscription: Subscription) {
    if (!this.subscriptions.delete(subscription)) return;
    if (!this.subscriptions.size && this.keepalive !== undefined) {
      clearInterval(this.keepalive);
      this.keepalive = undefined;
    }
  }
}
