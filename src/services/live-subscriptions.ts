import { and, eq, gt } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { wsTickets } from "../db/schema";
import { notFound, unauthorized } from "../lib/errors";
import { randomToken, sha256Hex } from "../shared/ids";
import { siteHub } from "../hub/client";
import { findSite, siteNotFound, type Role } from "./access";
import { findActiveUserById } from "./users";
import { currentDate, workerClock } from "../lib/clock";

export const WS_TICKET_TTL_MS = 60_000;

/**
 * A one-use ticket for a browser WebSocket (browsers cannot set an Authorization header on one):
 * valid 60 s, for this site and user only. Only its SHA-256 is stored; that digest is also the
 * ticket's id, by which its user can revoke it (and the subscription it opened).
 */
export async function createWsTicket(db: Db, user: AuthUser, siteId: string, now = workerClock.now()) {
  const ticket = `wst_${randomToken(32)}`;
  const ticketId = await sha256Hex(ticket);
  const expiresAt = new Date(now + WS_TICKET_TTL_MS).toISOString();
  await db.insert(wsTickets).values({ ticketHash: ticketId, siteId, userId: user.id, expiresAt });
  return { ticket, ticket_id: ticketId, expires_at: expiresAt };
}

export const wsTicketId = (ticket: string) => sha256Hex(ticket);

/** Consumes a ticket in one statement (a second use finds nothing); answers its user. */
export async function consumeWsTicket(db: Db, ticket: string, siteId: string, now = workerClock.now()): Promise<AuthUser> {
  const invalid = () => unauthorized("Invalid, used or expired ticket");
  if (ticket.length > 256) throw invalid();
  const [row] = await db.delete(wsTickets)
    .where(and(eq(wsTickets.ticketHash, await wsTicketId(ticket)), eq(wsTickets.siteId, siteId), gt(wsTickets.expiresAt, new Date(now).toISOString())))
    .returning().all();
  if (!row) throw invalid();
  const user = await findActiveUserById(db, row.userId);
  if (!user) throw invalid();
  return user;
}

/**
 * Hands an authorised subscription to the site's hub: `ws` (the request must carry the WebSocket
 * upgrade) or `events` (server-sent events). The hub replays from `since` and then streams; it
 * keeps the role the caller was authorised with, and the ticket that opened it, if one did.
 */
export async function subscribe(
  env: Env,
  siteId: string,
  subscriber: { user: AuthUser; role: Role; ticketId?: string },
  channel: "ws" | "events",
  since: number | undefined,
  upgrade?: string,
) {
  const { user, role, ticketId } = subscriber;
  return siteHub(env, siteId).subscribe(channel, {
    user_id: user.id,
    connected_at: currentDate().toISOString(),
    role,
    ...(ticketId ? { ticket_id: ticketId } : {}),
  }, since, upgrade);
}

/** The channel's current position, for a GET on the WebSocket path without an upgrade. */
export async function channelState(env: Env, siteId: string) {
  const hub = siteHub(env, siteId);
  const [latest, subscribers] = await Promise.all([hub.channelHead(), hub.subscribers()]);
  return { site_id: siteId, ...latest, subscribers: subscribers.websockets + subscribers.sse };
}

/**
 * Revokes one of the caller's tickets: unused, it can no longer be redeemed; used, the subscription
 * it opened is closed. Unknown to both (or another user's) → 404.
 */
export async function revokeWsTicket(db: Db, env: Env, user: AuthUser, siteId: string, ticketId: string) {
  if (!(await findSite(db, siteId))) throw siteNotFound(siteId);
  const unused = await db.delete(wsTickets)
    .where(and(eq(wsTickets.ticketHash, ticketId), eq(wsTickets.siteId, siteId), eq(wsTickets.userId, user.id)))
    .returning({ ticketHash: wsTickets.ticketHash }).all();
  const { closed } = await siteHub(env, siteId).revokeSubscriber({ user_id: user.id, role: null, ticket_id: ticketId });
  if (!unused.length && !closed) throw notFound("Ticket not found");
  return { ticket_id: ticketId, revoked_unused: unused.length > 0, closed_subscriptions: closed };
}
