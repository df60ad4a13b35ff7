import type { Env } from "../env";
import { siteHub } from "../hub/client";

/** Publishes a change to the site's live channel (WebSocket and server-sent events subscribers). */
export async function publishSiteEvent(env: Env, siteId: string, type: string, data: unknown) {
  await siteHub(env, siteId).publish(type, data);
}
