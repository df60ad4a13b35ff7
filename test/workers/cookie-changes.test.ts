// A change made with the session cookie must come from a page allowed to use it; reads and bearer
// tokens are not affected (docs/security.md, "Cookie authentication and the Origin header").
import { describe, expect, it } from "vitest";
import { call, signup, unique } from "./helpers";

const LISTED = "https://console.example.com"; // CORS_ORIGINS of the test pool
const OWN = "http://fleet.test";

describe("changes authenticated by the cookie", () => {
  const createSite = (headers: Record<string, string>, auth: { cookie?: string; token?: string }) => {
    const siteId = unique("CSRF-");
    return call("/api/v1/sites/sites", { method: "POST", ...auth, headers, body: { site_id: siteId, name: "Form target" } }).then((res) => ({ res, siteId }));
  };
  const siteExists = async (token: string, siteId: string) => (await call(`/api/v1/sites/${siteId}`, { token })).status === 200;

  it("are refused (403) from another origin, a sibling subdomain or a page the browser says another site opened, and change nothing", async () => {
    const user = await signup();
    const cookie = `access_token=${user.token}`;
    const refusals: Record<string, string>[] = [
      { Origin: "https://evil.example.net" },
      { Origin: "http://evil.fleet.test" },
      { Origin: "null" },
      { "Sec-Fetch-Site": "same-site" },
      { "Sec-Fetch-Site": "cross-site" },
    ];
    for (const headers of refusals) {
      const { res, siteId } = await createSite(headers, { cookie });
      expect(res.status, JSON.stringify(headers)).toBe(403);
      expect(res.json.detail).toMatch(/Cookie authentication is not accepted from this origin/);
      expect(await siteExists(user.token, siteId), JSON.stringify(headers)).toBe(false);
    }
    // A change without a body too, the kind a plain form can send.
    const { siteId } = await createSite({}, { token: user.token });
    const ticket = await call(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", cookie, headers: { Origin: "https://evil.example.net" } });
    expect(ticket.status).toBe(403);
    expect((await call(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", cookie, headers: { Origin: OWN } })).status).toBe(201);
  });

  it("are accepted from the service's own origin, a listed one, or a client that sends no Origin", async () => {
    const user = await signup();
    const cookie = `access_token=${user.token}`;
    const allowed: Record<string, string>[] = [{ Origin: OWN }, { Origin: LISTED }, {}, { "Sec-Fetch-Site": "same-origin" }];
    for (const headers of allowed) {
      const { res, siteId } = await createSite(headers, { cookie });
      expect(res.status, JSON.stringify(headers)).toBe(201);
      expect(await siteExists(user.token, siteId)).toBe(true);
    }
  });

  it("do not touch reads or bearer tokens: a foreign Origin reads with the cookie and changes with a token", async () => {
    const user = await signup();
    const { siteId } = await createSite({}, { token: user.token });
    expect((await call(`/api/v1/sites/${siteId}`, { cookie: `access_token=${user.token}`, headers: { Origin: "https://evil.example.net" } })).status).toBe(200);
    expect((await createSite({ Origin: "https://evil.example.net" }, { token: user.token })).res.status).toBe(201);
  });

  it("are documented: every user or administrator route that changes something lists 403", async () => {
    const doc = (await call("/openapi.json")).json as { paths: Record<string, Record<string, { security?: Record<string, string[]>[]; responses: Record<string, unknown> }>> };
    const missing: string[] = [];
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (["get", "head"].includes(method)) continue;
        const cookieAuthenticated = operation.security?.some((requirement) => "cookieAuth" in requirement);
        if (cookieAuthenticated && !operation.responses["403"]) missing.push(`${method.toUpperCase()} ${path}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
