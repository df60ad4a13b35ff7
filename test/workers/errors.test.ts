import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { eq } from "drizzle-orm";
import { createApp } from "../../src/app";
import { sql } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import * as schema from "../../src/db/schema";
import { isUniqueViolation } from "../../src/lib/errors";
import { call, createSite, db, fetchChecked, signup, unique } from "./helpers";

const isIssueList = (detail: unknown) =>
  Array.isArray(detail) && detail.length > 0 && detail.every((i) =>
    Array.isArray(i.loc) && typeof i.msg === "string" && typeof i.type === "string" && Object.keys(i).sort().join() === "loc,msg,type");

describe("error model", () => {
  it("answers malformed JSON with 400 {detail}", async () => {
    const user = await signup();
    for (const rawBody of ["{", "{\"email\": ", "not json", "{'a': 1}"]) {
      const res = await call("/api/v1/auth/signup", { method: "POST", rawBody });
      expect(res.status, rawBody).toBe(400);
      expect(res.json, rawBody).toEqual({ detail: expect.any(String) });
    }
    const authed = await call("/api/v1/sites/sites", { method: "POST", token: user.token, rawBody: "{\"name\":" });
    expect(authed.status).toBe(400);
    expect(authed.json).toEqual({ detail: expect.any(String) });
  });

  it("answers wrong types with 422 and a list of {loc, msg, type}", async () => {
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: 42, password: ["x"] } });
    expect(res.status).toBe(422);
    expect(isIssueList(res.json.detail)).toBe(true);
    const locs = res.json.detail.map((i: { loc: unknown[] }) => i.loc.join("."));
    expect(locs).toEqual(expect.arrayContaining(["body.email", "body.password"]));
    expect(Object.keys(res.json)).toEqual(["detail"]);
  });

  it("answers query and path validation failures with 422 located in query/path", async () => {
    const user = await signup();
    const q = await call("/api/v1/audit/events?limit=abc", { token: user.token });
    expect(q.status).toBe(422);
    expect(isIssueList(q.json.detail)).toBe(true);
    expect(q.json.detail[0].loc).toEqual(["query", "limit"]);
    const tooBig = await call("/api/v1/audit/events?limit=501", { token: user.token });
    expect(tooBig.status).toBe(422);
    const p = await call("/api/v1/auth/users/abc/role", { method: "PUT", token: user.token });
    // authorisation runs first: a non-administrator learns nothing about the parameter
    expect(p.status).toBe(403);
  });

  it("answers non-object JSON bodies with 422, never 5xx", async () => {
    const user = await signup();
    for (const rawBody of ["null", "[]", "\"text\"", "42", "true", "[{\"name\":\"x\"}]"]) {
      for (const [path, token] of [["/api/v1/auth/signup", undefined], ["/api/v1/auth/login", undefined], ["/api/v1/sites/sites", user.token], ["/api/v1/audit/events", user.token]] as const) {
        const res = await call(path, { method: "POST", token, rawBody });
        expect(res.status, `${path} ${rawBody}`).toBe(422);
        expect(isIssueList(res.json.detail), `${path} ${rawBody}`).toBe(true);
      }
    }
  });

  it("never answers 5xx to odd input", async () => {
    const user = await signup();
    const siteId = await createSite(user.token);
    const cases: { path: string; method?: string; rawBody?: string; headers?: Record<string, string>; token?: string }[] = [
      { path: "/api/v1/auth/signup", method: "POST", rawBody: JSON.stringify({ email: "a@b.c", password: "x".repeat(10_000) }) },
      { path: "/api/v1/auth/signup", method: "POST", rawBody: JSON.stringify({ email: "a".repeat(300) + "@b.co", password: "secret1" }) },
      { path: "/api/v1/auth/login", method: "POST", rawBody: JSON.stringify({ email: "\u0000@x.com", password: "\u0000" }) },
      { path: "/api/v1/auth/signup", method: "POST", rawBody: "{\"email\":\"x@y.co\"}", headers: { "Content-Type": "text/plain" } },
      { path: "/api/v1/auth/signup", method: "POST", headers: { "Content-Type": "application/json" } },
      { path: "/api/v1/auth/me", headers: { Authorization: "Bearer " + "a".repeat(20_000) } },
      { path: "/api/v1/auth/me", headers: { Cookie: "access_token=%E0%A4%A" } },
      { path: `/api/v1/sites/${encodeURIComponent("x".repeat(500))}`, token: user.token },
      { path: "/api/v1/sites/%00", token: user.token },
      { path: "/api/v1/sites/%E0%A4%A", token: user.token },
      { path: `/api/v1/sites/${siteId}/members/99999999999999999999`, method: "DELETE", token: user.token },
      { path: `/api/v1/sites/${siteId}/members/-1`, method: "DELETE", token: user.token },
      { path: "/api/v1/audit/events?since=99999999d", token: user.token },
      { path: "/api/v1/audit/events?offset=-1&limit=0", token: user.token },
      { path: "/api/v1/audit/events?metadata.user_id=abc", token: user.token },
      { path: "/api/v1/audit/statistics?time_period_hours=1e309", token: user.token },
      { path: "/api/v1/auth/users/x/role?new_role=Admin", method: "PUT", token: user.token },
      { path: "/api/v1/sites/sites", method: "POST", token: user.token, rawBody: JSON.stringify({ name: "x", site_id: "a".repeat(65) }) },
      { path: "/api/v1/sites/sites", method: "POST", token: user.token, rawBody: JSON.stringify({ name: "x", tenant_id: "nope" }) },
      { path: "/api/v1/sites/sites", method: "PATCH", token: user.token },
      { path: "/openapi.json", method: "POST" },
    ];
    for (const c of cases) {
      const res = await call(c.path, { method: c.method, rawBody: c.rawBody, headers: c.headers, token: c.token });
      const label = `${c.method ?? "GET"} ${c.path.slice(0, 80)}`;
      expect(res.status, label).toBeLessThan(500);
      expect(res.status, label).toBeGreaterThanOrEqual(400);
      expect(res.json, label).toEqual({ detail: expect.anything() });
    }
  });

  it("ignores a __proto__ key in a body", async () => {
    const email = `proto${Date.now()}@example.com`;
    const res = await call("/api/v1/auth/signup", { method: "POST", rawBody: `{"email":"${email}","password":"secret1","__proto__":{"is_admin":true},"constructor":{"prototype":{"is_admin":true}}}` });
    expect(res.status).toBe(201);
    const me = await call("/api/v1/auth/me", { token: res.json.data.access_token });
    expect(me.json.data.is_admin).toBe(false);
    expect(({} as Record<string, unknown>).is_admin).toBeUndefined();
  });

  it("answers unknown routes with 404 {\"detail\":\"Not Found\"}", async () => {
    for (const path of ["/nope", "/api/v1/nope", "/api/v2/sites/sites", "/api/v1/auth/unknown"]) {
      const res = await call(path);
      expect(res.status, path).toBe(404);
      expect(res.json, path).toEqual({ detail: "Not Found" });
      expect(res.headers.get("Content-Type")).toMatch(/application\/json/);
    }
  });

  it("answers a body over 1 MB with 413", async () => {
    const big = JSON.stringify({ email: "big@example.com", password: "secret1", full_name: "x".repeat(1024 * 1024 + 10) });
    const res = await call("/api/v1/auth/signup", { method: "POST", rawBody: big });
    expect(res.status).toBe(413);
    expect(res.json).toEqual({ detail: expect.any(String) });
    // also when the client streams it without a Content-Length
    const parts = [
      "{\"email\":\"s@example.com\",\"password\":\"secret1\",\"full_name\":\"",
      ...Array.from({ length: 20 }, () => "x".repeat(64 * 1024)),
      "\"}",
    ].map((p) => new TextEncoder().encode(p));
    const stream = new ReadableStream({
      pull(controller) {
        const next = parts.shift();
        if (next) controller.enqueue(next);
        else controller.close();
      },
      cancel() { parts.length = 0; },
    });
    const streamed = await fetchChecked(new Request("http://fleet.test/api/v1/auth/signup", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: stream, duplex: "half",
    } as RequestInit));
    expect(streamed.status).toBe(413);
    expect(await streamed.json()).toEqual({ detail: expect.any(String) });
  });

  it("accepts a body just under 1 MB", async () => {
    const user = await signup();
    const res = await call("/api/v1/sites/sites", { method: "POST", token: user.token, rawBody: JSON.stringify({ name: "x", padding: "y".repeat(900 * 1024) }) });
    expect(res.status).toBe(201);
  });
});

