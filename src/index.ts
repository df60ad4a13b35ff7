import { createApp } from "./app";
import type { Env } from "./env";
import { runScheduled } from "./scheduled";

export { SiteHub } from "../durable-objects/site-hub";
export { CredentialGuard } from "../durable-objects/credential-guard";
export { RolloutOrchestrator } from "../durable-objects/rollout-orchestrator";
export { AuditStream } from "../durable-objects/audit-stream";

const app = createApp();

export default {
  fetch: app.fetch,
  // Awaited rather than handed to waitUntil: the runtime waits for either, and whoever runs the
  // handler by hand (wrangler dev's /__scheduled under `npm start`) is answered once the work is done.
  async scheduled(controller, env, _ctx) {
    await runScheduled(env, new Date(controller.scheduledTime));
  },
} satisfies ExportedHandler<Env>;
