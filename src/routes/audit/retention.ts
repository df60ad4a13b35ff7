import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import {
  ARCHIVE_MAX_OBJECTS_PER_RUN, ARCHIVE_OBJECT_MAX_EVENTS, AUDIT_DELETE_BATCH_ROWS, AUDIT_DELETE_MAX_BATCHES, RETENTION_MAX_DAYS,
  archiveKeyState, getRetentionPolicy, listArchives, readArchive, setRetentionPolicy,
} from "../../services/audit-retention";
import type { MountOptions } from "../mount";
import { AUDIT_TAGS } from "./schemas";

const days = (what: string) => z.number().int().min(1).max(RETENTION_MAX_DAYS).openapi({ description: what });

const PolicyBody = z
  .object({
    retention_days: days("Events older than this many days are deleted"),
    archive_after_days: days("Events older than this many days are archived to R2 first; null: no archives (events are deleted unarchived)").nullable(),
    compress_archives: z.boolean().default(true).openapi({ description: "gzip each archive object" }),
    encryption_required: z.boolean().default(false).openapi({ description: "Encrypt each archive object with AES-256-GCM; refused (422) unless the AUDIT_ARCHIVE_KEY secret holds a key" }),
  })
  .openapi("AuditRetentionPolicyRequest");

export const RetentionPolicySchema = z
  .object({
    retention_days: z.number().int(),
    archive_after_days: z.number().int().nullable(),
    compress_archives: z.boolean(),
    encryption_required: z.boolean(),
    updated_by: z.number().int().nullable(),
    updated_at: z.string(),
  })
  .openapi("AuditRetentionPolicy");

export const PolicyView = z
  .object({
    policy: RetentionPolicySchema.nullable().openapi({ description: "null until an administrator sets one: until then nothing is archived or deleted" }),
    encryption_key: z.enum(["configured", "missing", "invalid"]).openapi({ description: "Whether AUDIT_ARCHIVE_KEY holds a usable key (the key itself is never shown)" }),
  })
  .openapi("AuditRetention");

const Archive = z
  .object({
    archive_id: z.string().openapi({ example: "2026-01-31-10234.ndjson.gz" }),
    day: z.string().openapi({ description: "The UTC day of every event in the archive" }),
    first_event_id: z.number().int(),
    last_event_id: z.number().int(),
    events: z.number().int(),
    bytes: z.number().int().openapi({ description: "Size as stored (after compression and encryption)" }),
    compressed: z.boolean(),
    encrypted: z.boolean(),
    created_at: z.string(),
  })
  .openapi("AuditArchive");

const ArchivesQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  offset: z.coerce.number().int().min(0).default(0),
  day: z.iso.date().optional().openapi({ description: "Only the archives of this UTC day (YYYY-MM-DD)" }),
});

const ArchiveParams = z.object({
  archive_id: z.string().max(80).regex(/^\d{4}-\d{2}-\d{2}-\d+\.ndjson(\.gz)?(\.enc)?$/, "an archive id as listed").openapi({ param: { name: "archive_id", in: "path" } }),
});

const POLICY_RULES = `The minute cron archives events older than \`archive_after_days\` to the AUDIT_ARCHIVE bucket as NDJSON, one object per UTC day and at most ${ARCHIVE_OBJECT_MAX_EVENTS} events (${ARCHIVE_MAX_OBJECTS_PER_RUN} objects per run), then deletes events older than \`retention_days\` (at most ${AUDIT_DELETE_BATCH_ROWS * AUDIT_DELETE_MAX_BATCHES} per run); while archiving is on, an event is deleted only once it is archived. See docs/audit-retention.md.`;

export function auditRetentionRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/retention", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "The audit retention policy (administrators)",
      description: POLICY_RULES,
      responses: { 200: jsonResponse(PolicyView, "The policy") },
    }),
    async (c) => c.json({ policy: await getRetentionPolicy(c.var.db), encryption_key: archiveKeyState(c.env) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/retention", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "Set the audit retention policy (administrators)",
      description: `${POLICY_RULES}\n\nThe change is audited as \`config_updated\` with the previous and the new policy. 422, and nothing changes, when \`archive_after_days\` exceeds \`retention_days\`, or \`encryption_required\` is asked without archiving or without a usable AUDIT_ARCHIVE_KEY.`,
      request: jsonBody(PolicyBody),
      responses: { 200: jsonResponse(PolicyView, "The policy now in force") },
    }),
    async (c) => {
      const policy = await setRetentionPolicy(c.var.db, c.env, c.var.user!, c.req.valid("json"), c.req.raw);
      return c.json({ policy, encryption_key: archiveKeyState(c.env) }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/archives", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "Audit archives written by the retention run (administrators)",
      description: "Newest day first.",
      request: { query: ArchivesQuery },
      responses: {
        200: jsonResponse(z.object({ archives: z.array(Archive), total: z.number().int(), limit: z.number().int(), offset: z.number().int() }).openapi("AuditArchivePage"), "A page of archives"),
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const page = await listArchives(c.var.db, q);
      return c.json({ ...page, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/archives/{archive_id}", auth: "admin", deprecated, tags: AUDIT_TAGS,
      summary: "Download an audit archive (administrators)",
      description: "The archive's NDJSON (one exported event per line, the fields of `POST /audit/export`), gzip-compressed when the archive is. An encrypted archive is decrypted with AUDIT_ARCHIVE_KEY; 409 when that key is missing or is not the one the archive was written with.",
      request: { params: ArchiveParams },
      responses: {
        200: {
          description: "The archive",
          content: {
            "application/x-ndjson": { schema: z.string() },
            "application/gzip": { schema: z.string().openapi({ format: "binary" }) },
          },
        },
      },
      errors: [404, 409],
    }),
    async (c) => {
      const { archive_id } = c.req.valid("param");
      const archive = await readArchive(c.env, c.var.db, archive_id);
      return c.body(archive.body, 200, {
        "Content-Type": archive.contentType,
        "Content-Disposition": `attachment; filename="${archive.fileName}"`,
        "Cache-Control": "no-store",
      });
    },
  );

  return app;
}
