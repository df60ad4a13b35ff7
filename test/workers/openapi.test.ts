import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import pkg from "../../package.json";
import { call, signup } from "./helpers";
import { registerDevice, siteWithOperator } from "./device-helpers";

type Operation = {
  summary?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  deprecated?: boolean;
  parameters?: { name: string; in: string }[];
  requestBody?: unknown;
  responses: Record<string, { content?: Record<string, { schema?: unknown }> }>;
};
type Doc = { openapi: string; info: { version: string }; paths: Record<string, Record<string, Operation>>; components: { securitySchemes: Record<string, unknown> } };

const METHODS = ["get", "post", "put", "patch", "delete"];
// The documentation pages are documented operations too.
const DOC_PAGES = new Set<string>();

// Auth matrix: the only operations that may go without credentials.
const UNAUTHENTICATED = [
  "GET /", "GET /health", "GET /status", "GET /version", "GET /docs", "GET /redoc", "GET /openapi.json",
  "GET /api/v1/health/status", "GET /api/v1/health/system-pulse",
  "POST /api/v1/auth/signup", "POST /api/v1/auth/login", "GET /api/v1/auth/login", "GET /api/v1/auth/callback",
  // A browser reports its own crashes before or after sign-in.
  "POST /api/v1/analytics/error",
  // The dashboard: its screens, the sign-in choices they show and sign-out (which only clears the cookie).
  "GET /dashboard/{view}", "GET /api/v1/auth/methods", "POST /api/v1/auth/logout",
];
const UNAUTHENTICATED_PATTERNS = [/^POST \/.*\/claim$/, /^POST \/(api\/v1\/)?devices\/bootstrap-provision$/];
const mayBeAnonymous = (op: string) => UNAUTHENTICATED.includes(op) || UNAUTHENTICATED_PATTERNS.some((re) => re.test(op));

const SERVICE_ROOT = new Set(["/", "/health", "/status", "/version", "/docs", "/redoc", "/openapi.json", "/dashboard/{view}"]);
// Path forms: device-side paths of the replaced service that keep answering under /api/v1.
const V1_COMPATIBILITY = [
  /^\/api\/v1\/agent\/(device-dna|heartbeat|telemetry)$/,
  /^\/api\/v1\/devices\/\{[^}]+\}\/commands\/\{[^}]+\}\/ack$/,
  /^\/api\/v1\/devices\/\{[^}]+\}\/status$/,
  /^\/api\/v1\/devices\/bootstrap-provision$/,
];

/** Hono's `/a/:id{[0-9]+}/b/` → OpenAPI's `/a/{id}/b`. */
const normalise = (path: string) => {
  const p = path.replace(/:(\w+)(\{[^}]*\})?/g, "{$1}");
  return p.length > 1 ? p.replace(/\/+$/, "") : p;
};

let doc: Doc;
const operations = () =>
  Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).filter(([m]) => METHODS.includes(m)).map(([method, op]) => ({ key: `${method.toUpperCase()} ${path}`, method, path, op })));

beforeAll(async () => {
  const res = await call("/openapi.json");
  expect(res.status).toBe(200);
  doc = res.json;
});

