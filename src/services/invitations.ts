import { and, desc, eq, gt, sql } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import type { AuthUser, Db } from "../env";
import { auditLogs, invitations, siteMemberships, tenantMemberships } from "../db/schema";
import { notFound } from "../lib/errors";
import { auditRow } from "../shared/audit-row";
import { newUuid } from "../shared/ids";
import { ROLES, type Role } from "../shared/vocabulary";
import { recordAudit } from "./audit";
import { workerClock } from "../lib/clock";
import { forgetCachedSiteAccess } from "./site-access-cache";

/**
 * Membership by e-mail is an invitation, never a lookup: asking whether an address has an account
 * would let anyone who can own a site (anyone who signs up) enumerate every account. The invitation
 * is stored whatever the address, answered the same way, and applied when an account with that
 * address signs up or logs in. docs/security.md ("Membership and invitations") has the rules.
 */

export type InvitationScope = "site" | "tenant";

/** How long an invitation waits to be applied: the service does not verify e-mail addresses, so it should not wait forever. */
export const INVITATION_TTL_MS = 7 * 86_400_000;

type InvitationRow = typeof invitations.$inferSelect;

export const toInvitation = (row: InvitationRow) => ({
  invitation_id: row.invitationId,
  email: row.email,
  role: row.role,
  invited_by: row.invitedBy,
  created_at: row.createdAt,
  expires_at: row.expiresAt,
});

const iso = (ms: number) => new Date(ms).toISOString();

/** Invites `email` to `role` on the site or tenant; inviting the same address again replaces the role and restarts the wait. */
export async function invite(
  db: Db,
  input: { scope: InvitationScope; targetId: string; email: string; role: Role; invitedBy: AuthUser },
  request?: Request,
  now = workerClock.now(),
) {
  const { scope, targetId, role, invitedBy } = input;
  const email = input.email.toLowerCase();
  const row = await db.insert(invitations)
    .values({ invitationId: newUuid(), scope, targetId, email, role, invitedBy: invitedBy.id, createdAt: iso(now), expiresAt: iso(now + INVITATION_TTL_MS) })
    .onConflictDoUpdate({
      target: [invitations.scope, invitations.targetId, invitations.email],
      set: { role, invitedBy: invitedBy.id, createdAt: iso(now), expiresAt: iso(now + INVITATION_TTL_MS) },
    })
    .returning().get();
  if (!row) throw new Error("the invitation upsert returned no row");
  // The address stays out of the trail: site members who are not owners read the site's events.
  await recordAudit(db, {
    eventType: `${scope}_member_invited`,
    description: `Invitation ${row.invitationId} to ${role} on ${scope} ${targetId}`,
    userId: invitedBy.id,
    siteId: scope === "site" ? targetId : null,
    metadata: { invitation_id: row.invitationId, role, ...(scope === "tenant" ? { tenant_id: targetId } : {}) },
    request,
  });
  return row;
}

/** Invitations still waiting, newest first. */
export const pendingInvitations = (db: Db, scope: InvitationScope, targetId: string, now = workerClock.now()) =>
  db.select().from(invitations)
    .where(and(eq(invitations.scope, scope), eq(invitations.targetId, targetId), gt(invitations.expiresAt, iso(now))))
    .orderBy(desc(invitations.createdAt))
    .all();

export async function revokeInvitation(db: Db, scope: InvitationScope, targetId: string, invitationId: string, by: AuthUser, request?: Request) {
  const [row] = await db.delete(invitations)
    .where(and(eq(invitations.scope, scope), eq(invitations.targetId, targetId), eq(invitations.invitationId, invitationId)))
    .returning().all();
  if (!row) throw notFound("Invitation not found");
  await recordAudit(db, {
    eventType: `${scope}_invitation_revoked`,
    description: `Invitation ${invitationId} to ${row.role} on ${scope} ${targetId} revoked`,
    userId: by.id,
    siteId: scope === "site" ? targetId : null,
    metadata: { invitation_id: invitationId, role: row.role, ...(scope === "tenant" ? { tenant_id: targetId } : {}) },
    request,
  });
  return row;
}

const roleRank = (column: typeof siteMemberships.role | typeof tenantMemberships.role) =>
  sql`(CASE ${column} WHEN 'owner' THEN 2 WHEN 'operator' THEN 1 ELSE 0 END)`;

/**
 * Applies the invitations waiting for this user's address (compared in lower case) and deletes
 * them, with expired ones. An invitation grants at least its role: it never lowers a role the user
 * already has (an owner changes an existing member's role by user id), so applying it can neither
 * take access away nor strip a site of its last owner. Runs at signup and at every login.
 */
export async function acceptInvitations(db: Db, user: Pick<AuthUser, "id" | "email">, request?: Request, now = workerClock.now()) {
  const email = user.email.toLowerCase();
  const waiting = await db.select().from(invitations).where(eq(invitations.email, email)).all();
  if (!waiting.length) return [];
  const live = waiting.filter((inv) => inv.expiresAt > iso(now));
  const statements: BatchItem<"sqlite">[] = [];
  for (const inv of live) {
    const rank = ROLES.indexOf(inv.role);
    statements.push(inv.scope === "site"
      ? db.insert(siteMemberships).values({ siteId: inv.targetId, userId: user.id, role: inv.role })
        .onConflictDoUpdate({ target: [siteMemberships.siteId, siteMemberships.userId], set: { role: inv.role }, setWhere: sql`${rank} > ${roleRank(siteMemberships.role)}` })
      : db.insert(tenantMemberships).values({ tenantId: inv.targetId, userId: user.id, role: inv.role })
        .onConflictDoUpdate({ target: [tenantMemberships.tenantId, tenantMemberships.userId], set: { role: inv.role }, setWhere: sql`${rank} > ${roleRank(tenantMemberships.role)}` }));
    statements.push(db.insert(auditLogs).values(auditRow({
      eventType: `${inv.scope}_member_added`,
      description: `User ${user.id} joined ${inv.scope} ${inv.targetId} as ${inv.role} by invitation ${inv.invitationId}`,
      userId: inv.invitedBy,
      siteId: inv.scope === "site" ? inv.targetId : null,
      metadata: { member_user_id: user.id, role: inv.role, invitation_id: inv.invitationId, ...(inv.scope === "tenant" ? { tenant_id: inv.targetId } : {}) },
      request,
    })));
  }
  // By id, so an invitation made meanwhile waits for the next login instead of vanishing unapplied.
  const ids = JSON.stringify(waiting.map((inv) => inv.invitationId));
  statements.push(db.delete(invitations).where(sql`${invitations.invitationId} IN (SELECT value FROM json_each(${ids}))`));
  await db.batch(statements as [BatchItem<"sqlite">, ...BatchItem<"sqlite">[]]);
  forgetCachedSiteAccess();
  return live;
}
