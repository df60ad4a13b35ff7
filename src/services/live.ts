import type { Env } from "../env";

export const siteHub = (env: Env, siteId: string) => env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId));

/** Publishes a change to the site's live channel (WebSocket and server-sent events subscribers). */
export async function publishSiteEvent(env: Env, siteId: string, type: string, data: unknown) {
  await siteHub(env, siteId).publish(siteId, type, data);
}