describe("OpenAPI document", () => {
  it("is OpenAPI 3.1 with the service version and the security schemes", () => {
    expect(doc.openapi).toMatch(/^3\.1\./);
    expect(doc.info.version).toBe(pkg.version);
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(["bearerAuth", "cookieAuth", "deviceApiKey", "deviceId"]);
  });

  it("lists every implemented route, and nothing that is not implemented", () => {
    const registered = new Set(
      createApp().routes
        .filter((r) => r.method !== "ALL")
        .map((r) => `${r.method} ${normalise(r.path)}`)
        .filter((key) => !DOC_PAGES.has(key)),
    );
    const documented = new Set(operations().map((o) => `${o.method.toUpperCase()} ${normalise(o.path)}`));
    const undocumented = [...registered].filter((k) => !documented.has(k)).sort();
    const phantom = [...documented].filter((k) => !registered.has(k)).sort();
    expect(undocumented, "routes missing from /openapi.json").toEqual([]);
    expect(phantom, "documented operations without a route").toEqual([]);
    // sanity: the comparison really covers the API
    for (const key of ["GET /api/v1/sites/sites", "GET /sites/{site_id}", "POST /api/v1/auth/login", "GET /audit/events", "POST /api/v1/health/stress-test"]) {
      expect(registered.has(key), key).toBe(true);
    }
  });

  it("declares security on every operation that needs credentials, and only the auth matrix's exceptions go without", () => {
    for (const { key, op } of operations()) {
      const secured = (op.security ?? []).length > 0;
      if (!secured) {
        expect(mayBeAnonymous(key), `${key} declares no security`).toBe(true);
        continue;
      }
      const schemes = op.security!.flatMap((s) => Object.keys(s)).sort();
      const user = schemes.join() === "bearerAuth,cookieAuth";
      const device = schemes.join() === "deviceApiKey,deviceId" && op.security!.length === 1;
      // Reports the device itself or an operator may send: either credential, as alternatives.
      const userOrDevice = schemes.join() === "bearerAuth,cookieAuth,deviceApiKey,deviceId" && op.security!.length === 3;
      expect(user || device || userOrDevice, `${key} security ${JSON.stringify(op.security)}`).toBe(true);
      expect(op.responses["401"], `${key} lacks a 401 response`).toBeDefined();
    }
  });

  it("answers 401 to anonymous calls on every operation that declares security", async () => {
    const secured = operations().filter((o) => (o.op.security ?? []).length > 0);
    expect(secured.length).toBeGreaterThan(20);
    for (const { key, method, path } of secured) {
      const concrete = path.replace(/\{[^}]+\}/g, "1");
      const res = await call(concrete, { method: method.toUpperCase(), body: ["post", "put", "patch"].includes(method) ? {} : undefined });
      expect(res.status, key).toBe(401);
      expect(res.json, key).toEqual({ detail: expect.any(String) });
    }
  });

  it("refuses a signed-in outsider on every operation naming a site, device, job or command, before it reads the body", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const job = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "restart" } });
    expect(job.status).toBe(201);
    const command = await call(`/api/v1/devices/${device.device_id}/commands`, { method: "POST", token: owner.token, body: { command_type: "ping" } });
    expect(command.status).toBe(201);
    const ids: Record<string, string> = {
      site_id: siteId, device_id: device.device_id, job_id: job.json.job_id, command_id: command.json.command_id,
      user_id: String(owner.id), intent_id: "00000000-0000-4000-8000-000000000000",
      invitation_id: "00000000-0000-4000-8000-000000000000", ticket_id: "0".repeat(64),
    };
    const outsider = await signup();
    const guarded = operations().filter((o) => (o.op.security ?? []).some((s) => "bearerAuth" in s) && /\{(site_id|device_id|job_id|command_id)\}/.test(o.path));
    expect(guarded.length).toBeGreaterThan(25);
    for (const { key, method, path } of guarded) {
      const concrete = path.replace(/\{(\w+)\}/g, (_, name: string) => ids[name] ?? "1");
      // A body the route would refuse: the refusal must not depend on it (no 422 before access is known).
      const res = await call(concrete, { method: method.toUpperCase(), token: outsider.token, body: ["post", "put", "patch"].includes(method) ? { junk: [1] } : undefined });
      expect([403, 404], `${key} answered ${res.status} ${res.text}`).toContain(res.status);
      expect(res.json, key).toEqual({ detail: expect.any(String) });
    }
  });

  // Calls every operation two or four times: its time grows with the API and with the machine's load.
  it("never answers 5xx to a signed-in user sending junk to any operation", async () => {
    const user = await signup();
    const bodies = [{}, { site_id: 5, name: ["x"], email: {}, role: null, limit: "x" }];
    for (const { key, method, path } of operations()) {
      for (const id of ["1", "x".repeat(80)]) {
        const concrete = path.replace(/\{[^}]+\}/g, id) + "?limit=-1&since=x&duration=x";
        for (const body of ["post", "put", "patch"].includes(method) ? bodies : [undefined]) {
          const res = await call(concrete, { method: method.toUpperCase(), token: user.token, body });
          // 501: the disabled role endpoint; 503: OpenID Connect login, and the Web Push key, before they are configured
          const designed = (res.status === 501 && key.endsWith("/role"))
            || (res.status === 503 && ["GET /api/v1/auth/login", "GET /api/v1/auth/callback", "GET /api/v1/push/vapid-public-key"].includes(key));
          if (!designed) expect(res.status, `${key} ${id.slice(0, 10)} ${JSON.stringify(body)}`).toBeLessThan(500);
        }
      }
    }
  // Some 500 calls (every operation, two ids, two bodies): room for a loaded machine.
  }, 120_000);

  it("documents responses, parameters, errors and tags for every operation", () => {
    for (const { key, path, op } of operations()) {
      expect(op.summary, `${key} summary`).toBeTruthy();
      expect(op.tags?.length, `${key} tags`).toBeGreaterThan(0);
      const codes = Object.keys(op.responses);
      // (PUT …/role is disabled by the specification: its one answer is 501)
      expect(codes.some((c) => /^[23]\d\d$/.test(c) || c === "501"), `${key} has no success response`).toBe(true);
      for (const code of codes.filter((c) => /^[45]\d\d$/.test(c))) {
        expect(op.responses[code].content?.["application/json"], `${key} ${code} body`).toBeDefined();
      }
      for (const [, name] of path.matchAll(/\{([^}]+)\}/g)) {
        expect(op.parameters?.some((p) => p.in === "path" && p.name === name), `${key} path parameter ${name}`).toBe(true);
        expect(op.responses["422"], `${key} validates ${name}`).toBeDefined();
      }
      if (op.requestBody) {
        for (const code of ["400", "413", "422"]) expect(op.responses[code], `${key} ${code}`).toBeDefined();
      }
    }
  });

  it("marks unversioned paths deprecated, and versioned ones only when they are compatibility forms of the replaced service", () => {
    for (const { key, path, op } of operations()) {
      const unversioned = !path.startsWith("/api/") && !SERVICE_ROOT.has(path);
      if (unversioned) expect(op.deprecated, key).toBe(true);
      else if (op.deprecated) expect(V1_COMPATIBILITY.some((re) => re.test(path)), `${key} is deprecated`).toBe(true);
    }
  });
});

