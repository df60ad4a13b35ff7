import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { authorizeRollout, controlRollout, createRollout, listRollouts, readRollout } from "../../services/rollouts";
import { ROLLOUT_CONTROLS, type RolloutControl } from "../../shared/rollout-contract";
import * as s from "./schema";

const TAGS = ["Rollouts"];

const LIFECYCLE = "`scheduled → running (wave k) → completed | aborted`, and `paused` in between. The rollout's orchestrator starts each site's devices of the current wave as jobs of that site, never more at once than the site's budget (`executing` or `recovering`: changed but not yet back online and healthy), only inside the start window of the site's own time zone. A finished wave soaks before the next starts. The rollout aborts when the current wave's failure rate passes `max_failure_rate` (once `min_executions` have finished) or the failures reach `max_failures`: nothing starts any more, queued executions are cancelled and the rollback (if any) is queued for the devices already changed. Progress is published as `rollout.progress` on each site's live channel. See docs/rollouts.md.";

const AUDIT_EVENT: Record<RolloutControl, string> = { pause: "rollout_paused", resume: "rollout_resumed", abort: "rollout_aborted", promote: "rollout_promoted" };

const CONTROL_DESCRIPTIONS: Record<RolloutControl, string> = {
  pause: "No device starts until resumed; devices already started keep being followed (and can still abort the rollout). Pausing a paused rollout answers it again.",
  resume: "A paused rollout goes on where it stopped; 409 unless paused.",
  abort: "Stops the rollout for good: nothing starts, queued executions are cancelled, the rollback (if any) is queued for changed devices.",
  promote: "Skips the soak of the current wave: the next wave starts as soon as this one has finished (at once if it is soaking).",
};

/** `/api/v1/rollouts`: fleet-wide rollouts across sites. */
export function rolloutRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "post", path: "/", auth: "user", tags: TAGS,
      summary: "Create a fleet-wide rollout (operator on every targeted site, or tenant owner)",
      description: `Targets \`site_ids\` (operator role on every one) or every active site of \`tenant_id\` (tenant owner), optionally narrowed by \`device_filter\`; access is checked before anything happens. Every field but \`name\`, a target and \`action\` has a default, shown on the field and in \`settings\` of the answer. With an \`Idempotency-Key\`, a repeat by the same user with the same body creates nothing and answers the same rollout (header \`Idempotent-Replayed: true\`); with a different body, 422. ${LIFECYCLE}`,
      request: { headers: s.RolloutIdempotencyHeaders, ...jsonBody(s.CreateRolloutBody) },
      responses: {
        201: { ...jsonResponse(s.RolloutDetail, "Created; its orchestrator has started it (or will, once the start window opens)"), headers: s.RolloutCreatedHeaders },
      },
      errors: [403, 404],
    }),
    async (c) => {
      const { rollout, created } = await createRollout(c.env, c.var.db, c.var.user!, c.req.valid("json"), c.req.valid("header")["idempotency-key"], c.req.raw);
      if (!created) c.header("Idempotent-Replayed", "true");
      const { row, progress } = await readRollout(c.env, rollout);
      return c.json(s.toRolloutDetail(row, progress), 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/", auth: "user", tags: TAGS,
      summary: "List rollouts, newest first",
      description: "Rollouts touching a site the caller has a role on (administrators: all), optionally of one `status`; paged with `limit` (default 50, max 500) and `offset`, with `total`. The status here is the one last recorded; read a rollout for its live figures.",
      request: { query: s.RolloutListQuery },
      responses: { 200: jsonResponse(s.RolloutList, "Rollouts") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const { rows, total } = await listRollouts(c.var.db, c.var.user!, q);
      return c.json({ rollouts: rows.map(s.toRollout), total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{rollout_id}", auth: "user", tags: TAGS,
      summary: "A rollout with its live progress per wave and per site",
      description: `Any role on one of its sites; otherwise 404, as for an unknown id. \`progress\` counts devices as pending, running (executing or recovering), succeeded, failed and skipped, for the whole rollout, each wave and each site (with its budget and the most devices it ever had in flight). ${LIFECYCLE}`,
      request: { params: s.RolloutParams },
      responses: { 200: jsonResponse(s.RolloutDetail, "The rollout") },
      errors: [404],
    }),
    async (c) => {
      const row = await authorizeRollout(c.var.db, c.var.user!, c.req.valid("param").rollout_id, "viewer");
      const { progress } = await readRollout(c.env, row);
      return c.json(s.toRolloutDetail(row, progress), 200);
    },
  );

  for (const kind of ROLLOUT_CONTROLS) {
    app.openapi(
      apiRoute({
        method: "post", path: `/{rollout_id}/${kind}`, auth: "user", tags: TAGS,
        summary: `${kind[0].toUpperCase()}${kind.slice(1)} a rollout (operator on every site of it, or tenant owner)`,
        description: `${CONTROL_DESCRIPTIONS[kind]} Audited as ${AUDIT_EVENT[kind]} on each of its sites. A finished rollout (completed or aborted) answers 409. A caller with a role on some of its sites but not operator on all is refused with 403; one with none gets 404.`,
        request: { params: s.RolloutParams },
        responses: { 200: jsonResponse(s.RolloutDetail, "The rollout after the change") },
        errors: [403, 404, 409],
      }),
      async (c) => {
        const row = await authorizeRollout(c.var.db, c.var.user!, c.req.valid("param").rollout_id, "operator");
        const { row: after, progress } = await controlRollout(c.env, c.var.db, c.var.user!, row, kind);
        return c.json(s.toRolloutDetail(after, progress), 200);
      },
    );
  }

  return app;
}
