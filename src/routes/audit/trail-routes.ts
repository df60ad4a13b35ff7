import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { forbidden, unprocessable } from "../../lib/errors";
import { authorizeSite } from "../../services/access";
import { VERIFY_MAX_ROWS, verifyChain } from "../../services/audit-verify";
import { auditStream } from "../../hub/audit-stream";
import { AUDIT_STREAM_KEEPALIVE_MS } from "../../shared/audit-stream-contract";
import { CATEGORIES, SEVERITIES } from "../../shared/vocabulary";
import type { MountOptions } from "../mount";

const TAGS = ["Audit"];

const StreamQuery = z.object({
  since: z.coerce.number().int().min(0).optional().openapi({ description: "Resume after this event id (wins over the Last-Event-ID header)" }),
  category: z.enum(CATEGORIES).optional(),
  severity: z.enum(SEVERITIES).optional(),
  event_type: lineText().max(64).optional(),
  site_id: lineText().max(64).optional().openapi({ description: "Only this site's events; required for users who are not administrators (viewer role on the site)" }),
});

const VerifyQuery = z.object({
  site_id: lineText().max(64).optional().openapi({ description: "The site whose chain to walk; without it, the service-wide chain (events that name no site)" }),
  after_id: z.coerce.number().int().min(0).default(0).openapi({ description: "Continue a walk after this id (`next_after_id` of the previous one)" }),
});

const Verification = z
  .object({
    site_id: z.string().nullable(),
    ok: z.boolean().openapi({ description: "No broken link among the rows walked" }),
    checked: z.number().int(),
    sealed: z.number().int(),
    unsealed: z.number().int().openapi({ description: "Rows at the chain's end not sealed yet (sealing follows within seconds)" }),
    first_unsealed_id: z.number().int().nullable(),
    broken_at: z.object({
      id: z.number().int(),
      reason: z.enum(["hash_mismatch", "prev_hash_mismatch", "seal_missing"]).openapi({
        description: "`hash_mismatch`: the row was changed after it was sealed; `prev_hash_mismatch`: the row before it in the chain was removed or reordered; `seal_missing`: the row's hash was removed (later rows are sealed)",
      }),
    }).nullable(),
    anchor: z.object({ id: z.number().int(), prev_hash: z.string() }).nullable().openapi({
      description: "The first row walked and the prev_hash taken on trust: 64 zeros when the walk starts at the chain's beginning; otherwise earlier rows were pruned by retention or walked before (`after_id`)",
    }),
    next_after_id: z.number().int().nullable().openapi({ description: `Set when the walk stopped after ${VERIFY_MAX_ROWS} rows: pass it as \`after_id\` to continue` }),
  })
  .openapi("AuditChainVerification");

const STREAM_EXAMPLE = "id: 1042\ndata: {\"id\":1042,\"event_type\":\"login_failed\",\"category\":\"security_events\",\"severity\":\"warning\",\"description\":\"Failed login for a@example.com\",\"user_id\":7,\"job_id\":null,\"device_id\":null,\"site_id\":null,\"event_metadata\":{\"email\":\"a@example.com\"},\"ip_address\":\"198.51.100.4\",\"user_agent\":\"curl/8\",\"session_id\":null,\"created_at\":\"2026-01-01T12:00:00.000Z\",\"timestamp\":\"2026-01-01T12:00:00.000Z\",\"prev_hash\":\"…\",\"hash\":\"…\"}\n\n";

/** The live audit stream and the hash-chain verification (docs/audit.md). */
export function auditTrailRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/events/stream", auth: "user", deprecated, tags: TAGS,
      summary: "Live audit events (server-sent events)",
      description: [
        "Audit events as they are recorded, as `text/event-stream`: each is `id: <event id>` and `data: <AuditEvent JSON>` (the `AuditEvent` schema; no `event:` field, so `EventSource.onmessage` receives them all), in id order, each once it is sealed into its hash chain (within seconds of being recorded).",
        "Resumes after the `Last-Event-ID` header (EventSource sends it on reconnect) or `?since=`, without gap or duplicate: recent events come from memory, older ones from storage. A resume that would replay more than 5000 events sends those and ends the stream; reconnecting continues from the last id.",
        `Filters: category, severity, event_type, site_id. Administrators may watch every site; any other user must name a \`site_id\` on which they have the viewer role (403 otherwise). A comment line every ${AUDIT_STREAM_KEEPALIVE_MS / 1000} s keeps the connection open.`,
      ].join("\n\n"),
      request: { query: StreamQuery },
      responses: {
        200: { description: "The event stream", content: { "text/event-stream": { schema: z.string().openapi({ example: STREAM_EXAMPLE }) } } },
      },
      errors: [403, 404],
    }),
    async (c) => {
      const query = c.req.valid("query");
      const user = c.var.user!;
      const header = c.req.header("Last-Event-ID")?.trim();
      if (header && !/^\d{1,15}$/.test(header)) {
        throw unprocessable([{ loc: ["header", "Last-Event-ID"], msg: "Last-Event-ID must be a non-negative integer (an event id)", type: "value_error" }]);
      }
      if (!user.isAdmin) {
        if (!query.site_id) throw forbidden("Only administrators may watch every site; name a site_id you can view");
        await authorizeSite(c.var.db, user, query.site_id, "viewer", c.req.raw, { outsider: "forbidden" });
      }
      return auditStream(c.env).subscribe({ ...query, user_id: user.id, since: query.since ?? (header ? Number(header) : undefined) });
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/verify", auth: "admin", deprecated, tags: TAGS,
      summary: "Verify an audit hash chain",
      description: `Walks one chain — a site's, or the service-wide chain of events that name no site — in id order, recomputing each sealed event's hash, and reports the first broken link. Rows at the end not sealed yet are counted, not failed. Walks at most ${VERIFY_MAX_ROWS} rows per call (continue with \`after_id\`). See docs/audit.md for what the chain does and does not prove.`,
      request: { query: VerifyQuery },
      responses: { 200: jsonResponse(Verification, "The verification") },
    }),
    async (c) => {
      const { site_id, after_id } = c.req.valid("query");
      return c.json(await verifyChain(c.var.db, site_id ?? null, after_id), 200);
    },
  );

  return app;
}
