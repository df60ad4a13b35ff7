import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SignJWT, UnsecuredJWT, decodeJwt, exportJWK, generateKeyPair } from "jose";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { createApp } from "../../src/app";
import { checkResponse } from "./response-contract";
import { call, admin, createSite, db, signup, unique } from "./helpers";

const SECRET = new TextEncoder().encode(env.JWT_SECRET!);
const ISSUER = env.JWT_ISSUER ?? "fleet-edge";
const AUDIENCE = env.JWT_AUDIENCE ?? "fleet-edge-api";

/** A token like the service's own, with pieces overridable to build the bad variants. */
function token(userId: number, opts: { alg?: string; iss?: string; aud?: string; exp?: number | null; secret?: Uint8Array } = {}) {
  const jwt = new SignJWT({ email: "x@example.com", is_admin: false })
    .setProtectedHeader({ alg: opts.alg ?? "HS256", typ: "JWT" })
    .setSubject(String(userId))
    .setIssuer(opts.iss ?? ISSUER)
    .setAudience(opts.aud ?? AUDIENCE)
    .setIssuedAt();
  if (opts.exp !== null) jwt.setExpirationTime(opts.exp ?? Math.floor(Date.now() / 1000) + 600);
  return jwt.sign(opts.secret ?? SECRET);
}

const me = (t?: string, cookie?: string) => call("/api/v1/auth/me", { token: t, cookie });

describe("signup", () => {
  it("creates a user and answers 201 with an access token", async () => {
    const email = `${unique("new")}@example.com`;
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email, password: "secret1", full_name: "New Person" } });
    expect(res.status).toBe(201);
    expect(res.json).toEqual({ success: true, message: expect.any(String), data: { access_token: expect.any(String) } });
    const claims = decodeJwt(res.json.data.access_token);
    expect(claims.iss).toBe(ISSUER);
    expect(claims.aud).toBe(AUDIENCE);
    // 30-minute default lifetime.
    expect((claims.exp! - claims.iat!)).toBe(30 * 60);
    const who = await me(res.json.data.access_token);
    expect(who.status).toBe(200);
    expect(who.json.data).toMatchObject({ email, full_name: "New Person", is_admin: false });
    const row = await db().select().from(schema.users).where(eq(schema.users.email, email)).get();
    expect(row!.passwordHash).toMatch(/^\$2[aby]\$/);
    expect(row!.passwordHash).not.toContain("secret1");
  });

  it("derives the username from the e-mail local part when absent", async () => {
    const local = unique("local");
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${local}@example.com`, password: "secret1" } });
    expect(res.status).toBe(201);
    expect((await me(res.json.data.access_token)).json.data.username).toBe(local);
  });

  it("stores e-mails case-insensitively", async () => {
    const local = unique("Mixed");
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${local}@Example.COM`, password: "secret1" } });
    expect(res.status).toBe(201);
    const login = await call("/api/v1/auth/login", { method: "POST", body: { email: `${local}@example.com`, password: "secret1" } });
    expect(login.status).toBe(200);
  });

  it("rejects a duplicate e-mail with 400", async () => {
    const user = await signup();
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: user.email, password: "another1", username: unique("x") } });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ detail: expect.stringMatching(/email/i) });
    const upper = await call("/api/v1/auth/signup", { method: "POST", body: { email: user.email.toUpperCase(), password: "another1", username: unique("x") } });
    expect(upper.status).toBe(400);
  });

  it("gives one 201 and 400s to concurrent signups with the same e-mail or username", async () => {
    const email = `${unique("race")}@example.com`;
    const results = await Promise.all(Array.from({ length: 5 }, (_, i) =>
      call("/api/v1/auth/signup", { method: "POST", body: { email, password: "secret1", username: unique(`r${i}`) } })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 400, 400, 400, 400]);
    const username = unique("samename");
    const byName = await Promise.all(Array.from({ length: 4 }, () =>
      call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("n")}@example.com`, password: "secret1", username } })));
    expect(byName.map((r) => r.status).sort()).toEqual([201, 400, 400, 400]);
    for (const r of byName.filter((r) => r.status === 400)) expect(r.json.detail).toMatch(/username/i);
  });

  it("rejects a duplicate username with 400", async () => {
    const username = unique("name");
    await signup({ username });
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("o")}@example.com`, password: "secret1", username } });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ detail: expect.stringMatching(/username/i) });
  });

  it("rejects a username derived from the e-mail that is already taken with 400", async () => {
    const username = unique("taken");
    await signup({ username });
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${username}@other.example.com`, password: "secret1" } });
    expect(res.status).toBe(400);
    expect(res.json.detail).toMatch(/username/i);
  });

  it("never grants administrator rights, whatever role says", async () => {
    const email = `${unique("wannabe")}@example.com`;
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email, password: "secret1", role: "Admin" } });
    expect(res.status).toBe(201);
    expect(decodeJwt(res.json.data.access_token).is_admin).toBe(false);
    expect((await me(res.json.data.access_token)).json.data.is_admin).toBe(false);
    const login = await call("/api/v1/auth/login", { method: "POST", body: { email, password: "secret1" } });
    expect(login.json.data.is_admin).toBe(false);
    const row = await db().select().from(schema.users).where(eq(schema.users.email, email)).get();
    expect(row!.isAdmin).toBe(false);
    // and an administrator-only endpoint refuses it
    expect((await call("/api/v1/tenants", { token: res.json.data.access_token })).status).toBe(403);
  });

  it("rejects a password longer than 72 UTF-8 bytes even when it has fewer characters, with 422", async () => {
    const password = "é".repeat(40); // 40 characters, 80 bytes
    expect(password.length).toBeLessThan(72);
    const email = `${unique("long")}@example.com`;
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email, password } });
    expect(res.status).toBe(422);
    expect(res.json.detail[0]).toMatchObject({ loc: ["body", "password"], type: expect.any(String), msg: expect.stringMatching(/72/) });
    expect(await db().select().from(schema.users).where(eq(schema.users.email, email)).get()).toBeUndefined();
    // exactly 72 bytes is fine
    const ok = await call("/api/v1/auth/signup", { method: "POST", body: { email, password: "é".repeat(36) } });
    expect(ok.status).toBe(201);
  });

  it("rejects a password shorter than 6 characters with 422", async () => {
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("short")}@example.com`, password: "12345" } });
    expect(res.status).toBe(422);
    expect(res.json.detail[0].loc).toEqual(["body", "password"]);
  });

  it("rejects an invalid e-mail and missing fields with 422", async () => {
    const bad = await call("/api/v1/auth/signup", { method: "POST", body: { email: "not-an-email", password: "secret1" } });
    expect(bad.status).toBe(422);
    expect(bad.json.detail.some((i: { loc: unknown[] }) => i.loc.join(".") === "body.email")).toBe(true);
    const missing = await call("/api/v1/auth/signup", { method: "POST", body: {} });
    expect(missing.status).toBe(422);
    const locs = missing.json.detail.map((i: { loc: unknown[] }) => i.loc.join("."));
    expect(locs).toEqual(expect.arrayContaining(["body.email", "body.password"]));
  });
});

