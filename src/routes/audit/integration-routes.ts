import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { createIntegration, deleteIntegration, listIntegrations, testIntegrations } from "../../services/audit-integrations";
import { DELIVERY_MAX_TRIES } from "../../shared/alert-contract";
import { CATEGORIES, SEVERITIES } from "../../shared/vocabulary";
import type { MountOptions } from "../mount";

const TAGS = ["Audit"];

const CreateBody = z
  .object({
    type: z.enum(["syslog", "webhook"]),
    destination: lineText().min(1).max(2048).openapi({
      description: "syslog: `tcp://host:port` or `tls://host:port`; webhook: an https:// URL. The same destination rules as alert webhooks (public hosts only; docs/audit.md, \"Destinations\")",
      example: "tls://syslog.example.com:6514",
    }),
    format: z.enum(["rfc5424", "json"]).optional().openapi({
      description: "syslog only: `rfc5424` (default) sends RFC 5424 messages with octet-counted framing (RFC 6587); `json` sends one AuditEvent JSON per line. Webhooks always get JSON",
    }),
    filter: z.object({
      severities: z.array(z.enum(SEVERITIES)).min(1).optional(),
      categories: z.array(z.enum(CATEGORIES)).min(1).optional(),
    }).optional().openapi({ description: "Forward only events of these severities and categories (default: all)" }),
  })
  .openapi("AuditIntegrationCreate");

const Integration = z
  .object({
    integration_id: z.string(),
    type: z.enum(["syslog", "webhook"]),
    destination: z.string(),
    format: z.enum(["rfc5424", "json"]),
    filter: z.object({ severities: z.array(z.string()).nullable(), categories: z.array(z.string()).nullable() }),
    created_at: z.string(),
    last_delivery: z.object({
      outcome: z.enum(["delivered", "retrying", "failed"]), attempt: z.number().int(), error: z.string().nullable(), created_at: z.string(),
    }).nullable().openapi({ description: "The latest try of a forward, or null before the first" }),
  })
  .openapi("AuditIntegration");

const Created = Integration.extend({
  webhook_secret: z.string().nullable().openapi({ description: "webhook type: the signing secret, shown only here (X-Fleet-Signature as for alert webhooks)" }),
}).openapi("AuditIntegrationCreated");

const TestResult = z
  .object({
    results: z.array(z.object({
      integration_id: z.string(),
      type: z.enum(["syslog", "webhook"]),
      destination: z.string(),
      passes_filter: z.boolean().openapi({ description: "Whether the integration's filter would forward the test event (it is sent regardless)" }),
      delivered: z.boolean(),
      http_status: z.number().int().nullable(),
      error: z.string().nullable(),
    })),
  })
  .openapi("AuditIntegrationTest");

/** Integrations: forwarding audit events to syslog collectors and webhooks (docs/audit.md, "Integrations"). */
export function auditIntegrationRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "post", path: "/integrations", auth: "admin", deprecated, tags: TAGS,
      summary: "Forward audit events to a syslog collector or a webhook",
      description: `From now on every published audit event that passes the filter is forwarded, in batches as they are published (a webhook gets \`{type: "audit.events", integration_id, events: [AuditEvent…]}\`, signed like alert webhooks), with up to ${DELIVERY_MAX_TRIES} tries over about an hour. Recorded as \`config_updated\`.`,
      request: jsonBody(CreateBody),
      responses: { 201: jsonResponse(Created, "The integration") },
    }),
    async (c) => {
      const { integration, webhookSecret } = await createIntegration(c.var.db, c.env, c.var.user!, c.req.valid("json"), c.req.raw);
      return c.json({ ...integration, webhook_secret: webhookSecret ?? null }, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/integrations", auth: "admin", deprecated, tags: TAGS,
      summary: "List integrations",
      responses: { 200: jsonResponse(z.object({ integrations: z.array(Integration) }).openapi("AuditIntegrationList"), "The integrations, oldest first") },
    }),
    async (c) => c.json({ integrations: await listIntegrations(c.var.db) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "delete", path: "/integrations/{integration_id}", auth: "admin", deprecated, tags: TAGS,
      summary: "Delete an integration",
      description: "Stops forwarding; forwards still waiting for a try are dropped. Recorded as `config_updated`.",
      request: { params: z.object({ integration_id: lineText().max(64) }) },
      responses: { 200: jsonResponse(z.object({ deleted: z.literal(true), integration_id: z.string() }).openapi("AuditIntegrationDeleted"), "Deleted") },
      errors: [404],
    }),
    async (c) => {
      const { integration_id } = c.req.valid("param");
      await deleteIntegration(c.var.db, c.env, c.var.user!, integration_id, c.req.raw);
      return c.json({ deleted: true as const, integration_id }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/test", auth: "admin", deprecated, tags: TAGS,
      summary: "Send a test event through every integration",
      description: "Sends one `integration_test` event (not stored in the trail) to every integration now, once (no retry), and reports each result.",
      responses: { 200: jsonResponse(TestResult, "One result per integration") },
    }),
    async (c) => c.json({ results: await testIntegrations(c.var.db, c.env, c.var.user!) }, 200),
  );

  return app;
}
