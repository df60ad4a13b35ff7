// End-to-end: the BUILT bundle (dist/, from `npm run build`) served by workerd through Miniflare
// (scripts/lib/serve-bundle.mjs), exercised over real HTTP like a client would. `npm test` builds first;
// run alone with `npm run test:e2e`.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";

let service: RunningService;
let base: string;

beforeAll(async () => {
  // Throws "The built bundle .../dist/index.js does not exist. Run `npm run build` first" without a build.
  service = await startService({ quiet: true });
  base = service.url;
});

afterAll(async () => {
  await service?.stop();
});

const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

async function json(response: Response): Promise<any> {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`Expected JSON from ${response.url} (${response.status}), got: ${text.slice(0, 200)}`);
  }
}

function postJson(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

describe("service status over HTTP", () => {
  it("GET / answers the banner with the version and where the docs are", async () => {
    const response = await fetch(`${base}/`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/application\/json/);
    expect(response.headers.get("x-request-id")).toBeTruthy();
    const body = await json(response);
    expect(body.message).toMatch(/Fleet Edge/);
    expect(body.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(body.docs).toBe("/docs");
  });

  it("GET /api/v1/auth/login answers 503 naming the missing variables while OpenID Connect is not configured", async () => {
    const response = await fetch(`${base}/api/v1/auth/login`);
    expect(response.status).toBe(503);
    expect(await json(response)).toEqual({ detail: expect.stringMatching(/OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET/) });
  });

  it("GET /health answers healthy", async () => {
    const response = await fetch(`${base}/health`);
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(body.status).toBe("healthy");
  });

  it("an unknown route answers 404 {detail: Not Found}", async () => {
    const response = await fetch(`${base}/no/such/route-${unique("x")}`);
    expect(response.status).toBe(404);
    expect(await json(response)).toEqual({ detail: "Not Found" });
  });

  it("malformed JSON answers 400 and a wrong type 422, never 5xx", async () => {
    const malformed = await fetch(`${base}/api/v1/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(malformed.status).toBe(400);
    expect(typeof (await json(malformed)).detail).toBe("string");

    const wrongType = await postJson("/api/v1/auth/login", { email: 42, password: true });
    expect(wrongType.status).toBe(422);
    const detail = (await json(wrongType)).detail;
    expect(Array.isArray(detail)).toBe(true);
    expect(detail[0]).toHaveProperty("loc");
  });
});

describe("accounts over HTTP", () => {
  it("signup → login → the access_token cookie alone authenticates GET /api/v1/auth/me", async () => {
    const email = `${unique("e2e")}@example.com`;
    const password = "e2e-pass-123";

    const signup = await postJson("/api/v1/auth/signup", { email, password, role: "Admin" });
    expect(signup.status).toBe(201);
    const signupBody = await json(signup);
    expect(signupBody.success).toBe(true);
    expect(typeof signupBody.data.access_token).toBe("string");

    const login = await postJson("/api/v1/auth/login", { email, password });
    expect(login.status).toBe(200);
    const loginBody = await json(login);
    expect(loginBody.data.is_admin).toBe(false); // signup's role never grants admin
    const setCookie = login.headers.get("set-cookie") ?? "";
    expect(setCookie).toMatch(/access_token=/);
    expect(setCookie).toMatch(/HttpOnly/i);
    const token = /access_token=([^;]+)/.exec(setCookie)![1];

    const me = await fetch(`${base}/api/v1/auth/me`, { headers: { cookie: `access_token=${token}` } });
    expect(me.status).toBe(200);
    const meBody = await json(me);
    expect(meBody.data).toMatchObject({ email, is_admin: false });

    const anonymous = await fetch(`${base}/api/v1/auth/me`);
    expect(anonymous.status).toBe(401);
    expect(typeof (await json(anonymous)).detail).toBe("string");
  });

  it("a wrong password answers 401 and sets no cookie", async () => {
    const email = `${unique("e2e")}@example.com`;
    expect((await postJson("/api/v1/auth/signup", { email, password: "right-pass" })).status).toBe(201);
    const login = await postJson("/api/v1/auth/login", { email, password: "wrong-pass" });
    expect(login.status).toBe(401);
    expect(login.headers.get("set-cookie")).toBeNull();
  });
});

describe("documentation over HTTP, without the internet", () => {
  it("GET /openapi.json is an OpenAPI 3.1 document listing the auth routes", async () => {
    const response = await fetch(`${base}/openapi.json`);
    expect(response.status).toBe(200);
    const doc = await json(response);
    expect(doc.openapi).toMatch(/^3\.1\./);
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(["/api/v1/auth/signup", "/api/v1/auth/login", "/api/v1/auth/me"]));
  });

  for (const [page, asset] of [
    ["/docs", "/vendor/swagger-ui/swagger-ui-bundle.js"],
    ["/redoc", "/vendor/redoc/redoc.standalone.js"],
  ] as const) {
    it(`GET ${page} is HTML whose script ${asset} is served by the Worker's assets`, async () => {
      const response = await fetch(`${base}${page}`);
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toMatch(/text\/html/);
      const html = await response.text();
      expect(html).toContain(`src="${asset}"`);
      // ReDoc names the document in its element; Swagger UI in its start-up script (below).
      if (page === "/redoc") expect(html).toContain("/openapi.json");
      // No reference to any other host: the page must render offline.
      expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);

      const script = await fetch(`${base}${asset}`);
      expect(script.status).toBe(200);
      expect(script.headers.get("content-type")).toMatch(/javascript/);
      const code = await script.text();
      expect(code.length).toBeGreaterThan(100_000);
      // Static assets are answered before the Worker runs; public/_headers gives them the security headers.
      expect(script.headers.get("x-content-type-options")).toBe("nosniff");
      expect(script.headers.get("x-frame-options")).toBe("DENY");
      expect(script.headers.get("referrer-policy")).toBe("no-referrer");
    });
  }

  it("Swagger UI starts from a static script (the page's policy forbids inline code), without persistAuthorization", async () => {
    const html = await (await fetch(`${base}/docs`)).text();
    expect(html).toContain('<script src="/docs-ui/swagger-ui-init.js"></script>');
    const init = await fetch(`${base}/docs-ui/swagger-ui-init.js`);
    expect(init.status).toBe(200);
    expect(init.headers.get("content-type")).toMatch(/javascript/);
    expect(init.headers.get("x-content-type-options")).toBe("nosniff");
    const code = await init.text();
    expect(code).toContain("SwaggerUIBundle(");
    expect(code).toContain('url: "/openapi.json"');
    expect(code).not.toMatch(/persistAuthorization\s*:\s*true/);
    // The rules file itself is configuration, never served.
    expect((await fetch(`${base}/_headers`)).status).toBe(404);
  });

  it("the Swagger UI stylesheet is served too", async () => {
    const html = await (await fetch(`${base}/docs`)).text();
    expect(html).toContain('href="/vendor/swagger-ui/swagger-ui.css"');
    const css = await fetch(`${base}/vendor/swagger-ui/swagger-ui.css`);
    expect(css.status).toBe(200);
    expect(css.headers.get("content-type")).toMatch(/text\/css/);
  });
});