describe("login", () => {
  it("answers the token, username and is_admin, and sets the httpOnly cookie with SameSite", async () => {
    const username = unique("login");
    const user = await signup({ username });
    const res = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ success: true, message: expect.any(String), data: { access_token: expect.any(String), username, is_admin: false } });
    const cookie = res.headers.get("Set-Cookie")!;
    expect(cookie).toMatch(new RegExp(`^access_token=${res.json.data.access_token.replace(/[.]/g, "\\.")};`));
    expect(cookie).toMatch(/;\s*HttpOnly/i);
    expect(cookie).toMatch(/;\s*SameSite=Lax/i);
    expect(cookie).toMatch(/;\s*Path=\//i);
    expect(cookie).toMatch(/;\s*Max-Age=1800/i);
    expect((await me(res.json.data.access_token)).json.data.id).toBe(user.id);
  });

  it("reports is_admin for an administrator", async () => {
    const a = await admin();
    const res = await call("/api/v1/auth/login", { method: "POST", body: { email: a.email, password: a.password } });
    expect(res.json.data.is_admin).toBe(true);
  });

  it("answers an unknown e-mail and a wrong password with the identical 401", async () => {
    const user = await signup();
    const wrong = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: "wrong-password" } });
    const unknown = await call("/api/v1/auth/login", { method: "POST", body: { email: `${unique("nobody")}@example.com`, password: "wrong-password" } });
    expect(wrong.status).toBe(401);
    expect(unknown.status).toBe(401);
    expect(wrong.text).toBe(unknown.text);
    expect(wrong.json).toEqual({ detail: expect.any(String) });
    expect(wrong.headers.get("Set-Cookie")).toBeNull();
    expect(wrong.headers.get("WWW-Authenticate")).toBe(unknown.headers.get("WWW-Authenticate"));
  });

  it("refuses a deactivated user with the same 401", async () => {
    const user = await signup();
    await db().update(schema.users).set({ isActive: false }).where(eq(schema.users.id, user.id));
    const res = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    expect(res.status).toBe(401);
    expect(res.json.detail).toBe("Incorrect email or password");
    // and the token issued before deactivation no longer works
    expect((await me(user.token)).status).toBe(401);
  });

  it("validates the body with 422", async () => {
    const res = await call("/api/v1/auth/login", { method: "POST", body: { email: "x@example.com" } });
    expect(res.status).toBe(422);
    expect(res.json.detail[0].loc).toEqual(["body", "password"]);
  });

  it("GET /api/v1/auth/login answers 503 until OpenID Connect is configured", async () => {
    const res = await call("/api/v1/auth/login");
    expect(res.status).toBe(503);
    expect(res.json).toEqual({ detail: expect.stringMatching(/OpenID Connect/i) });
    expect(res.json.detail).toMatch(/OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET/);
  });
});

