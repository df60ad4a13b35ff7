import { createApp } from "./app";
import type { Env } from "./env";
import { runScheduled } from "./scheduled";

export { SiteHub } from "../durable-objects/site-hub";
export { CredentialGuard } from "../durable-objects/credential-guard";

const app = createApp();

export default {
  fetch: app.fetch,
  scheduled(controller, env, ctx) {
    ctx.waitUntil(runScheduled(env, new Date(controller.scheduledTime)));
  },
} satisfies ExportedHandler<Env>;
