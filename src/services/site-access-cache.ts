import type { AuthUser, Db } from "../env";
import { workerClock } from "../lib/clock";
import { findUserAndSiteAccess, type SiteAccess } from "./access";

/**
 * How long this isolate reuses a (user, site) access answer for a read. It bounds how long a revoked
 * role or a deactivated account keeps read access in isolates other than the one that made the
 * change (docs/security.md, "Cached access on site reads").
 */
export const SITE_ACCESS_CACHE_TTL_MS = 5_000;
/** At most this many (user, site) answers are kept; the oldest entry makes room for a new one. */
export const SITE_ACCESS_CACHE_MAX_ENTRIES = 10_000;

interface CachedAccess {
  user: AuthUser;
  access: SiteAccess;
  expiresAt: number;
}

// Values only, never promises: one request may not await work another request started.
const entries = new Map<string, CachedAccess>();
// Bumped by every forget: an answer D1 gave before an access change finished is not kept after it.
let generation = 0;

const keyOf = (userId: number, siteId: string) => `${userId} ${siteId}`;

/**
 * findUserAndSiteAccess for safe (read-only) requests, answered from this isolate's memory for up to
 * SITE_ACCESS_CACHE_TTL_MS. Only an active user with a role on an existing site is kept: an unknown
 * site, a missing role or an inactive account is read from D1 every time, so a site just created or
 * a role just granted is seen at once.
 */
export async function findUserAndSiteAccessForRead(db: Db, userId: number, siteId: string): Promise<{ user?: AuthUser; access?: SiteAccess }> {
  const key = keyOf(userId, siteId);
  const now = workerClock.now();
  const cached = entries.get(key);
  if (cached && cached.expiresAt > now) return { user: cached.user, access: cached.access };
  if (cached) entries.delete(key);
  const readInGeneration = generation;
  const found = await findUserAndSiteAccess(db, userId, siteId);
  if (found.user && found.access?.role && readInGeneration === generation) remember(key, { user: found.user, access: found.access, expiresAt: workerClock.now() + SITE_ACCESS_CACHE_TTL_MS });
  return found;
}

function remember(key: string, value: CachedAccess) {
  entries.delete(key);
  if (entries.size >= SITE_ACCESS_CACHE_MAX_ENTRIES) {
    const oldest = entries.keys().next();
    if (!oldest.done) entries.delete(oldest.value);
  }
  entries.set(key, value);
}

/**
 * A write changed who may read what (a membership, a tenant role, an account's state, a site's row):
 * this isolate forgets every cached answer, so its next read of any site goes to D1. Dropping all
 * rather than the affected keys keeps every such write correct without working out which sites a
 * tenant or an account reaches.
 */
export function forgetCachedSiteAccess() {
  generation++;
  entries.clear();
}

/** How many answers are held (for tests). */
export const cachedSiteAccessCount = () => entries.size;
