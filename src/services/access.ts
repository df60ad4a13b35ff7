import { and, eq, sql } from "drizzle-orm";
import type { AuthUser, Db } from "../env";
import { commandIndex, devices, jobs, siteMemberships, sites, tenantMemberships, tenants, users } from "../db/schema";
import { forbidden, notFound, type ApiError } from "../lib/errors";
import { ROLES, type Role } from "../shared/vocabulary";
import { recordAudit } from "./audit";

export { ROLES, type Role };

const rank = (role: Role | undefined) => (role ? ROLES.indexOf(role) : -1);

export const maxRole = (...roles: (Role | undefined)[]): Role | undefined =>
  roles.reduce<Role | undefined>((best, r) => (rank(r) > rank(best) ? r : best), undefined);

export type SiteRow = typeof sites.$inferSelect;
export type TenantRow = typeof tenants.$inferSelect;

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

/** A site as an access check sees it: the row, and the caller's effective role there (none: undefined). */
export interface SiteAccess {
  site: SiteRow;
  role: Role | undefined;
}

/**
 * The site and the user's roles on it (the site grant and the site's tenant grant) in one statement,
 * since every operator route on a site pays for this lookup. Undefined when the site does not exist.
 */
export async function findSiteAccess(db: Db, user: AuthUser, siteId: string): Promise<SiteAccess | undefined> {
  if (user.isAdmin) {
    const site = await findSite(db, siteId);
    return site && { site, role: "owner" };
  }
  const row = await db.select({ site: sites, siteRole: siteMemberships.role, tenantRole: tenantMemberships.role })
    .from(sites)
    .leftJoin(siteMemberships, and(eq(siteMemberships.siteId, sites.siteId), eq(siteMemberships.userId, user.id)))
    .leftJoin(tenantMemberships, and(eq(tenantMemberships.tenantId, sites.tenantId), eq(tenantMemberships.userId, user.id)))
    .where(eq(sites.siteId, siteId))
    .get();
  return row && { site: row.site, role: maxRole(row.siteRole ?? undefined, row.tenantRole ?? undefined) };
}

const ACCOUNT = { id: users.id, email: users.email, username: users.username, fullName: users.fullName, isAdmin: users.isAdmin, isActive: users.isActive };
const GRANTS = { site: sites, siteRole: siteMemberships.role, tenantRole: tenantMemberships.role };
const SITE_GRANT = and(eq(siteMemberships.siteId, sites.siteId), eq(siteMemberships.userId, users.id));
const TENANT_GRANT = and(eq(tenantMemberships.tenantId, sites.tenantId), eq(tenantMemberships.userId, users.id));

interface AccessRow {
  account: AuthUser & { isActive: boolean };
  site: SiteRow | null;
  siteRole: Role | null;
  tenantRole: Role | null;
}

/** The account (when active) and the caller's access to the row's site (when there is one). */
function accessOfRow(row: AccessRow | undefined): { user?: AuthUser; access?: SiteAccess } {
  if (!row?.account.isActive) return {};
  const { isActive: _active, ...user } = row.account;
  if (!row.site) return { user };
  const role = user.isAdmin ? "owner" : maxRole(row.siteRole ?? undefined, row.tenantRole ?? undefined);
  return { user, access: { site: row.site, role } };
}

/**
 * The signed-in user (when active) together with the site and their role on it, in one statement:
 * what authentication and the access check of a site route need, for the price of one round trip.
 * `user` is undefined when the account is gone or deactivated; `access` when the site does not exist.
 */
export async function findUserAndSiteAccess(db: Db, userId: number, siteId: string): Promise<{ user?: AuthUser; access?: SiteAccess }> {
  const row = await db.select({ account: ACCOUNT, ...GRANTS })
    .from(users)
    .leftJoin(sites, eq(sites.siteId, siteId))
    .leftJoin(siteMemberships, SITE_GRANT)
    .leftJoin(tenantMemberships, TENANT_GRANT)
    .where(eq(users.id, userId))
    .get();
  return accessOfRow(row);
}

