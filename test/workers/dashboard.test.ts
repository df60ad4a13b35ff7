import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { createApp } from "../../src/app";
import { checkResponse } from "./response-contract";
import { describe, expect, it } from "vitest";
import { readConfig } from "../../src/shared/config";
import { oidcSettings } from "../../src/services/oidc";
import { DASHBOARD_CSP } from "../../src/routes/dashboard/routes";
import { call, fetchChecked, signup } from "./helpers";

const OIDC = { OIDC_ISSUER: "https://id.example.com", OIDC_CLIENT_ID: "fleet", OIDC_CLIENT_SECRET: "s3cret" };

// The dashboard's page and files are static assets built by `npm run build` (scripts/build-dashboard.mjs).

describe("the operator dashboard's entry points", () => {
  it("sends a browser opening / to the dashboard, and keeps the JSON banner for API clients", async () => {
    // Not followed here: the Worker alone (without its static assets in front) has no /dashboard/.
    const browser = await fetchChecked(new Request("http://fleet.test/", {
      headers: { Accept: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8" }, redirect: "manual",
    }));
    expect(browser.status).toBe(302);
    expect(browser.headers.get("Location")).toBe("/dashboard/");

    for (const accept of [undefined, "*/*", "application/json"]) {
      const client = await call("/", { headers: accept ? { Accept: accept } : {} });
      expect(client.status, String(accept)).toBe(200);
      expect(client.json.docs, String(accept)).toBe("/docs");
    }
  });

  it("answers a screen's own address with the dashboard page under the dashboard's policy", async () => {
    const shell = await env.ASSETS!.fetch("http://fleet.test/dashboard/");
    expect(shell.status).toBe(200);
    const page = await shell.text();
    // The static page carries the same policy (public/_headers) as the Worker's answer.
    expect(shell.headers.get("Content-Security-Policy")).toBe(DASHBOARD_CSP);

    for (const view of ["login", "sites", "site", "device", "job", "enrolment", "members", "audit"]) {
      const res = await call(`/dashboard/${view}?site_id=S-1`);
      expect(res.status, view).toBe(200);
      expect(res.headers.get("Content-Type"), view).toMatch(/^text\/html/);
      expect(res.headers.get("Content-Security-Policy"), view).toBe(DASHBOARD_CSP);
      expect(res.text, view).toBe(page);
    }
    // Scripts only from a file of this origin: nothing inline, nothing from elsewhere.
    expect(page).toMatch(/<script type="module" src="\/dashboard\/app\.js"><\/script>/);
    expect(page).not.toMatch(/<script>|<script [^>]*>[^<]+<\/script>|(src|href)="https?:/);
    expect(DASHBOARD_CSP).toContain("script-src 'self'");
    expect(DASHBOARD_CSP).not.toContain("unsafe");
  });

  it("answers 404 for a screen it does not have", async () => {
    const res = await call("/dashboard/settings");
    expect(res.status).toBe(404);
    expect(res.json.detail).toMatch(/no screen 'settings'/);
  });
});

describe("sign-in methods and sign-out", () => {
  it("offers password sign-in, and OpenID Connect only once it is configured", async () => {
    expect((await call("/api/v1/auth/methods")).json).toEqual({ password: true, oidc: false, oidc_login_url: null });

    const ctx = createExecutionContext();
    const request = new Request("http://fleet.test/api/v1/auth/methods");
    const configured = await createApp().request(request, {}, { ...env, ...OIDC }, ctx);
    await waitOnExecutionContext(ctx);
    await checkResponse(request, configured.clone());
    expect(await configured.json()).toEqual({ password: true, oidc: true, oidc_login_url: "/api/v1/auth/login?redirect=1" });
  });

  it("clears the session cookie, and refuses to from a page of another origin", async () => {
    const user = await signup();
    const login = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    expect(login.headers.get("Set-Cookie")).toMatch(/^access_token=[^;]+;/);

    const foreign = await call("/api/v1/auth/logout", { method: "POST", headers: { Origin: "https://evil.example" } });
    expect(foreign.status).toBe(403);
    expect(foreign.headers.get("Set-Cookie")).toBeNull();

    const out = await call("/api/v1/auth/logout", { method: "POST", headers: { Origin: "http://fleet.test" } });
    expect(out.status).toBe(204);
    expect(out.headers.get("Set-Cookie")).toMatch(/^access_token=;.*Max-Age=0.*Path=\//i);
  });
});

describe("OpenID Connect without FRONTEND_URL", () => {
  it("returns the browser to this service's dashboard", () => {
    const config = readConfig({ ...env, ...OIDC });
    expect(oidcSettings({ ...config, jwt: config.jwt! }, "https://fleet.example.com/api/v1/auth/login").afterLoginUrl).toBe("https://fleet.example.com/dashboard/");
  });
});
