import { z } from "@hono/zod-openapi";
import { CATEGORIES } from "../../shared/vocabulary";

export const AUDIT_TAGS = ["Audit"];

/** A period of time: `start` inclusive, `end` exclusive, both read as instants and kept in UTC. */
export const Period = z
  .object({
    start: z.iso.datetime({ offset: true }).openapi({ description: "Inclusive, ISO 8601 with a time zone", example: "2026-01-01T00:00:00Z" }),
    end: z.iso.datetime({ offset: true }).openapi({ description: "Exclusive, ISO 8601 with a time zone", example: "2026-02-01T00:00:00Z" }),
  })
  .transform((p) => ({ start: new Date(p.start).toISOString(), end: new Date(p.end).toISOString() }))
  .refine((p) => p.start < p.end, { message: "period.start must be before period.end", path: ["end"] })
  .openapi("AuditPeriod");

export const Categories = z.array(z.enum(CATEGORIES)).min(1).max(CATEGORIES.length)
  .openapi({ description: "Only events of these categories; every category when absent" });