/** The objects that belong to one site, and so are reached through that site's roles. */
const SITE_SCOPED = {
  device: { table: devices, id: devices.deviceId, siteId: devices.siteId },
  job: { table: jobs, id: jobs.jobId, siteId: jobs.siteId },
  command: { table: commandIndex, id: commandIndex.commandId, siteId: commandIndex.siteId },
};
export type SiteScopedKind = keyof typeof SITE_SCOPED;
export type SiteScopedRow<K extends SiteScopedKind> = (typeof SITE_SCOPED)[K]["table"]["$inferSelect"];

/**
 * findUserAndSiteAccess for an object that belongs to a site (a device, a job, a command): the
 * user, the object, its site and the user's role there, in one statement instead of one each.
 * `object` is undefined when no such object exists.
 */
export async function findUserAndObjectAccess<K extends SiteScopedKind>(
  db: Db, userId: number, kind: K, objectId: string,
): Promise<{ user?: AuthUser; object?: SiteScopedRow<K>; access?: SiteAccess }> {
  const scoped = SITE_SCOPED[kind] as (typeof SITE_SCOPED)[SiteScopedKind];
  const row = await db.select({ account: ACCOUNT, object: scoped.table, ...GRANTS })
    .from(users)
    .leftJoin(scoped.table, eq(scoped.id, objectId))
    .leftJoin(sites, eq(sites.siteId, scoped.siteId))
    .leftJoin(siteMemberships, SITE_GRANT)
    .leftJoin(tenantMemberships, TENANT_GRANT)
    .where(eq(users.id, userId))
    .get();
  const found = accessOfRow(row);
  return row?.object ? { ...found, object: row.object as SiteScopedRow<K> } : found;
}

export const siteNotFound = (siteId: string) => notFound(`Site with ID '${siteId}' not found`);
export const deviceNotFound = (deviceId: string) => notFound(`Device with ID '${deviceId}' not found`);
export const tenantNotFound = (tenantId: string) => notFound(`Tenant with ID '${tenantId}' not found`);

/**
 * How a refusal reads. The rule (docs/security.md, "Existence and access"): a caller with no role at
 * all on the site is told the object does not exist, with the very 404 an unknown id of that object
 * gets, so ids cannot be probed; a caller with some role, too low for the action, is told 403.
 */
export interface SiteAccessOptions {
  /** The 404 of the object the request names (a device, a job, a command…); default: the site's. */
  hiddenAs?: () => ApiError;
  /**
   * `forbidden`: a caller with no role is told 403 instead. Only enrolment-intent calls do this, because
   * their contract names 403 for a caller not permitted on the site (see authorizeIntentSite).
   */
  outsider?: "hidden" | "forbidden";
}

/**
 * Loads the site and checks the caller's role on it. Unknown site, or no role on it → 404 (as
 * `hiddenAs`); a role below `minimum` → 403. Either refusal of an existing site is audited as
 * permission_denied. Returns the site and the caller's role.
 */
export async function authorizeSite(
  db: Db,
  user: AuthUser,
  siteId: string,
  minimum: Role,
  request?: Request,
  { hiddenAs = () => siteNotFound(siteId), outsider = "hidden" }: SiteAccessOptions = {},
): Promise<{ site: SiteRow; role: Role }> {
  return checkSiteAccess(db, user, siteId, await findSiteAccess(db, user, siteId), minimum, request, { hiddenAs, outsider });
}

/** authorizeSite's rule applied to a site and role already looked up (`found`: undefined when the site does not exist). */
export async function checkSiteAccess(
  db: Db,
  user: AuthUser,
  siteId: string,
  found: SiteAccess | undefined,
  minimum: Role,
  request?: Request,
  { hiddenAs = () => siteNotFound(siteId), outsider = "hidden" }: SiteAccessOptions = {},
): Promise<{ site: SiteRow; role: Role }> {
  if (!found) throw hiddenAs();
  const { site, role } = found;
  if (role && rank(role) >= rank(minimum)) return { site, role };
  const hidden = !role && outsider === "hidden";
  await recordAudit(db, {
    eventType: "permission_denied",
    description: `${minimum} role required on site ${siteId}`,
    // Everyone reads the events they caused: a caller told 404 would find the site named in their own
    // trail. Such a row names them in its metadata only, for administrators and the site's members.
    userId: hidden ? null : user.id,
    siteId,
    metadata: {
      required_role: minimum, role: role ?? null, path: request ? new URL(request.url).pathname : undefined,
      ...(hidden ? { caller_user_id: user.id, answered: 404 } : {}),
    },
    request,
  });
  if (role) throw forbidden(`The ${minimum} role on this site is required`);
  throw hidden ? hiddenAs() : forbidden("You do not have access to this site");
}

