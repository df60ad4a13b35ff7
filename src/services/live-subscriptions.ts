import { and, eq, gt } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { wsTickets } from "../db/schema";
import { unauthorized } from "../lib/errors";
import { randomToken, sha256Hex } from "../shared/ids";
import { siteHub } from "../hub/client";
import { findActiveUserById } from "./users";

export const WS_TICKET_TTL_MS = 60_000;

/**
 * A one-use ticket for a browser WebSocket (browsers cannot set an Authorization header on one):
 * valid 60 s, for this site and user only. Only its SHA-256 is stored.
 */
export async function createWsTicket(db: Db, user: AuthUser, siteId: string, now = Date.now()) {
  const ticket = `wst_${randomToken(32)}`;
  const expiresAt = new Date(now + WS_TICKET_TTL_MS).toISOString();
  await db.insert(wsTickets).values({ ticketHash: await sha256Hex(ticket), siteId, userId: user.id, expiresAt });
  return { ticket, expires_at: expiresAt };
}

/** Consumes a ticket in one statement (a second use finds nothing); answers its user. */
export async function consumeWsTicket(db: Db, ticket: string, siteId: string, now = Date.now()): Promise<AuthUser> {
  const invalid = () => unauthorized("Invalid, used or expired ticket");
  if (ticket.length > 256) throw invalid();
  const [row] = await db.delete(wsTickets)
    .where(and(eq(wsTickets.ticketHash, await sha256Hex(ticket)), eq(wsTickets.siteId, siteId), gt(wsTickets.expiresAt, new Date(now).toISOString())))
    .returning().all();
  if (!row) throw invalid();
  const user = await findActiveUserById(db, row.userId);
  if (!user) throw invalid();
  return user;
}

/**
 * Hands an authorised subscription to the site's hub: `ws` (the request must carry the WebSocket
 * upgrade) or `events` (server-sent events). The hub replays from `since` and then streams.
 */
export async function subscribe(env: Env, siteId: string, user: AuthUser, channel: "ws" | "events", since: number | undefined, upgrade?: string) {
  return siteHub(env, siteId).subscribe(channel, { user_id: user.id, connected_at: new Date().toISOString() }, since, upgrade);
}

/** The channel's current position, for a GET on the WebSocket path without an upgrade. */
export async function channelState(env: Env, siteId: string) {
  const hub = siteHub(env, siteId);
  const [latest, subscribers] = await Promise.all([hub.channelHead(), hub.subscribers()]);
  return { site_id: siteId, ...latest, subscribers: subscribers.websockets + subscribers.sse };
}
