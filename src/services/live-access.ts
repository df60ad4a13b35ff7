import type { Db, Env } from "../env";
import { siteHub } from "../hub/client";
import { currentSiteRoles } from "./access";

/** How many hubs are told at once: a tenant role or an administrator can span many sites. */
const REVOCATION_FAN_OUT = 16;

/**
 * Brings the user's open live subscriptions on these sites in line with what the database says
 * now: closed (4403 "access revoked") where the user no longer has a role, or is deleted or
 * deactivated; the lower role recorded where they still have one. Call it after the change is
 * committed, with every site the change can have touched. A hub that cannot be reached is logged
 * and skipped: the change itself stands.
 */
export async function syncLiveAccess(env: Env, db: Db, userId: number, siteIds: string[]) {
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
}
