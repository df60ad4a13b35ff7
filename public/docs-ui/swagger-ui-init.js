// Starts Swagger UI on /docs. It lives in a file because the page's Content-Security-Policy runs
// scripts from this origin only, never inline ones.
// No `persistAuthorization`: it would keep the bearer token in localStorage, where it outlives the tab
// and any script running on this origin can read it. Authorize again after a reload.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
});