describe("tokens", () => {
  it("accepts a well-formed token built outside the service (control for the cases below)", async () => {
    const user = await signup();
    expect((await me(await token(user.id))).status).toBe(200);
  });

  it("refuses alg none", async () => {
    const user = await signup();
    const unsigned = new UnsecuredJWT({ email: user.email, is_admin: true })
      .setSubject(String(user.id)).setIssuer(ISSUER).setAudience(AUDIENCE).setIssuedAt().setExpirationTime("10m").encode();
    const res = await me(unsigned);
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ detail: expect.any(String) });
    // also with a trailing junk signature
    expect((await me(unsigned + "c2ln")).status).toBe(401);
  });

  it("refuses HS512 signed with the same secret", async () => {
    const user = await signup();
    expect((await me(await token(user.id, { alg: "HS512" }))).status).toBe(401);
    expect((await me(await token(user.id, { alg: "HS384" }))).status).toBe(401);
  });

  it("refuses RS256 (a key the service does not hold)", async () => {
    const user = await signup();
    const { privateKey, publicKey } = await generateKeyPair("RS256");
    const jwt = await new SignJWT({})
      .setProtectedHeader({ alg: "RS256", jwk: await exportJWK(publicKey) })
      .setSubject(String(user.id)).setIssuer(ISSUER).setAudience(AUDIENCE).setIssuedAt().setExpirationTime("10m")
      .sign(privateKey);
    expect((await me(jwt)).status).toBe(401);
  });

  it("refuses an expired token", async () => {
    const user = await signup();
    expect((await me(await token(user.id, { exp: Math.floor(Date.now() / 1000) - 5 }))).status).toBe(401);
  });

  it("refuses a token without exp", async () => {
    const user = await signup();
    expect((await me(await token(user.id, { exp: null }))).status).toBe(401);
  });

  it("refuses a wrong issuer and a wrong audience", async () => {
    const user = await signup();
    expect((await me(await token(user.id, { iss: "someone-else" }))).status).toBe(401);
    expect((await me(await token(user.id, { aud: "another-api" }))).status).toBe(401);
  });

  it("refuses a token signed with another secret", async () => {
    const user = await signup();
    const other = new TextEncoder().encode("another-secret-that-is-long-enough-for-hs256-xyz");
    expect((await me(await token(user.id, { secret: other }))).status).toBe(401);
  });

  it("refuses a tampered payload", async () => {
    const victim = await signup();
    const attacker = await signup();
    const [header, , signature] = attacker.token.split(".");
    const claims = decodeJwt(attacker.token);
    const forged = btoa(JSON.stringify({ ...claims, sub: String(victim.id), is_admin: true }))
      .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    const res = await me(`${header}.${forged}.${signature}`);
    expect(res.status).toBe(401);
  });

  it("refuses a token for a user that does not exist", async () => {
    expect((await me(await token(987654321))).status).toBe(401);
  });

  it("refuses garbage, an empty bearer and other schemes", async () => {
    expect((await me("not.a.jwt")).status).toBe(401);
    expect((await call("/api/v1/auth/me", { headers: { Authorization: "Bearer " } })).status).toBe(401);
    const user = await signup();
    expect((await call("/api/v1/auth/me", { headers: { Authorization: `Basic ${user.token}` } })).status).toBe(401);
    const anonymous = await me();
    expect(anonymous.status).toBe(401);
    expect(anonymous.json).toEqual({ detail: "Not authenticated" });
    expect(anonymous.headers.get("WWW-Authenticate")).toBe("Bearer");
  });
});

