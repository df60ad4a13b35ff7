import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { nudgeAuditStream } from "../hub/audit-stream";

const READS = new Set(["GET", "HEAD", "OPTIONS"]);
/** Refusals that change nothing, by the service's rule for bad input, so they record no audit row either. */
const CHANGES_NOTHING = new Set([400, 405, 413, 415, 422, 429]);

/**
 * After a request that may have written audit rows, nudges the AuditStream object (after the
 * response, in waitUntil) so they are sealed and published within moments. That is every change
 * and every refusal that may be audited (permission_denied, login_failed, unauthorized_access);
 * bad input (400, 413, 415, 422) and throttling (429) change nothing and are left out.
 * A device's successful calls are left out: what they audit is written by its site's hub, which
 * nudges after its own flush. A nudge too many costs one tail that finds nothing; a missing one is
 * made up by the minute cron.
 */
export const auditPublication = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  if (CHANGES_NOTHING.has(c.res.status)) return;
  const refused = c.res.status >= 400;
  const deviceCall = c.var.device !== undefined || c.var.deviceCredential !== undefined;
  if (refused || (!READS.has(c.req.method) && !deviceCall)) c.executionCtx.waitUntil(nudgeAuditStream(c.env));
});
