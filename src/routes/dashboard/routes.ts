import { z } from "@hono/zod-openapi";
import { apiRoute, newRouter } from "../../lib/openapi";
import { notFound } from "../../lib/errors";

/**
 * The screens of the operator dashboard (docs/dashboard.md). `/dashboard/` itself is a static asset
 * (public/dashboard/index.html, built by scripts/build-dashboard.mjs); a screen's own address, opened
 * directly or reloaded, is answered here with that same page, which then draws the screen the path
 * names. Identifiers travel in the query string, so every screen is one path segment deep.
 */
export const DASHBOARD_VIEWS = ["login", "sites", "site", "device", "job", "enrolment", "members", "audit"] as const;

/**
 * The dashboard's Content-Security-Policy, also given to its static files in public/_headers (keep the
 * two alike). Like the documentation pages', it allows scripts, styles and images from this origin only
 * and nothing inline or evaluated. Unlike the API's, it lets the page call the API (`connect-src 'self'`,
 * which covers the site's WebSocket on the same host) and post the sign-in form to itself.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join("; ");

const ViewParams = z.object({
  view: z.string().openapi({ param: { name: "view", in: "path" }, description: `One of ${DASHBOARD_VIEWS.join(", ")}`, example: "site" }),
});

export const dashboardRoutes = newRouter();

dashboardRoutes.openapi(
  apiRoute({
    method: "get", path: "/dashboard/{view}", auth: "none", tags: ["Service"],
    summary: "Operator dashboard screen",
    description: `The dashboard's page (the same as \`/dashboard/\`), for a screen opened by its address: ${DASHBOARD_VIEWS.join(", ")}. Which site, device or job a screen shows is in its query string (\`?site_id=\`, \`?device_id=\`, \`?job_id=\`). Signing in and every datum come from the API with the \`access_token\` cookie. 404 for another name, or when the dashboard was not built (\`npm run build\`).`,
    request: { params: ViewParams },
    responses: { 200: { description: "The dashboard page", content: { "text/html": { schema: z.string() } } } },
    errors: [404],
  }),
  async (c) => {
    const { view } = c.req.valid("param");
    if (!(DASHBOARD_VIEWS as readonly string[]).includes(view)) throw notFound(`The dashboard has no screen '${view}'`);
    const page = await c.env.ASSETS?.fetch(new URL("/dashboard/", c.req.url));
    if (!page || page.status !== 200) throw notFound("The dashboard is not built: run `npm run build`");
    return c.html(await page.text(), 200, { "Content-Security-Policy": DASHBOARD_CSP, "Cache-Control": "no-cache" });
  },
);