describe("cookie auth", () => {
  it("works with the cookie alone", async () => {
    const user = await signup();
    const login = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    const cookie = login.headers.get("Set-Cookie")!.split(";")[0];
    const res = await call("/api/v1/auth/me", { cookie });
    expect(res.status).toBe(200);
    expect(res.json.data.id).toBe(user.id);
    // and on a site-scoped route
    const siteId = await createSite(user.token);
    expect((await call(`/api/v1/sites/${siteId}`, { cookie })).status).toBe(200);
  });

  it("lets the Authorization header win over a stale or invalid cookie", async () => {
    const user = await signup();
    const expired = await token(user.id, { exp: Math.floor(Date.now() / 1000) - 60 });
    const res = await call("/api/v1/auth/me", { token: user.token, cookie: `access_token=${expired}` });
    expect(res.status).toBe(200);
    const garbage = await call("/api/v1/auth/me", { token: user.token, cookie: "access_token=garbage" });
    expect(garbage.status).toBe(200);
  });

  it("uses the header's user when header and cookie name different users", async () => {
    const a = await signup();
    const b = await signup();
    const res = await call("/api/v1/auth/me", { token: a.token, cookie: `access_token=${b.token}` });
    expect(res.json.data.id).toBe(a.id);
  });

  it("does not rescue an invalid header with a valid cookie", async () => {
    const user = await signup();
    const expired = await token(user.id, { exp: Math.floor(Date.now() / 1000) - 60 });
    const res = await call("/api/v1/auth/me", { token: expired, cookie: `access_token=${user.token}` });
    expect(res.status).toBe(401);
  });
});

describe("administration of users", () => {
  it("deletes a user (administrators), with their memberships, and their token stops working", async () => {
    const a = await admin();
    const victim = await signup();
    const siteId = await createSite(victim.token);
    const res = await call(`/api/v1/auth/users/${encodeURIComponent(victim.email)}`, { method: "DELETE", token: a.token });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true, message: expect.any(String), data: { email: victim.email } });
    expect(await db().select().from(schema.users).where(eq(schema.users.id, victim.id)).get()).toBeUndefined();
    expect(await db().select().from(schema.siteMemberships).where(eq(schema.siteMemberships.userId, victim.id)).all()).toEqual([]);
    expect((await me(victim.token)).status).toBe(401);
    // the site itself stays, visible to administrators
    expect((await call(`/api/v1/sites/${siteId}`, { token: a.token })).status).toBe(200);
    const audit = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "user_deleted")).all();
    expect(audit.some((e) => (e.eventMetadata as { deleted_user_id?: number }).deleted_user_id === victim.id && e.userId === a.id)).toBe(true);
  });

  it("deletes case-insensitively", async () => {
    const a = await admin();
    const victim = await signup();
    const res = await call(`/api/v1/auth/users/${encodeURIComponent(victim.email.toUpperCase())}`, { method: "DELETE", token: a.token });
    expect(res.status).toBe(200);
    expect(res.json.data.email).toBe(victim.email);
  });

  it("refuses non-administrators with 403 and anonymous callers with 401", async () => {
    const user = await signup();
    const victim = await signup();
    const forbidden = await call(`/api/v1/auth/users/${encodeURIComponent(victim.email)}`, { method: "DELETE", token: user.token });
    expect(forbidden.status).toBe(403);
    expect(forbidden.json).toEqual({ detail: expect.any(String) });
    const anonymous = await call(`/api/v1/auth/users/${encodeURIComponent(victim.email)}`, { method: "DELETE" });
    expect(anonymous.status).toBe(401);
    expect(await db().select().from(schema.users).where(eq(schema.users.id, victim.id)).get()).toBeDefined();
    // A user cannot delete themselves either.
    expect((await call(`/api/v1/auth/users/${encodeURIComponent(user.email)}`, { method: "DELETE", token: user.token })).status).toBe(403);
  });

  it("answers 401 for an unknown e-mail, as the specification fixes", async () => {
    const a = await admin();
    const res = await call(`/api/v1/auth/users/${unique("ghost")}%40example.com`, { method: "DELETE", token: a.token });
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ detail: expect.any(String) });
  });

  it("PUT role answers 501 for administrators and 403 for others", async () => {
    const a = await admin();
    const user = await signup();
    const res = await call(`/api/v1/auth/users/${user.id}/role?new_role=Admin`, { method: "PUT", token: a.token });
    expect(res.status).toBe(501);
    expect(res.json).toEqual({ detail: expect.any(String) });
    expect((await call(`/api/v1/auth/users/${user.id}/role?new_role=Admin`, { method: "PUT", token: user.token })).status).toBe(403);
    expect((await call(`/api/v1/auth/users/${user.id}/role?new_role=Admin`, { method: "PUT" })).status).toBe(401);
    const row = await db().select().from(schema.users).where(eq(schema.users.id, user.id)).get();
    expect(row!.isAdmin).toBe(false);
  });

  it("GET /api/v1/auth/me answers the current user", async () => {
    const username = unique("meuser");
    const user = await signup({ username });
    const res = await me(user.token);
    expect(res.json).toEqual({
      success: true,
      message: expect.any(String),
      data: { id: user.id, email: user.email, username, full_name: null, is_admin: false },
    });
  });
});

