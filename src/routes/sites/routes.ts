import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { createSite, listSites } from "../../services/sites";
import { siteHealth } from "../../services/devices";
import * as s from "./schema";
import type { MountOptions } from "../mount";
import { grantedSite } from "../../middleware/access";

const TAGS = ["Sites"];

/** The site resource: `/api/v1/sites` and the deprecated `/sites`. */
export function siteRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  const listRoute = (path: string) =>
    apiRoute({
      method: "get",
      path,
      auth: "user",
      deprecated,
      tags: TAGS,
      summary: "List the sites the caller can access",
      description: "Administrators see every site; other users the sites granted to them directly or through a tenant. Newest first.",
      responses: { 200: jsonResponse(s.SiteList, "Sites") },
    });
  const createRoute = (path: string) =>
    apiRoute({
      method: "post",
      path,
      auth: "user",
      deprecated,
      tags: TAGS,
      summary: "Create a site",
      description: "Any authenticated user may create a site and becomes its owner. A `site_id` is generated when absent; a duplicate is 409.",
      request: jsonBody(s.CreateSiteBody),
      responses: { 201: jsonResponse(s.CreateSiteResponse, "Site created") },
      errors: [403, 404, 409],
    });

  // `/api/v1/sites/sites` is declared before `/{site_id}` so it is never read as a site id.
  const listPaths = mount.deprecated ? ["/"] : ["/sites", "/"];
  for (const path of listPaths) {
    app.openapi(listRoute(path), async (c) => {
      const rows = await listSites(c.var.db, c.var.user!);
      return c.json({ sites: rows.map(s.toSiteListItem) }, 200);
    });
    app.openapi(createRoute(path), async (c) => {
      const body = c.req.valid("json");
      const site = await createSite(c.var.db, c.var.user!, body, c.req.raw);
      return c.json({ message: "Site created successfully", site_id: site.siteId, name: site.name }, 201);
    });
  }

  app.openapi(
    apiRoute({
      method: "get",
      path: "/{site_id}",
      auth: "user", access: { site: "viewer" },
      deprecated,
      tags: TAGS,
      summary: "Site detail",
      request: { params: s.SiteParams },
      responses: { 200: jsonResponse(s.SiteDetail, "The site") },
      errors: [404],
    }),
    async (c) => {
      const { site } = grantedSite(c);
      return c.json(s.toSiteDetail(site), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/{site_id}/health",
      auth: "user", access: { site: "viewer" },
      deprecated,
      tags: TAGS,
      summary: "Site health",
      description: "Device counts by live status and the device list with last_seen, served by the site's hub from its own copy of the site's devices with live presence laid over it (no database read per request).",
      request: { params: s.SiteParams },
      responses: { 200: jsonResponse(s.SiteHealth, "Site health") },
      errors: [404],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      return c.json(await siteHealth(c.env, site_id), 200);
    },
  );

  return app;
}

