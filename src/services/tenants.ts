import { and, desc, eq } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { sites, tenantMemberships, tenants, users } from "../db/schema";
import { conflict, forbidden, isUniqueViolation, notFound } from "../lib/errors";
import { newTenantId } from "../shared/ids";
import { isLowerRole, type Role } from "../shared/vocabulary";
import { recordAudit } from "./audit";
import { invite } from "./invitations";
import { syncLiveAccess } from "./live-access";
import { forgetCachedSiteAccess } from "./site-access-cache";
import { findUserById } from "./users";

export const listTenants = (db: Db) => db.select().from(tenants).orderBy(desc(tenants.createdAt), desc(tenants.id)).all();

export async function createTenant(db: Db, input: { tenant_id?: string; name: string }) {
  const tenantId = input.tenant_id ?? newTenantId();
  const existing = await db.select({ id: tenants.id }).from(tenants).where(eq(tenants.tenantId, tenantId)).get();
  if (existing) throw conflict(`Tenant with ID '${tenantId}' already exists`);
  try {
    return await db.insert(tenants).values({ tenantId, name: input.name }).returning().get();
  } catch (error) {
    if (isUniqueViolation(error, "tenants.tenant_id")) throw conflict(`Tenant with ID '${tenantId}' already exists`);
    throw error;
  }
}

/** The tenant's members; their e-mail addresses only when `withEmails` (tenant owners and administrators). */
export async function listTenantMembers(db: Db, tenantId: string, { withEmails }: { withEmails: boolean }) {
  const rows = await db.select({ user_id: users.id, email: users.email, username: users.username, role: tenantMemberships.role, created_at: tenantMemberships.createdAt })
    .from(tenantMemberships)
    .innerJoin(users, eq(users.id, tenantMemberships.userId))
    .where(eq(tenantMemberships.tenantId, tenantId))
    .orderBy(desc(tenantMemberships.createdAt))
    .all();
  return withEmails ? rows : rows.map(({ email: _email, ...member }) => member);
}

const tenantSiteIds = async (db: Db, tenantId: string) =>
  (await db.select({ siteId: sites.siteId }).from(sites).where(eq(sites.tenantId, tenantId)).all()).map((r) => r.siteId);

/**
 * The tenant counterpart of addSiteMember (src/services/sites.ts), with the same rules: by e-mail an
 * invitation, by user_id administrators add anyone and tenant owners only re-role existing tenant
 * members. A lowered tenant role reaches the member's live connections on every site of the tenant.
 */
export async function addTenantMember(
  db: Db,
  env: Env,
  actor: AuthUser,
  tenantId: string,
  input: { email?: string; user_id?: number; role: Role },
  request?: Request,
) {
  if (input.email !== undefined) {
    return { invitation: await invite(db, { scope: "tenant", targetId: tenantId, email: input.email, role: input.role, invitedBy: actor }, request) };
  }
  const userId = input.user_id!;
  const previous = await db.select().from(tenantMemberships)
    .where(and(eq(tenantMemberships.tenantId, tenantId), eq(tenantMemberships.userId, userId))).get();
  if (!actor.isAdmin && !previous) throw forbidden("Only administrators add members by user_id; invite them by e-mail instead");
  const user = await findUserById(db, userId);
  if (!user) throw notFound("User not found");
  const membership = await upsertTenantMember(db, tenantId, user.id, input.role);
  await recordAudit(db, {
    eventType: "tenant_member_added",
    description: `User ${user.id} (${user.username}) granted ${input.role} on tenant ${tenantId}`,
    userId: actor.id,
    metadata: { tenant_id: tenantId, member_user_id: user.id, role: input.role, previous_role: previous?.role ?? null },
    request,
  });
  if (isLowerRole(input.role, previous?.role)) {
    await syncLiveAccess(env, db, user.id, await tenantSiteIds(db, tenantId));
  }
  return { member: { user_id: user.id, email: user.email, username: user.username, role: membership.role, created_at: membership.createdAt } };
}

/** Removes a tenant member and brings their live connections on every site of the tenant in line. */
export async function removeMemberFromTenant(db: Db, env: Env, actor: AuthUser, tenantId: string, userId: number, request?: Request) {
  const removed = await removeTenantMember(db, tenantId, userId);
  await recordAudit(db, {
    eventType: "tenant_member_removed",
    description: `User ${userId} removed from tenant ${tenantId}`,
    userId: actor.id,
    metadata: { tenant_id: tenantId, member_user_id: userId, role: removed.role },
    request,
  });
  await syncLiveAccess(env, db, userId, await tenantSiteIds(db, tenantId));
  return removed;
}

export async function upsertTenantMember(db: Db, tenantId: string, userId: number, role: Role) {
  const membership = await db.insert(tenantMemberships).values({ tenantId, userId, role })
    .onConflictDoUpdate({ target: [tenantMemberships.tenantId, tenantMemberships.userId], set: { role } })
    .returning().get();
  forgetCachedSiteAccess();
  return membership;
}

export async function removeTenantMember(db: Db, tenantId: string, userId: number) {
  const removed = await db.delete(tenantMemberships)
    .where(and(eq(tenantMemberships.tenantId, tenantId), eq(tenantMemberships.userId, userId)))
    .returning().all();
  forgetCachedSiteAccess();
  if (!removed.length) throw notFound("Membership not found");
  return removed[0];
}
