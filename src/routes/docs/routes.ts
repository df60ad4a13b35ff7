import { z } from "@hono/zod-openapi";
import { apiRoute, newRouter } from "../../lib/openapi";

const page = (title: string, head: string, body: string) => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title>
${head}
</head>
<body>
${body}
</body>
</html>`;

const SWAGGER = page(
  "Fleet Edge API — Swagger UI",
  `<link rel="stylesheet" href="/vendor/swagger-ui/swagger-ui.css"><link rel="icon" href="/vendor/swagger-ui/favicon-32x32.png">`,
  `<div id="swagger-ui"></div>
<script src="/vendor/swagger-ui/swagger-ui-bundle.js"></script>
<script src="/docs-ui/swagger-ui-init.js"></script>`,
);

const REDOC = page(
  "Fleet Edge API — ReDoc",
  `<link rel="stylesheet" href="/docs-ui/redoc.css"><link rel="icon" href="/vendor/swagger-ui/favicon-32x32.png">`,
  `<redoc spec-url="/openapi.json"></redoc>
<script src="/vendor/redoc/redoc.standalone.js"></script>`,
);

/**
 * The documentation pages' Content-Security-Policy: scripts, styles, fonts and data only from this
 * origin (the bundles are served from public/vendor, the start-up code from public/docs-ui), nothing
 * inline or evaluated, no framing, no form posts. `extra` loosens one directive for one page.
 *
 * ReDoc 2.x always draws a "by Redocly" logo fetched from cdn.redoc.ly (no option turns it off); since
 * images may come only from this origin or data: URIs, the browser refuses that one request and
 * ReDoc hides the logo. ReDoc styles itself with styled-components, which writes <style> elements at
 * run time, and runs its search index in a worker made from a blob: URL.
 */
const docsPolicy = (extra: Record<string, string> = {}) =>
  Object.entries({
    "default-src": "'none'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
    "form-action": "'none'",
    ...extra,
  }).map(([directive, sources]) => `${directive} ${sources}`).join("; ");

export const SWAGGER_UI_CSP = docsPolicy();
export const REDOC_CSP = docsPolicy({ "style-src": "'self' 'unsafe-inline'", "worker-src": "blob:" });

type Document = { paths?: Record<string, Record<string, { operationId?: string } & Record<string, unknown>>> };

const METHODS = new Set(["get", "put", "post", "delete", "patch", "head", "options", "trace"]);

/** Gives every operation a stable, unique operationId (`get_api_v1_sites_site_id`) for client generators. */
export function withOperationIds<D extends object>(document: D): D {
  for (const [path, item] of Object.entries((document as Document).paths ?? {})) {
    for (const [method, operation] of Object.entries(item)) {
      if (!METHODS.has(method) || operation.operationId) continue;
      const slug = path.replace(/[{}]/g, "").replace(/[^A-Za-z0-9]+/g, "_").replace(/^_|_$/g, "");
      operation.operationId = `${method}_${slug || "root"}`;
    }
  }
  return document;
}

const html = (description: string) => ({ description, content: { "text/html": { schema: z.string() } } });

/**
 * The documentation: `/openapi.json` generated from the route declarations, Swagger UI at `/docs`
 * and ReDoc at `/redoc`, whose scripts are served from the Worker's static assets (public/vendor),
 * so they work without internet access.
 */
export function docsRoutes(buildDocument: () => object) {
  const app = newRouter();
  let cached: object | undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/openapi.json", auth: "none", tags: ["Service"], summary: "This OpenAPI 3.1 document",
      responses: { 200: { description: "The document", content: { "application/json": { schema: z.record(z.string(), z.unknown()) } } } },
    }),
    (c) => {
      cached ??= withOperationIds(buildDocument());
      return c.json(cached as Record<string, unknown>, 200);
    },
  );
  app.openapi(
    apiRoute({ method: "get", path: "/docs", auth: "none", tags: ["Service"], summary: "Interactive API documentation (Swagger UI)", responses: { 200: html("Swagger UI") } }),
    (c) => c.html(SWAGGER, 200, { "Content-Security-Policy": SWAGGER_UI_CSP }),
  );
  app.openapi(
    apiRoute({ method: "get", path: "/redoc", auth: "none", tags: ["Service"], summary: "API reference (ReDoc)", responses: { 200: html("ReDoc") } }),
    (c) => c.html(REDOC, 200, { "Content-Security-Policy": REDOC_CSP }),
  );
  return app;
}