describe("configuration", () => {
  const app = createApp();
  /**
   * `checked: false` only for a deployment without a usable JWT secret: it answers 503 to every
   * request, before any operation (and outside what each one declares).
   */
  async function send(bindings: Partial<typeof env>, path: string, init: RequestInit = {}, { checked = true } = {}) {
    const ctx = createExecutionContext();
    const res = await app.request(path, init, { ...env, ...bindings }, ctx);
    await waitOnExecutionContext(ctx);
    if (checked) await checkResponse(new Request(`http://fleet.test${path}`, init), res);
    return res;
  }
  const loginInit = (email: string, password: string): RequestInit => ({
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ email, password }),
  });

  it("refuses to serve with a JWT secret shorter than 32 bytes (503)", async () => {
    const res = await send({ JWT_SECRET: "too-short-secret" }, "/api/v1/auth/me", {}, { checked: false });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ detail: expect.stringMatching(/JWT_SECRET/) });
    const missing = await send({ JWT_SECRET: undefined }, "/", {}, { checked: false });
    expect(missing.status).toBe(503);
  });

  it("marks the cookie Secure in production and honours COOKIE_SAMESITE", async () => {
    const user = await signup();
    const prod = await send({ ENVIRONMENT: "production" }, "/api/v1/auth/login", loginInit(user.email, user.password));
    expect(prod.status).toBe(200);
    expect(prod.headers.get("Set-Cookie")).toMatch(/;\s*Secure/i);
    const strict = await send({ COOKIE_SAMESITE: "strict" }, "/api/v1/auth/login", loginInit(user.email, user.password));
    expect(strict.headers.get("Set-Cookie")).toMatch(/;\s*SameSite=Strict/i);
    expect(strict.headers.get("Set-Cookie")).not.toMatch(/;\s*Secure/i);
    // SameSite=None is only accepted by browsers together with Secure
    const none = await send({ COOKIE_SAMESITE: "none" }, "/api/v1/auth/login", loginInit(user.email, user.password));
    expect(none.headers.get("Set-Cookie")).toMatch(/;\s*SameSite=None/i);
    expect(none.headers.get("Set-Cookie")).toMatch(/;\s*Secure/i);
  });

  it("takes the token lifetime from ACCESS_TOKEN_MINUTES", async () => {
    const user = await signup();
    const res = await send({ ACCESS_TOKEN_MINUTES: "5" }, "/api/v1/auth/login", loginInit(user.email, user.password));
    const { data } = await res.json<{ data: { access_token: string } }>();
    const claims = decodeJwt(data.access_token);
    expect(claims.exp! - claims.iat!).toBe(300);
    expect(res.headers.get("Set-Cookie")).toMatch(/Max-Age=300/);
  });
});
