import { and, desc, eq } from "drizzle-orm";
import type { Db } from "../env";
import { tenantMemberships, tenants, users } from "../db/schema";
import { conflict, isUniqueViolation, notFound } from "../lib/errors";
import { newTenantId } from "../shared/ids";
import type { Role } from "./access";

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

export const listTenantMembers = (db: Db, tenantId: string) =>
  db.select({ user_id: users.id, email: users.email, username: users.username, role: tenantMemberships.role, created_at: tenantMemberships.createdAt })
    .from(tenantMemberships)
    .innerJoin(users, eq(users.id, tenantMemberships.userId))
    .where(eq(tenantMemberships.tenantId, tenantId))
    .orderBy(desc(tenantMemberships.createdAt))
    .all();

export const upsertTenantMember = (db: Db, tenantId: string, userId: number, role: Role) =>
  db.insert(tenantMemberships).values({ tenantId, userId, role })
    .onConflictDoUpdate({ target: [tenantMemberships.tenantId, tenantMemberships.userId], set: { role } })
    .returning().get();

export async function removeTenantMember(db: Db, tenantId: string, userId: number) {
  const removed = await db.delete(tenantMemberships)
    .where(and(eq(tenantMemberships.tenantId, tenantId), eq(tenantMemberships.userId, userId)))
    .returning().all();
  if (!removed.length) throw notFound("Membership not found");
  return removed[0];
}
