import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedSite } from "../../middleware/access";
import { setSiteTimeZone } from "../../services/sites";
import * as s from "./schema";

const SetTimeZoneBody = z.object({ time_zone: s.TimeZoneSchema.openapi({ example: "Europe/Paris" }) }).openapi("SetSiteTimeZoneRequest");

/** `PUT /api/v1/sites/{site_id}/time-zone`: the store's time zone, which rollout start windows are read in. */
export function siteTimeZoneRoutes() {
  const app = newRouter();
  app.openapi(
    apiRoute({
      method: "put", path: "/{site_id}/time-zone", auth: "user", access: { site: "owner" }, tags: ["Sites"],
      summary: "Set the site's time zone (owner)",
      description: "An IANA time zone name (e.g. `Europe/Paris`, `America/New_York`, `UTC`), checked against the runtime's time zone database; unknown names are 422. Rollout start windows are read in it (docs/rollouts.md); a rollout already created keeps the zone it was planned with. Audited as site_updated.",
      request: { params: s.SiteParams, ...jsonBody(SetTimeZoneBody) },
      responses: { 200: jsonResponse(s.SiteDetail, "The site") },
      errors: [403, 404],
    }),
    async (c) => {
      const site = await setSiteTimeZone(c.var.db, c.var.user!, grantedSite(c).site.siteId, c.req.valid("json").time_zone, c.req.raw);
      return c.json(s.toSiteDetail(site), 200);
    },
  );
  return app;
}