describe("X-Request-Id", () => {
  it("echoes a well-formed incoming id on success and on errors", async () => {
    for (const path of ["/", "/api/v1/auth/me", "/nope"]) {
      const res = await call(path, { headers: { "X-Request-Id": "client-req.42:abc" } });
      expect(res.headers.get("X-Request-Id"), path).toBe("client-req.42:abc");
    }
    const invalid = await call("/api/v1/auth/signup", { method: "POST", rawBody: "{", headers: { "X-Request-Id": "trace-400" } });
    expect(invalid.headers.get("X-Request-Id")).toBe("trace-400");
  });

  it("generates one when absent or unusable", async () => {
    const a = await call("/");
    const b = await call("/");
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    expect(a.headers.get("X-Request-Id")).toMatch(uuid);
    expect(b.headers.get("X-Request-Id")).toMatch(uuid);
    expect(a.headers.get("X-Request-Id")).not.toBe(b.headers.get("X-Request-Id"));
    const junk = await call("/", { headers: { "X-Request-Id": "has spaces and <script>" } });
    expect(junk.headers.get("X-Request-Id")).toMatch(uuid);
    const long = await call("/", { headers: { "X-Request-Id": "a".repeat(200) } });
    expect(long.headers.get("X-Request-Id")).toMatch(uuid);
    const unauthenticated = await call("/api/v1/auth/me");
    expect(unauthenticated.headers.get("X-Request-Id")).toMatch(uuid);
  });
});

