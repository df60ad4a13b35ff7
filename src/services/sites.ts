import { and, desc, eq, inArray, ne, or, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditLogs, siteMemberships, sites, users } from "../db/schema";
import { conflict, notFound, badRequest, forbidden, isUniqueViolation } from "../lib/errors";
import { newSiteId } from "../shared/ids";
import { auditRow } from "../shared/audit-row";
import { isLowerRole } from "../shared/vocabulary";
import { accessibleSiteIds, authorizeTenant, type Role } from "./access";
import { recordAudit } from "./audit";
import { invite } from "./invitations";
import { syncLiveAccess } from "./live-access";
import { forgetCachedSiteAccess } from "./site-access-cache";
import { findUserById } from "./users";
import { currentDate } from "../lib/clock";

export interface CreateSiteInput {
  site_id?: string;
  name: string;
  description?: string | null;
  location?: string | null;
  tenant_id?: string | null;
  time_zone?: string;
}

export async function listSites(db: Db, user: AuthUser) {
  const visible = await accessibleSiteIds(db, user);
  if (visible && visible.length === 0) return [];
  if (!visible) return db.select().from(sites).orderBy(desc(sites.createdAt), desc(sites.id)).all();
  // D1 binds at most 100 parameters per statement.
  const rows: (typeof sites.$inferSelect)[] = [];
  for (let i = 0; i < visible.length; i += 90) {
    rows.push(...(await db.select().from(sites).where(inArray(sites.siteId, visible.slice(i, i + 90))).all()));
  }
  return rows.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : b.id - a.id));
}

export async function createSite(db: Db, user: AuthUser, input: CreateSiteInput, request?: Request) {
  const siteId = input.site_id ?? newSiteId();
  if (input.tenant_id) {
    await authorizeTenant(db, user, input.tenant_id, "owner");
  }
  // Ids that differ only in case are the same id to a person reading them off a label.
  const taken = await db.select({ id: sites.id }).from(sites).where(sql`lower(${sites.siteId}) = lower(${siteId})`).get();
  if (taken) throw conflict(`Site with ID '${siteId}' already exists (site ids are compared regardless of case)`);
  try {
    const [[site]] = await db.batch([
      db.insert(sites).values({
        siteId,
        name: input.name,
        description: input.description ?? null,
        location: input.location ?? null,
        tenantId: input.tenant_id ?? null,
        timeZone: input.time_zone ?? "UTC",
        createdBy: user.id,
      }).returning(),
      db.insert(siteMemberships).values({ siteId, userId: user.id, role: "owner" }),
      db.insert(auditLogs).values(auditRow({
        eventType: "site_created",
        description: `Site ${siteId} created`,
        userId: user.id,
        siteId,
        metadata: { name: input.name, tenant_id: input.tenant_id ?? null },
        request,
      })),
    ]);
    return site;
  } catch (error) {
    if (isUniqueViolation(error, "sites.site_id") || isUniqueViolation(error, "sites_site_id_ci_uq")) {
      throw conflict(`Site with ID '${siteId}' already exists (site ids are compared regardless of case)`);
    }
    throw error;
  }
}

/** Changes the site's time zone (already validated), audited as site_updated. */
export async function setSiteTimeZone(db: Db, user: AuthUser, siteId: string, timeZone: string, request?: Request) {
  const [[site]] = await db.batch([
    db.update(sites).set({ timeZone, updatedAt: currentDate().toISOString() }).where(eq(sites.siteId, siteId)).returning(),
    db.insert(auditLogs).values(auditRow({
      eventType: "site_updated", description: `Site ${siteId}: time zone set to ${timeZone}`, userId: user.id, siteId, metadata: { time_zone: timeZone }, request,
    })),
  ]);
  // The cached access answers carry the site's row, time zone included.
  forgetCachedSiteAccess();
  return site;
}

/** The site's members; their e-mail addresses only when `withEmails` (owners and administrators). */
export async function listMembers(db: Db, siteId: string, { withEmails }: { withEmails: boolean }) {
  const rows = await db
    .select({ user_id: users.id, email: users.email, username: users.username, role: siteMemberships.role, created_at: siteMemberships.createdAt })
    .from(siteMemberships)
    .innerJoin(users, eq(users.id, siteMemberships.userId))
    .where(eq(siteMemberships.siteId, siteId))
    .orderBy(desc(siteMemberships.createdAt))
    .all();
  return withEmails ? rows : rows.map(({ email: _email, ...member }) => member);
}

