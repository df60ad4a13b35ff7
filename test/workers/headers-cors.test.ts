import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { Hono } from "hono";
import { createApp } from "../../src/app";
import type { AppEnv } from "../../src/env";
import { cors } from "../../src/middleware/cors";
import { requestContext } from "../../src/middleware/request-context";
import { securityHeaders } from "../../src/middleware/security-headers";
import { readConfig } from "../../src/shared/config";
import { call, createSite, signup } from "./helpers";
import { openStream } from "./live-helpers";
import { heartbeat, registerDevice } from "./device-helpers";

const LISTED = "https://console.example.com";
const OTHER_LISTED = "http://localhost:5173";
const UNLISTED = "https://evil.example.net";

/** Serves one request with some variables overridden (e.g. CORS_ORIGINS), as a deployment would set them. */
async function send(path: string, init: RequestInit = {}, vars: Partial<typeof env> = {}) {
  const ctx = createExecutionContext();
  const res = await createApp().request(path, init, { ...env, ...vars }, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

// The test pool lists one origin for the live channel tests; "by default" means the variable unset.
const withoutCors = { CORS_ORIGINS: undefined };
const withCors = { CORS_ORIGINS: ` ${LISTED}, ${OTHER_LISTED}/ ,` };

describe("security headers", () => {
  it("are on every answer: success, 401, 404, 422 and the misconfigured 503", async () => {
    const answers = [
      await call("/health"),
      await call("/openapi.json"),
      await call("/api/v1/auth/me"),
      await call("/no/such/route"),
      await call("/api/v1/auth/login", { method: "POST", body: { email: 1 } }),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 200, 401, 404, 422]);
    const misconfigured = await send("/health", {}, { JWT_SECRET: "short" });
    expect(misconfigured.status).toBe(503);
    for (const headers of [...answers.map((a) => a.headers), misconfigured.headers]) {
      expect(headers.get("X-Content-Type-Options")).toBe("nosniff");
      expect(headers.get("X-Frame-Options")).toBe("DENY");
      expect(headers.get("Referrer-Policy")).toBe("no-referrer");
      expect(headers.get("Content-Security-Policy")).toBe("default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    }
  });

  it("the documentation pages run only this origin's scripts, nothing inline, and cannot be framed", async () => {
    for (const page of ["/docs", "/redoc"]) {
      const res = await call(page);
      expect(res.status).toBe(200);
      const policy = Object.fromEntries(
        res.headers.get("Content-Security-Policy")!.split(";").map((d) => d.trim().split(/\s+/)).map(([name, ...sources]) => [name, sources]),
      );
      expect(policy["default-src"], page).toEqual(["'none'"]);
      expect(policy["script-src"], page).toEqual(["'self'"]);
      expect(policy["connect-src"], page).toEqual(["'self'"]);
      expect(policy["img-src"], page).toEqual(["'self'", "data:"]);
      expect(policy["frame-ancestors"], page).toEqual(["'none'"]);
      expect(policy["base-uri"], page).toEqual(["'none'"]);
      expect(res.headers.get("X-Frame-Options")).toBe("DENY");
      // Every <script> names its file; no inline code, no inline event handler.
      expect(res.text.match(/<script\b[^>]*>/g)?.every((tag) => /\bsrc="\/[^/]/.test(tag)), page).toBe(true);
      expect(res.text, page).not.toMatch(/<script\b[^>]*>(?!<\/script>)/);
      expect(res.text, page).not.toMatch(/\son[a-z]+=/i);
      expect(res.text, page).not.toMatch(/persistAuthorization/);
    }
    // Only ReDoc needs inline styles (styled-components writes <style> at run time); Swagger UI needs none.
    expect((await call("/docs")).headers.get("Content-Security-Policy")).toContain("style-src 'self';");
  });
});

describe("CORS", () => {
  it("parses CORS_ORIGINS as exact origins: trimmed, trailing slash dropped, `null` refused, default none", () => {
    expect(readConfig({ CORS_ORIGINS: ` ${LISTED}, ${OTHER_LISTED}/ ,, null ,${LISTED}` }).corsOrigins).toEqual([LISTED, OTHER_LISTED]);
    expect(readConfig({}).corsOrigins).toEqual([]);
    expect(readConfig({ CORS_ORIGINS: "" }).corsOrigins).toEqual([]);
  });

  it("by default no origin gets access: no CORS header, and a preflight is refused with 403", async () => {
    const res = await send("/health", { headers: { Origin: LISTED } }, withoutCors);
    expect(res.status).toBe(200);
    expect(res.headers.get("Access-Control-Allow-Origin")).toBeNull();
    expect(res.headers.get("Access-Control-Allow-Credentials")).toBeNull();
    expect(res.headers.get("Vary")).toMatch(/Origin/);

    const preflight = await send("/api/v1/auth/me", {
      method: "OPTIONS", headers: { Origin: LISTED, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization" },
    }, withoutCors);
    expect(preflight.status).toBe(403);
    expect(await preflight.json()).toEqual({ detail: `Cross-origin requests from ${LISTED} are not allowed` });
    expect(preflight.headers.get("Access-Control-Allow-Origin")).toBeNull();
    expect(preflight.headers.get("Access-Control-Allow-Methods")).toBeNull();
  });

  it("a listed origin's preflight is answered 204 with credentials, methods, headers and a cache time", async () => {
    for (const origin of [LISTED, OTHER_LISTED]) {
      const res = await send("/api/v1/sites/sites", {
        method: "OPTIONS", headers: { Origin: origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type" },
      }, withCors);
      expect(res.status, origin).toBe(204);
      expect(res.headers.get("Access-Control-Allow-Origin")).toBe(origin);
      expect(res.headers.get("Access-Control-Allow-Credentials")).toBe("true");
      expect(res.headers.get("Access-Control-Allow-Methods")).toContain("POST");
      expect(res.headers.get("Access-Control-Allow-Headers")).toMatch(/Authorization.*Content-Type/);
      expect(res.headers.get("Access-Control-Max-Age")).toBe("600");
      expect(res.headers.get("X-Content-Type-Options")).toBe("nosniff");
    }
  });

  it("a listed origin reads answers with the cookie; an unlisted one, or a prefix of a listed one, gets nothing", async () => {
    const user = await signup();
    const siteId = await createSite(user.token);
    const listed = await send(`/api/v1/sites/${siteId}`, { headers: { Origin: LISTED, Cookie: `access_token=${user.token}` } }, withCors);
    expect(listed.status).toBe(200);
    expect(listed.headers.get("Access-Control-Allow-Origin")).toBe(LISTED);
    expect(listed.headers.get("Access-Control-Allow-Credentials")).toBe("true");
    expect(listed.headers.get("Access-Control-Expose-Headers")).toContain("X-Request-Id");
    expect(listed.headers.get("Vary")).toMatch(/Origin/);

    // Errors are readable by the listed page too.
    expect((await send("/api/v1/auth/me", { headers: { Origin: LISTED } }, withCors)).headers.get("Access-Control-Allow-Origin")).toBe(LISTED);

    for (const origin of [UNLISTED, `${LISTED}.evil.net`, "https://console.example.co", "null"]) {
      const res = await send(`/api/v1/sites/${siteId}`, { headers: { Origin: origin, Authorization: `Bearer ${user.token}` } }, withCors);
      expect(res.headers.get("Access-Control-Allow-Origin"), origin).toBeNull();
      expect(res.headers.get("Access-Control-Allow-Credentials"), origin).toBeNull();
      const preflight = await send(`/api/v1/sites/${siteId}`, { method: "OPTIONS", headers: { Origin: origin, "Access-Control-Request-Method": "GET" } }, withCors);
      expect(preflight.status, origin).toBe(403);
    }
  });
});

describe("headers added after the handler", () => {
  // Each copy of an answer leaves a Headers object that workerd frees only after the next garbage
  // collection, all at once; copying the answer once per header made those clean-ups the service's
  // latency tail (README, "Site reads").
  it("are set on the handler's own answer, not on copies of it", async () => {
    let handlers: Response | undefined;
    const app = new Hono<AppEnv>();
    app.use("*", securityHeaders, cors, requestContext);
    app.get("/answer", (c) => (handlers = c.json({ ok: true })));
    const ctx = createExecutionContext();
    const res = await app.request("/answer", { headers: { Origin: LISTED } }, { ...env, ...withCors }, ctx);
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(200);
    expect(res).toBe(handlers);
    expect(res.headers.get("Content-Security-Policy")).toBe("default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    expect(res.headers.get("X-Request-Id")).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers.get("Access-Control-Allow-Origin")).toBe(LISTED);
    expect(res.headers.get("Vary")).toBe("Origin");
    expect(await res.json()).toEqual({ ok: true });
  });

  it("reach a stream relayed from the site's hub, whose headers arrive unchangeable, and the stream still flows", async () => {
    const user = await signup();
    const siteId = await createSite(user.token);
    const opened = await openStream(`/api/v1/sites/${siteId}/events`, { token: user.token, headers: { Origin: "https://console.example.com", "X-Request-Id": "relay-check-1" } });
    expect(opened.status).toBe(200);
    expect(opened.headers.get("Content-Type")).toMatch(/^text\/event-stream/);
    expect(opened.headers.get("X-Content-Type-Options")).toBe("nosniff");
    expect(opened.headers.get("Content-Security-Policy")).toBe("default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    expect(opened.headers.get("X-Request-Id")).toBe("relay-check-1");
    expect(opened.headers.get("Access-Control-Allow-Origin")).toBe("https://console.example.com");
    const device = await registerDevice(user.token, siteId);
    await heartbeat(device.device_id, device.api_key);
    await opened.stream!.until(() => opened.stream!.messages().some((m) => m.type === "device.status"), "the device going online, on the stream");
    await opened.stream!.close();
  });
});
