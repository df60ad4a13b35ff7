import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env";
import { LIVE_SCHEMA, LiveRing, type LiveEvent } from "./live";

/**
 * One per site (named by site_id): everything live about the site — presence, metrics delta state,
 * command queue, job fan-out, simulated agents — in its own SQLite, plus the fan-out of changes to
 * dashboards. The Worker talks to it over RPC; `fetch` is only for WebSocket upgrades.
 */
export class SiteHub extends DurableObject<Env> {
  protected readonly sql: SqlStorage;
  protected readonly live: LiveRing;
  private siteIdValue: string | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(LIVE_SCHEMA);
    this.sql.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    this.siteIdValue = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'site_id'").toArray()[0]?.value;
    this.live = new LiveRing(this.sql, () => this.siteIdValue ?? "");
  }

  /** Every RPC names its site; the first one is remembered so alarms know where they are. */
  protected bind(siteId: string) {
    if (this.siteIdValue === siteId) return;
    this.siteIdValue = siteId;
    this.sql.exec("INSERT INTO meta (key, value) VALUES ('site_id', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", siteId);
  }

  get siteId(): string {
    return this.siteIdValue ?? "";
  }

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
}