const ADD_BY_ID_IS_FOR_ADMINS = "Only administrators add members by user_id; invite them by e-mail instead";

/**
 * Adds a member the way the request names them. By e-mail: an invitation, answered alike whether
 * or not an account has the address (see ./invitations.ts). By user_id: administrators add anyone;
 * an owner may only change the role of someone already a member (whose id the member list shows),
 * so an id says nothing about accounts outside the site. A lowered role reaches the member's open
 * live connections at once.
 */
export async function addSiteMember(
  db: Db,
  env: Env,
  actor: AuthUser,
  siteId: string,
  input: { email?: string; user_id?: number; role: Role },
  request?: Request,
) {
  if (input.email !== undefined) {
    return { invitation: await invite(db, { scope: "site", targetId: siteId, email: input.email, role: input.role, invitedBy: actor }, request) };
  }
  const userId = input.user_id!;
  const previous = await db.select().from(siteMemberships)
    .where(and(eq(siteMemberships.siteId, siteId), eq(siteMemberships.userId, userId))).get();
  if (!actor.isAdmin && !previous) throw forbidden(ADD_BY_ID_IS_FOR_ADMINS);
  const user = await findUserById(db, userId);
  if (!user) throw notFound("User not found");
  const membership = await upsertSiteMember(db, siteId, user.id, input.role);
  await recordAudit(db, {
    eventType: "site_member_added",
    description: `User ${user.id} (${user.username}) granted ${input.role} on ${siteId}`,
    userId: actor.id,
    siteId,
    metadata: { member_user_id: user.id, role: input.role, previous_role: previous?.role ?? null },
    request,
  });
  if (isLowerRole(input.role, previous?.role)) await syncLiveAccess(env, db, user.id, [siteId]);
  return { member: { user_id: user.id, email: user.email, username: user.username, role: membership.role, created_at: membership.createdAt } };
}

/** Removes a member (never the last owner) and ends their live connections to the site unless a tenant role still grants one. */
export async function removeMemberFromSite(db: Db, env: Env, actor: AuthUser, siteId: string, userId: number, request?: Request) {
  const removed = await removeSiteMember(db, siteId, userId);
  await recordAudit(db, {
    eventType: "site_member_removed",
    description: `User ${userId} removed from ${siteId}`,
    userId: actor.id,
    siteId,
    metadata: { member_user_id: userId, role: removed.role },
    request,
  });
  await syncLiveAccess(env, db, userId, [siteId]);
  return removed;
}

// True when the site has an owner other than `userId`. Evaluated inside the same statement as the
// change it guards, so two owners removing or demoting each other at once cannot orphan the site.
const anotherOwner = (siteId: string, userId: number) =>
  sql`exists (select 1 from site_memberships as o where o.site_id = ${siteId} and o.role = 'owner' and o.user_id <> ${userId})`;

const LAST_OWNER = "A site must keep at least one owner";

/** Adds or changes a member's role; returns the membership. Demoting the last owner is refused (400). */
export async function upsertSiteMember(db: Db, siteId: string, userId: number, role: Role) {
  const row = await db
    .insert(siteMemberships)
    .values({ siteId, userId, role })
    .onConflictDoUpdate({
      target: [siteMemberships.siteId, siteMemberships.userId],
      set: { role },
      setWhere: or(ne(siteMemberships.role, "owner"), sql`${role} = 'owner'`, anotherOwner(siteId, userId)),
    })
    .returning()
    .get();
  forgetCachedSiteAccess();
  if (!row) throw badRequest(LAST_OWNER);
  return row;
}

export async function removeSiteMember(db: Db, siteId: string, userId: number) {
  const membership = await db.select().from(siteMemberships)
    .where(and(eq(siteMemberships.siteId, siteId), eq(siteMemberships.userId, userId))).get();
  if (!membership) throw notFound("Membership not found");
  const removed = await db.delete(siteMemberships)
    .where(and(eq(siteMemberships.id, membership.id), or(ne(siteMemberships.role, "owner"), anotherOwner(siteId, userId))))
    .returning({ id: siteMemberships.id }).all();
  forgetCachedSiteAccess();
  if (!removed.length) {
    if (membership.role === "owner") throw badRequest(LAST_OWNER);
    throw notFound("Membership not found");
  }
  return membership;
}