describe("documentation pages", () => {
  it("serve Swagger UI and ReDoc from local assets", async () => {
    const pages = [
      ["/docs", ["/vendor/swagger-ui/swagger-ui-bundle.js", "/vendor/swagger-ui/swagger-ui.css"], "/docs-ui/swagger-ui-init.js"],
      ["/redoc", ["/vendor/redoc/redoc.standalone.js"], "/docs-ui/redoc.css"],
    ] as const;
    for (const [path, bundles, own] of pages) {
      const res = await call(path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("Content-Type"), path).toMatch(/text\/html/);
      expect(res.text, path).not.toMatch(/(src|href)="https?:/);
      for (const asset of bundles) {
        expect(res.text).toContain(asset);
        const file = await env.ASSETS!.fetch(`http://fleet.test${asset}`);
        expect(file.status, asset).toBe(200);
        expect((await file.arrayBuffer()).byteLength, asset).toBeGreaterThan(1000);
      }
      // The page's own start-up script or stylesheet (a file: the page's policy forbids inline code).
      expect(res.text).toContain(own);
      const file = await env.ASSETS!.fetch(`http://fleet.test${own}`);
      expect(file.status, own).toBe(200);
      // ReDoc names the document in its element, Swagger UI in its start-up script.
      expect(res.text + (await file.text()), path).toContain("/openapi.json");
    }
  });
});
