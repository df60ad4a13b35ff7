import { and, eq } from "drizzle-orm";
import type { AuthUser, Db } from "../env";
import { siteMemberships, sites, tenantMemberships } from "../db/schema";
import { forbidden, notFound } from "../lib/errors";
import { recordAudit } from "./audit";
import { ROLES, type Role } from "../shared/vocabulary";

export { ROLES, type Role };

const rank = (role: Role | undefined) => (role ? ROLES.indexOf(role) : -1);

export const maxRole = (...roles: (Role | undefined)[]): Role | undefined =>
  roles.reduce<Role | undefined>((best, r) => (rank(r) > rank(best) ? r : best), undefined);

export type SiteRow = typeof sites.$inferSelect;

/** The user's effective role on a site: the higher of the site grant and the site's tenant grant. */
export async function siteRole(db: Db, user: AuthUser, site: SiteRow): Promise<Role | undefined> {
  if (user.isAdmin) return "owner";
  const [siteGrant, tenantGrant] = await Promise.all([
    db.select({ role: siteMemberships.role }).from(siteMemberships)
      .where(and(eq(siteMemberships.siteId, site.siteId), eq(siteMemberships.userId, user.id))).get(),
    site.tenantId
      ? db.select({ role: tenantMemberships.role }).from(tenantMemberships)
          .where(and(eq(tenantMemberships.tenantId, site.tenantId), eq(tenantMemberships.userId, user.id))).get()
      : undefined,
  ]);
  return maxRole(siteGrant?.role, tenantGrant?.role);
}

export const findSite = (db: Db, siteId: string) => db.select().from(sites).where(eq(sites.siteId, siteId)).get();

export const siteNotFound = (siteId: string) => notFound(`Site with ID '${siteId}' not found`);

/**
 * Loads the site and checks the caller's role on it: unknown site → 404, no or too low a role →
 * 403 (audited as permission_denied). Returns the site and the caller's role.
 */
export async function authorizeSite(
  db: Db,
  user: AuthUser,
  siteId: string,
  minimum: Role,
  request?: Request,
): Promise<{ site: SiteRow; role: Role }> {
  const site = await findSite(db, siteId);
  if (!site) throw siteNotFound(siteId);
  const role = await siteRole(db, user, site);
  if (rank(role) < rank(minimum)) {
    await recordAudit(db, {
      eventType: "permission_denied",
      description: `${minimum} role required on site ${siteId}`,
      userId: user.id,
      siteId,
      metadata: { required_role: minimum, role: role ?? null, path: request ? new URL(request.url).pathname : undefined },
      request,
    });
    throw forbidden(role ? `The ${minimum} role on this site is required` : "You do not have access to this site");
  }
  return { site, role: role! };
}

/** Site ids the user can read; undefined for administrators (all sites). */
export async function accessibleSiteIds(db: Db, user: AuthUser): Promise<string[] | undefined> {
  if (user.isAdmin) return undefined;
  const [direct, viaTenant] = await Promise.all([
    db.select({ siteId: siteMemberships.siteId }).from(siteMemberships).where(eq(siteMemberships.userId, user.id)).all(),
    db.select({ siteId: sites.siteId }).from(sites)
      .innerJoin(tenantMemberships, eq(tenantMemberships.tenantId, sites.tenantId))
      .where(eq(tenantMemberships.userId, user.id)).all(),
  ]);
  return [...new Set([...direct, ...viaTenant].map((r) => r.siteId))];
}