/** Enrolment-intent calls: as authorizeSite, except that a caller with no role on an existing site gets 403. */
export const authorizeIntentSite = (db: Db, user: AuthUser, siteId: string, minimum: Role, request?: Request) =>
  authorizeSite(db, user, siteId, minimum, request, { outsider: "forbidden" });

/**
 * Loads the tenant and checks the caller's tenant role, by the same rule as a site: unknown tenant
 * or no role → 404, a role below `minimum` → 403.
 */
export async function authorizeTenant(db: Db, user: AuthUser, tenantId: string, minimum: Role): Promise<{ tenant: TenantRow; role: Role }> {
  const tenant = await db.select().from(tenants).where(eq(tenants.tenantId, tenantId)).get();
  if (!tenant) throw tenantNotFound(tenantId);
  const role = await tenantRole(db, user, tenantId);
  if (!role) throw tenantNotFound(tenantId);
  if (rank(role) < rank(minimum)) throw forbidden(`The ${minimum} role on this tenant is required`);
  return { tenant, role };
}

/** The user's role on a tenant (administrators: owner). */
export async function tenantRole(db: Db, user: AuthUser, tenantId: string): Promise<Role | undefined> {
  if (user.isAdmin) return "owner";
  const grant = await db.select({ role: tenantMemberships.role }).from(tenantMemberships)
    .where(and(eq(tenantMemberships.tenantId, tenantId), eq(tenantMemberships.userId, user.id))).get();
  return grant?.role;
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

/** Every site the user can read, administrators included (for them: every site there is). */
export async function visibleSiteIds(db: Db, user: AuthUser): Promise<string[]> {
  return (await accessibleSiteIds(db, user)) ?? (await db.select({ siteId: sites.siteId }).from(sites).all()).map((r) => r.siteId);
}

/**
 * The user's effective role on each of these sites as the database has it now: undefined where
 * they have none, and everywhere once the user is deleted or deactivated.
 */
export async function currentSiteRoles(db: Db, userId: number, siteIds: string[]): Promise<Map<string, Role | undefined>> {
  const roles = new Map<string, Role | undefined>(siteIds.map((id) => [id, undefined]));
  const user = await db.select({ isAdmin: users.isAdmin, isActive: users.isActive }).from(users).where(eq(users.id, userId)).get();
  if (!user?.isActive || siteIds.length === 0) return roles;
  if (user.isAdmin) return new Map(siteIds.map((id) => [id, "owner"]));
  // One JSON parameter for the whole list: D1 binds at most 100 per statement.
  const list = JSON.stringify(siteIds);
  const [direct, viaTenant] = await Promise.all([
    db.select({ siteId: siteMemberships.siteId, role: siteMemberships.role }).from(siteMemberships)
      .where(and(eq(siteMemberships.userId, userId), sql`${siteMemberships.siteId} IN (SELECT value FROM json_each(${list}))`)).all(),
    db.select({ siteId: sites.siteId, role: tenantMemberships.role }).from(sites)
      .innerJoin(tenantMemberships, and(eq(tenantMemberships.tenantId, sites.tenantId), eq(tenantMemberships.userId, userId)))
      .where(sql`${sites.siteId} IN (SELECT value FROM json_each(${list}))`).all(),
  ]);
  for (const grant of [...direct, ...viaTenant]) roles.set(grant.siteId, maxRole(roles.get(grant.siteId), grant.role));
  return roles;
}
