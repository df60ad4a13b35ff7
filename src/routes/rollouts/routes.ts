import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { z } from "@hono/zod-openapi";
import { unprocessable } from "../../lib/errors";
import { authorizeRollout, controlRollout, createRollout, listRollouts, readRollout, rolloutEvents } from "../../services/rollouts";
import {
  ROLLOUT_CONTROLS, ROLLOUT_EVENTS_KEEPALIVE_MS, ROLLOUT_EVENTS_RETRY_MS, type RolloutControl,
} from "../../shared/rollout-contract";
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

const EVENTS_EXAMPLE = "retry: 3000\n\nid: 7\ndata: {\"rollout_id\":\"rol-3f9a1c0b7d2e\",\"status\":\"running\",\"current_wave\":1,\"wave_count\":3,\"abort_reason\":null,\"soak_until\":null,\"started_at\":\"2026-01-01T12:00:00.000Z\",\"finished_at\":null,\"counts\":{\"total\":20,\"pending\":18,\"running\":2,\"succeeded\":0,\"failed\":0,\"skipped\":0},\"waves\":[…],\"sites\":[…]}\n\n";

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

  app.openapi(
    apiRoute({
      method: "get", path: "/{rollout_id}/events", auth: "user", tags: TAGS,
      summary: "A rollout's progress as server-sent events",
      description: [
        "`text/event-stream` of the rollout's progress, served by its orchestrator: first a snapshot, then one on every change it makes. Each is `id: <n>` (the rollout's own event sequence, growing) and `data: <progress JSON>` — the `progress` object of `GET /api/v1/rollouts/{rollout_id}` — with no `event:` field, so `EventSource.onmessage` receives them all.",
        `Reconnecting (EventSource sends \`Last-Event-ID\`) starts again with a fresh snapshot: each frame is the whole progress, so nothing in between is needed. The stream opens with \`retry: ${ROLLOUT_EVENTS_RETRY_MS}\`; a comment line every ${ROLLOUT_EVENTS_KEEPALIVE_MS / 1000} s keeps it open.`,
        "When the rollout finishes (completed or aborted) the final snapshot is sent and the stream ends; a reconnect whose `Last-Event-ID` is that final snapshot's id answers 204, which stops EventSource. A finished rollout's stream sends its final snapshot and ends.",
        "Access as for `GET /api/v1/rollouts/{rollout_id}` (a role on one of its sites, else 404). An open stream ends (after a `: access revoked` comment) when its user loses every role on the rollout's sites, or is deactivated or deleted; the reconnect then answers 404 (401). See docs/rollouts.md.",
      ].join("\n\n"),
      request: { params: s.RolloutParams },
      responses: {
        200: { description: "The progress stream", content: { "text/event-stream": { schema: z.string().openapi({ example: EVENTS_EXAMPLE }) } } },
        204: { description: "The rollout is finished and the client already has its final snapshot (`Last-Event-ID`)" },
      },
      errors: [404],
    }),
    async (c) => {
      const header = c.req.header("Last-Event-ID")?.trim();
      if (header && !/^\d{1,15}$/.test(header)) {
        throw unprocessable([{ loc: ["header", "Last-Event-ID"], msg: "Last-Event-ID must be a non-negative integer (an event id of this stream)", type: "value_error" }]);
      }
      const row = await authorizeRollout(c.var.db, c.var.user!, c.req.valid("param").rollout_id, "viewer");
      return rolloutEvents(c.env, c.var.user!, row, header ? Number(header) : undefined);
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
