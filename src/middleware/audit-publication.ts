import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { nudgeAuditStream } from "../hub/audit-stream";

const READS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * After a request that may have written audit rows, nudges the AuditStream object (after the
 * response, in waitUntil) so they are sealed and published within moments. That is every change
 * and every refusal (refusals are audited: permission_denied, login_failed, unauthorized_access).
 * A device's successful calls are left out: what they audit is written by its site's hub, which
 * nudges after its own flush. A nudge too many costs one tail that finds nothing; a missing one is
 * made up by the minute cron.
 */
export const auditPublication = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  const refused = c.res.status >= 400;
  const deviceCall = c.var.device !== undefined || c.var.deviceCredential !== undefined;
  if (refused || (!READS.has(c.req.method) && !deviceCall)) c.executionCtx.waitUntil(nudgeAuditStream(c.env));
});
