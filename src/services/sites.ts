import { and, desc, eq, inArray, ne, or, sql } from "drizzle-orm";
import type { AuthUser, Db } from "../env";
import { auditLogs, siteMemberships, sites, users } from "../db/schema";
import { conflict, notFound, badRequest, isUniqueViolation } from "../lib/errors";
import { newSiteId } from "../shared/ids";
import { auditRow } from "../shared/audit-row";
import { accessibleSiteIds, authorizeTenant, type Role } from "./access";

export interface CreateSiteInput {
  site_id?: string;
  name: string;
  description?: string | null;
  location?: string | null;
  tenant_id?: string | null;
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
  if (await db.select({ id: sites.id }).from(sites).where(eq(sites.siteId, siteId)).get()) {
    throw conflict(`Site with ID '${siteId}' already exists`);
  }
  try {
    const [[site]] = await db.batch([
      db.insert(sites).values({
        siteId,
        name: input.name,
        description: input.description ?? null,
        location: input.location ?? null,
        tenantId: input.tenant_id ?? null,
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
    if (isUniqueViolation(error, "sites.site_id")) throw conflict(`Site with ID '${siteId}' already exists`);
    throw error;
  }
}

export async function listMembers(db: Db, siteId: string) {
  return db
    .select({ user_id: users.id, email: users.email, username: users.username, role: siteMemberships.role, created_at: siteMemberships.createdAt })
    .from(siteMemberships)
    .innerJoin(users, eq(users.id, siteMemberships.userId))
    .where(eq(siteMemberships.siteId, siteId))
    .orderBy(desc(siteMemberships.createdAt))
    .all();
}

export async function resolveMemberUser(db: Db, input: { email?: string; user_id?: number }) {
  const row = input.user_id !== undefined
    ? await db.select().from(users).where(eq(users.id, input.user_id)).get()
    : await db.select().from(users).where(eq(users.email, input.email!.toLowerCase())).get();
  if (!row) throw notFound("User not found");
  return row;
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
  if (!removed.length) {
    if (membership.role === "owner") throw badRequest(LAST_OWNER);
    throw notFound("Membership not found");
  }
  return membership;
}
