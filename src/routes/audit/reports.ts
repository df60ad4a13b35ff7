import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { currentDate } from "../../lib/clock";
import { REPORT_TOP_N, REPORT_TYPES, REPORT_TYPE_DESCRIPTIONS, auditReport, auditReportCsv } from "../../services/audit-reports";
import type { MountOptions } from "../mount";
import { AUDIT_TAGS, Categories, Period } from "./schemas";

const ReportBody = z
  .object({
    report_type: z.enum(REPORT_TYPES).default("summary"),
    period: Period,
    categories: Categories.optional(),
    format: z.enum(["json", "csv"]).default("json"),
  })
  .openapi("AuditReportRequest");

const Counts = z.record(z.string(), z.number().int());

const Report = z
  .object({
    report_type: z.enum(REPORT_TYPES),
    period: z.object({ start: z.string(), end: z.string() }),
    categories: z.array(z.string()).nullable().openapi({ description: "The categories asked for, or null for all" }),
    generated_at: z.string(),
    total_events: z.number().int(),
    by_category: Counts,
    by_severity: Counts,
    by_event_type: Counts,
    top_actors: z.array(z.object({ user_id: z.number().int(), email: z.string().nullable(), events: z.number().int() }))
      .openapi({ description: `The ${REPORT_TOP_N} users named by most events (email null for a deleted user)` }),
    top_devices: z.array(z.object({ device_id: z.string(), site_id: z.string().nullable(), events: z.number().int() }))
      .openapi({ description: `The ${REPORT_TOP_N} devices named by most events` }),
    top_ip_addresses: z.array(z.object({ ip_address: z.string(), events: z.number().int() }))
      .openapi({ description: `The ${REPORT_TOP_N} client addresses behind most events` }),
    daily: z.array(z.object({ day: z.string().openapi({ example: "2026-01-31" }), events: z.number().int() }))
      .openapi({ description: "Events per UTC day, days without events left out" }),
  })
  .openapi("AuditReport");

export function auditReportRoutes(mount: MountOptions) {
  const app = newRouter();
  app.openapi(
    apiRoute({
      method: "post", path: "/reports", auth: "admin", deprecated: mount.deprecated || undefined, tags: AUDIT_TAGS,
      summary: "A report on the audit events of a period (administrators)",
      description: [
        "Counts by category, severity and event type, the top users, devices and client addresses, and events per day, over `period` (start inclusive, end exclusive) and `categories`. Each report type counts:",
        ...REPORT_TYPES.map((t) => `- \`${t}\`: ${REPORT_TYPE_DESCRIPTIONS[t]}`),
        "`format: csv` gives the same figures as lines of `section,key,detail,events` (sections `total`, `category`, `severity`, `event_type`, `top_actor` with the e-mail as detail, `top_device` with the site, `top_ip_address`, `day`). See docs/audit-retention.md.",
      ].join("\n"),
      request: jsonBody(ReportBody),
      responses: {
        200: {
          ...jsonResponse(Report, "The report"),
          content: {
            ...jsonResponse(Report, "The report").content,
            "text/csv": { schema: z.string().openapi({ description: "The same figures, one per line" }) },
          },
        },
      },
    }),
    async (c) => {
      const body = c.req.valid("json");
      const figures = await auditReport(c.var.db, { reportType: body.report_type, start: body.period.start, end: body.period.end, categories: body.categories });
      if (body.format === "csv") {
        return c.body(auditReportCsv(figures), 200, {
          "Content-Type": "text/csv; charset=utf-8",
          "Content-Disposition": `attachment; filename="audit-report-${body.report_type}.csv"`,
        });
      }
      return c.json({
        report_type: body.report_type, period: body.period, categories: body.categories ?? null, generated_at: currentDate().toISOString(), ...figures,
      }, 200);
    },
  );
  return app;
}
