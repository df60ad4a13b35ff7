import type { Db, Env } from "../env";
import { and, eq, inArray, sql } from "drizzle-orm";
import { rolloutSites, rollouts, users } from "../db/schema";
import { siteHub } from "../hub/client";
import { auditStream } from "../hub/audit-stream";
import { rolloutOrchestrator } from "../hub/rollouts";
import { currentSiteRoles } from "./access";

/** How many hubs are told at once: a tenant role or an administrator can span many sites. */
const REVOCATION_FAN_OUT = 16;

/**
 * Brings the user's open live subscriptions on these sites in line with what the database says
 * now: closed (4403 "access revoked") where the user no longer has a role, or is deleted or
 * deactivated; the lower role recorded where they still have one. Call it after the change is
 * committed, with every site the change can have touched. The user's audit streams and the
 * progress streams of rollouts touching these sites are brought in line too. A hub or object that
 * cannot be reached is logged and skipped: the change itself stands.
 */
export async function syncLiveAccess(env: Env, db: Db, userId: number, siteIds: string[]) {
  await syncAuditStreamAccess(env, db, userId);
  if (siteIds.length === 0) return;
  const roles = await currentSiteRoles(db, userId, siteIds);
  for (let i = 0; i < siteIds.length; i += REVOCATION_FAN_OUT) {
    const batch = siteIds.slice(i, i + REVOCATION_FAN_OUT);
    const results = await Promise.allSettled(batch.map((siteId) =>
      siteHub(env, siteId).revokeSubscriber({ user_id: userId, role: roles.get(siteId) ?? null })));
    results.forEach((result, j) => {
      if (result.status === "rejected") console.error(`live access of user ${userId} on site ${batch[j]} not updated`, result.reason);
    });
  }
  await syncRolloutStreamAccess(env, db, userId, siteIds).catch((error) => {
    console.error(`rollout streams of user ${userId} not updated`, error);
  });
}

/**
 * The same for the user's live audit streams: asks the AuditStream object which sites they watch,
 * reads what the user may watch now (every site while an active administrator, else the sites on
 * which they hold a role), and has it end the rest. It does not depend on which sites the change
 * touched, so it is right for any change, a lost administrator flag included.
 */
export async function syncAuditStreamAccess(env: Env, db: Db, userId: number) {
  try {
    const stream = auditStream(env);
    const watched = await stream.watchedSites(userId);
    if (!watched.unscoped && watched.site_ids.length === 0) return;
    const user = await db.select({ isAdmin: users.isAdmin, isActive: users.isActive }).from(users).where(eq(users.id, userId)).get();
    const admin = Boolean(user?.isActive && user.isAdmin);
    const roles = await currentSiteRoles(db, userId, watched.site_ids);
    await stream.revokeSubscriber(userId, { unscoped: admin, site_ids: watched.site_ids.filter((id) => roles.get(id) !== undefined) });
  } catch (error) {
    console.error(`audit stream access of user ${userId} not updated`, error);
  }
}

/**
 * The same for rollout progress streams: every unfinished rollout touching one of these sites whose
 * sites the user now holds no role on at all (nor is an active administrator) is told to end the
 * user's streams. A finished rollout's orchestrator has ended its streams already.
 */
export async function syncRolloutStreamAccess(env: Env, db: Db, userId: number, siteIds: string[]) {
  const touched = await db.select({ rolloutId: rollouts.rolloutId, siteIds: rollouts.siteIds }).from(rollouts)
    .where(and(
      inArray(rollouts.status, ["scheduled", "running", "paused"]),
      inArray(rollouts.rolloutId, db.select({ id: rolloutSites.rolloutId }).from(rolloutSites)
        .where(sql`${rolloutSites.siteId} IN (SELECT value FROM json_each(${JSON.stringify(siteIds)}))`)),
    )).all();
  if (!touched.length) return;
  const roles = await currentSiteRoles(db, userId, [...new Set(touched.flatMap((r) => r.siteIds as string[]))]);
  const lost = touched.filter((r) => !(r.siteIds as string[]).some((id) => roles.get(id) !== undefined)).map((r) => r.rolloutId);
  for (let i = 0; i < lost.length; i += REVOCATION_FAN_OUT) {
    const batch = lost.slice(i, i + REVOCATION_FAN_OUT);
    const results = await Promise.allSettled(batch.map((rolloutId) => rolloutOrchestrator(env, rolloutId).revokeSubscriber(userId)));
    results.forEach((result, j) => {
      if (result.status === "rejected") console.error(`rollout streams of user ${userId} on rollout ${batch[j]} not updated`, result.reason);
    });
  }
}
