import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, newRouter } from "../../lib/openapi";
import { AUDIT_EXPORT_FIELDS, EXPORT_PAGE_ROWS, METADATA_FIELD, auditExport } from "../../services/audit-export";
import type { MountOptions } from "../mount";
import { AUDIT_TAGS, Categories, Period } from "./schemas";

const ExportBody = z
  .object({
    format: z.enum(["json", "ndjson", "csv"]).default("json"),
    period: Period,
    categories: Categories.optional(),
    include_metadata: z.boolean().default(true).openapi({ description: `Whether events carry \`${METADATA_FIELD}\`` }),
    compress: z.boolean().default(false).openapi({ description: "gzip the file (`application/gzip`, name ending `.gz`)" }),
  })
  .openapi("AuditExportRequest");

// The schema of each exported field; a field added to AUDIT_EXPORT_FIELDS without an entry here is
// documented as text or null, which is what the audit columns hold.
const FIELD_SCHEMAS: Record<string, z.ZodType> = {
  id: z.number().int(),
  created_at: z.string(),
  event_type: z.string(),
  category: z.string(),
  severity: z.string(),
  user_id: z.number().int().nullable(),
  [METADATA_FIELD]: z.record(z.string(), z.unknown()).optional().openapi({ description: "Left out when `include_metadata` is false" }),
};

const ExportedEvent = z
  .object(Object.fromEntries(AUDIT_EXPORT_FIELDS.map((f) => [f.name, FIELD_SCHEMAS[f.name] ?? z.string().nullable()])))
  .openapi("AuditExportedEvent");

const file = (description: string) => ({ schema: z.string().openapi({ description }) });

export function auditExportRoutes(mount: MountOptions) {
  const app = newRouter();
  app.openapi(
    apiRoute({
      method: "post", path: "/export", auth: "admin", deprecated: mount.deprecated || undefined, tags: AUDIT_TAGS,
      summary: "Export the audit events of a period (administrators)",
      description: [
        "A file of the events created in `period` (start inclusive, end exclusive), oldest first, sent as an attachment (`Content-Disposition` names it after the period).",
        `Formats: \`json\` (one array), \`ndjson\` (one event per line) or \`csv\` (a header line, then one event per line; the metadata as a JSON text cell). Every format carries the same fields in the same order: ${AUDIT_EXPORT_FIELDS.map((f) => `\`${f.name}\``).join(", ")}.`,
        `The file is streamed from the database ${EXPORT_PAGE_ROWS} events at a time, so a long period costs time, not memory. A CSV cell whose text begins with \`=\`, \`+\`, \`-\`, \`@\`, a tab or a carriage return is prefixed with an apostrophe, so a spreadsheet shows it instead of running it.`,
      ].join("\n\n"),
      request: jsonBody(ExportBody),
      responses: {
        200: {
          description: "The export file",
          content: {
            "application/json": { schema: z.array(ExportedEvent) },
            "application/x-ndjson": file("One AuditExportedEvent as JSON per line"),
            "text/csv": file("A header line of the field names, then one event per line"),
            "application/gzip": { schema: z.string().openapi({ format: "binary", description: "The same file, gzip-compressed, when `compress` is true" }) },
          },
        },
      },
    }),
    async (c) => {
      const body = c.req.valid("json");
      const { body: stream, headers } = auditExport(c.var.db, body.format, {
        start: body.period.start, end: body.period.end, categories: body.categories, includeMetadata: body.include_metadata,
      }, body.compress);
      return c.body(stream, 200, headers);
    },
  );
  return app;
}
