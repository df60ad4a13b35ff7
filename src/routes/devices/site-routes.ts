import { z } from "@hono/zod-openapi";
import { apiRoute, jsonResponse, newRouter } from "../../lib/openapi";
import { createBootstrapKey, revokeBootstrapKey, siteStats } from "../../services/devices";
import { SiteParams } from "./schema";

const TAGS = ["Enrolment"];

const BootstrapKey = z
  .object({ site_id: z.string(), bootstrap_key: z.string().openapi({ description: "Shown once; only a bcrypt hash is kept" }), created_at: z.string() })
  .openapi("BootstrapKey");

const SiteStats = z
  .object({
    site_id: z.string(),
    total_devices: z.number().int(),
    by_enrollment_method: z.record(z.string(), z.number().int()).openapi({
      description: "Counts per method: pre-provisioned (enrolment intent), self-enrolled (bootstrap key), provisioned (setup wizard), manual (registered by an operator)",
    }),
  })
  .openapi("SiteStats");

/** Site-level enrolment endpoints under `/api/v1/sites/{site_id}`. */
export const siteEnrolmentRoutes = newRouter();

siteEnrolmentRoutes.openapi(
  apiRoute({
    method: "post", path: "/{site_id}/bootstrap-key", auth: "user", access: { site: "operator" }, tags: TAGS,
    summary: "Create the site's bootstrap key (operator)",
    description: "Devices use it with `POST /api/v1/devices/bootstrap-provision` to enrol themselves. The key is shown once and replaces (revokes) any previous key.",
    request: { params: SiteParams },
    responses: { 201: jsonResponse(BootstrapKey, "The new key") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const { bootstrapKey, createdAt } = await createBootstrapKey(c.env, c.var.db, c.var.user!, site_id, c.req.raw);
    return c.json({ site_id, bootstrap_key: bootstrapKey, created_at: createdAt }, 201);
  },
);

siteEnrolmentRoutes.openapi(
  apiRoute({
    method: "delete", path: "/{site_id}/bootstrap-key", auth: "user", access: { site: "operator" }, tags: TAGS,
    summary: "Revoke the site's bootstrap key (operator)",
    description: "Self-enrolment with the key stops at once; devices already enrolled keep working. 404 when the site has no active key.",
    request: { params: SiteParams },
    responses: { 200: jsonResponse(z.object({ site_id: z.string(), revoked_at: z.string() }), "Revoked") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const revokedAt = await revokeBootstrapKey(c.var.db, c.var.user!, site_id, c.req.raw);
    return c.json({ site_id, revoked_at: revokedAt }, 200);
  },
);

siteEnrolmentRoutes.openapi(
  apiRoute({
    method: "get", path: "/{site_id}/stats", auth: "user", access: { site: "viewer" }, tags: TAGS,
    summary: "Registered devices by enrolment method",
    request: { params: SiteParams },
    responses: { 200: jsonResponse(SiteStats, "Counts") },
    errors: [404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    return c.json(await siteStats(c.var.db, site_id), 200);
  },
);
