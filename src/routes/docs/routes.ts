import { Hono } from "hono";
import type { AppEnv } from "../../env";

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
<script>window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true, persistAuthorization: true });</script>`,
);

const REDOC = page(
  "Fleet Edge API — ReDoc",
  `<style>body { margin: 0; padding: 0; }</style>`,
  `<redoc spec-url="/openapi.json"></redoc>
<script src="/vendor/redoc/redoc.standalone.js"></script>`,
);

/** Documentation pages; their scripts are served from the Worker's static assets (public/vendor). */
export const docsRoutes = new Hono<AppEnv>();
docsRoutes.get("/docs", (c) => c.html(SWAGGER));
docsRoutes.get("/redoc", (c) => c.html(REDOC));
