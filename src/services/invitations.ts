import { and, desc, eq, gt, sql } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import type { AuthUser, Db } from "../env";
import { auditLogs, invitations, siteMemberships, tenantMemberships } from "../db/schema";
import { forbidden, notFound } from "../lib/errors";
import { auditRow } from "../shared/audit-row";
import { newUuid, randomToken, sha256Hex } from "../shared/ids";
import { ROLES, type Role } from "../shared/vocabulary";
import { recordAudit } from "./audit";
import { workerClock } from "../lib/clock";
import { forgetCachedSiteAccess } from "./site-access-cache";

/**
 * Membership by e-mail is an invitation, never a lookup: asking whether an address has an account
 * would let anyone who can own a site (anyone who signs up) enumerate every account. The invitation
 * is stored whatever the address and answered the same way. The service does not verify the
 * addresses of password accounts, so an address alone collects nothing: the inviter is handed a
 * one-time code to pass on, and the invitee accepts with it from an account with that address. Only
 * an address an identity provider vouches for collects its invitations at sign-in.
 * docs/security.md ("Membership and invitations") has the rules.
 */

export type InvitationScope = "site" | "tenant";

/** How long an invitation waits to be accepted: its code is a bearer secret, so it should not live forever. */
export const INVITATION_TTL_MS = 7 * 86_400_000;

/** Invitation codes: 32 random bytes, so a digest is enough to find one and guessing is hopeless. */
const CODE_PREFIX = "inv_";
const newInvitationCode = () => `${CODE_PREFIX}${randomToken(32)}`;

type InvitationRow = typeof invitations.$inferSelect;

export const toInvitation = (row: InvitationRow) => ({
  invitation_id: row.invitationId,
  email: row.email,
  role: row.role,
  invited_by: row.invitedBy,
  created_at: row.createdAt,
  expires_at: row.expiresAt,
});

/** The invitation as its inviter sees it right after inviting: with the code, this once. */
export const toIssuedInvitation = ({ invitation, code }: { invitation: InvitationRow; code: string }) => ({
  ...toInvitation(invitation),
  invitation_code: code,
});

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Invites `email` to `role` on the site or tenant and returns the invitation with its code, which is
 * shown this once. Inviting the same address again replaces the role, restarts the wait and issues a
 * new code (the old one stops working).
 */
export async function invite(
  db: Db,
  input: { scope: InvitationScope; targetId: string; email: string; role: Role; invitedBy: AuthUser },
  request?: Request,
  now = workerClock.now(),
) {
  const { scope, targetId, role, invitedBy } = input;
  const email = input.email.toLowerCase();
  const code = newInvitationCode();
  const codeDigest = await sha256Hex(code);
  const row = await db.insert(invitations)
    .values({ invitationId: newUuid(), scope, targetId, email, role, invitedBy: invitedBy.id, createdAt: iso(now), expiresAt: iso(now + INVITATION_TTL_MS), codeDigest })
    .onConflictDoUpdate({
      target: [invitations.scope, invitations.targetId, invitations.email],
      set: { role, invitedBy: invitedBy.id, createdAt: iso(now), expiresAt: iso(now + INVITATION_TTL_MS), codeDigest },
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
  return { invitation: row, code };
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

/** The membership an invitation grants (never lowering a role the user has) and its audit row. */
function applyStatements(db: Db, inv: InvitationRow, userId: number, request: Request | undefined, how: "code" | "verified_email"): BatchItem<"sqlite">[] {
  const rank = ROLES.indexOf(inv.role);
  return [
    inv.scope === "site"
      ? db.insert(siteMemberships).values({ siteId: inv.targetId, userId, role: inv.role })
        .onConflictDoUpdate({ target: [siteMemberships.siteId, siteMemberships.userId], set: { role: inv.role }, setWhere: sql`${rank} > ${roleRank(siteMemberships.role)}` })
      : db.insert(tenantMemberships).values({ tenantId: inv.targetId, userId, role: inv.role })
        .onConflictDoUpdate({ target: [tenantMemberships.tenantId, tenantMemberships.userId], set: { role: inv.role }, setWhere: sql`${rank} > ${roleRank(tenantMemberships.role)}` }),
    db.insert(auditLogs).values(auditRow({
      eventType: `${inv.scope}_member_added`,
      description: `User ${userId} joined ${inv.scope} ${inv.targetId} as ${inv.role} by invitation ${inv.invitationId}`,
      userId: inv.invitedBy,
      siteId: inv.scope === "site" ? inv.targetId : null,
      metadata: {
        member_user_id: userId, role: inv.role, invitation_id: inv.invitationId, accepted_with: how,
        ...(inv.scope === "tenant" ? { tenant_id: inv.targetId } : {}),
      },
      request,
    })),
  ];
}

/**
 * Accepts the invitation `code` belongs to, for `user`: only from an account with the address it
 * was made for, so a code forwarded to the wrong person (or leaked) is refused there. An unknown,
 * expired, revoked or already used code is 404. Grants at least the invitation's role (it never
 * lowers one the user has, so it can neither take access away nor strip a site of its last owner).
 */
export async function acceptInvitationByCode(db: Db, user: Pick<AuthUser, "id" | "email">, code: string, request?: Request, now = workerClock.now()) {
  const found = code.startsWith(CODE_PREFIX)
    ? await db.select().from(invitations).where(eq(invitations.codeDigest, await sha256Hex(code))).get()
    : undefined;
  if (!found || found.expiresAt <= iso(now)) throw notFound("Invitation not found: the code is unknown, expired, revoked or already used");
  if (found.email !== user.email.toLowerCase()) {
    throw forbidden("This invitation was made for another e-mail address: accept it from the account with that address");
  }
  // One transaction: the invitation goes as its membership comes. Two accepts racing apply the same
  // role to the same account twice, which changes nothing the first did not.
  await db.batch([
    db.delete(invitations).where(eq(invitations.invitationId, found.invitationId)),
    ...applyStatements(db, found, user.id, request, "code"),
  ]);
  forgetCachedSiteAccess();
  return found;
}

/**
 * Applies the invitations waiting for this user's address (compared in lower case) and deletes
 * them, with expired ones. Only for an address an identity provider has verified (OpenID Connect
 * sign-in): nobody else is known to hold the address.
 */
export async function acceptInvitationsForVerifiedEmail(db: Db, user: Pick<AuthUser, "id" | "email">, request?: Request, now = workerClock.now()) {
  const email = user.email.toLowerCase();
  const waiting = await db.select().from(invitations).where(eq(invitations.email, email)).all();
  if (!waiting.length) return [];
  const live = waiting.filter((inv) => inv.expiresAt > iso(now));
  const statements: BatchItem<"sqlite">[] = live.flatMap((inv) => applyStatements(db, inv, user.id, request, "verified_email"));
  // By id, so an invitation made meanwhile waits for the next login instead of vanishing unapplied.
  const ids = JSON.stringify(waiting.map((inv) => inv.invitationId));
  statements.push(db.delete(invitations).where(sql`${invitations.invitationId} IN (SELECT value FROM json_each(${ids}))`));
  await db.batch(statements as [BatchItem<"sqlite">, ...BatchItem<"sqlite">[]]);
  forgetCachedSiteAccess();
  return live;
}