describe("isUniqueViolation", () => {
  it("recognises D1's unique violations through drizzle's wrapper, single statements and batches", async () => {
    const tenantId = unique("UQ-");
    await db().insert(schema.tenants).values({ tenantId, name: "x" });
    const single = await db().insert(schema.tenants).values({ tenantId, name: "again" }).run().catch((e: unknown) => e);
    expect(isUniqueViolation(single)).toBe(true);
    expect(isUniqueViolation(single, "tenants.tenant_id")).toBe(true);
    expect(isUniqueViolation(single, "users.email")).toBe(false);
    const batched = await db().batch([db().insert(schema.tenants).values({ tenantId, name: "batched" })]).catch((e: unknown) => e);
    expect(isUniqueViolation(batched, "tenants.tenant_id")).toBe(true);
    // an index over an expression is named by the index
    const siteId = unique("UQ-");
    await db().insert(schema.sites).values({ siteId, name: "x" });
    const folded = await db().insert(schema.sites).values({ siteId: siteId.toLowerCase(), name: "again" }).run().catch((e: unknown) => e);
    expect(isUniqueViolation(folded, "sites_site_id_ci_uq")).toBe(true);
    const other = await db().run(sql`select * from no_such_table`).catch((e: unknown) => e);
    expect(isUniqueViolation(other)).toBe(false);
    expect(isUniqueViolation(new Error("boom"))).toBe(false);
    expect(isUniqueViolation(undefined)).toBe(false);
  });
});

describe("unexpected failures", () => {
  it("answer 500 {detail: Internal server error} without leaking, and are logged to error_logs", async () => {
    const app = createApp();
    app.get("/api/v1/__boom", () => { throw new Error("secret internals: db password hunter2"); });
    const requestId = unique("boom-");
    const ctx = createExecutionContext();
    // Own bindings: this isolate's request rollups for `env` may hold their next write for up to 10 s.
    const res = await app.request("/api/v1/__boom", { headers: { "X-Request-Id": requestId } }, { ...env }, ctx);
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ detail: "Internal server error" });
    expect(res.headers.get("X-Request-Id")).toBe(requestId);
    const row = await db().select().from(schema.errorLogs).where(eq(schema.errorLogs.requestId, requestId)).get();
    expect(row).toMatchObject({ category: "api", severity: "error", errorMessage: expect.stringContaining("secret internals"), context: { method: "GET", path: "/api/v1/__boom" } });
    expect(row!.stackTrace).toContain("Error");
  });
});
