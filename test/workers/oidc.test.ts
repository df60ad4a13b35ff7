// The pure parts of OpenID Connect login (PKCE, the signed login-state cookie, usernames) and the
// refusals that need no provider. The whole flow against a real provider: test/e2e/oidc.test.ts.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SignJWT, decodeJwt } from "jose";
import { and, eq, like } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { createApp } from "../../src/app";
import { LOGIN_STATE_TTL_S, openLoginState, pkceChallenge, randomToken, sealLoginState, usernameFromEmail } from "../../src/services/oidc";
import { checkResponse } from "./response-contract";
import { db, unique } from "./helpers";

const SECRET = new TextEncoder().encode(env.JWT_SECRET!);
const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
const login = () => ({ state: randomToken(), nonce: randomToken(), verifier: randomToken() });

describe("PKCE", () => {
  it("derives the S256 challenge of RFC 7636's example verifier", async () => {
    expect(await pkceChallenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")).toBe("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
  });

  it("makes verifiers of 43 URL-safe characters (32 random bytes), never the same twice", () => {
    const tokens = new Set(Array.from({ length: 50 }, () => randomToken()));
    expect(tokens.size).toBe(50);
    for (const token of tokens) expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});

describe("the login-state cookie", () => {
  it("opens to what was sealed, until it is 10 minutes old", async () => {
    const sealed = login();
    const cookie = await sealLoginState(SECRET, sealed, NOW);
    expect(await openLoginState(SECRET, cookie, NOW)).toEqual(sealed);
    expect(await openLoginState(SECRET, cookie, NOW + (LOGIN_STATE_TTL_S - 1) * 1000)).toEqual(sealed);
    expect(await openLoginState(SECRET, cookie, NOW + (LOGIN_STATE_TTL_S + 1) * 1000)).toBeUndefined();
  });

  it("refuses an altered cookie, one signed with another secret, and garbage", async () => {
    const cookie = await sealLoginState(SECRET, login(), NOW);
    const [header, payload, signature] = cookie.split(".");
    const claims = decodeJwt(cookie);
    const altered = [header, Buffer.from(JSON.stringify({ ...claims, state: "chosen-by-an-attacker" })).toString("base64url"), signature].join(".");
    expect(await openLoginState(SECRET, altered, NOW)).toBeUndefined();
    const otherSecret = await sealLoginState(new TextEncoder().encode("another-secret-that-is-long-enough-0123456789"), login(), NOW);
    expect(await openLoginState(SECRET, otherSecret, NOW)).toBeUndefined();
    expect(await openLoginState(SECRET, "not.a.cookie", NOW)).toBeUndefined();
    expect(await openLoginState(SECRET, `${payload}`, NOW)).toBeUndefined();
  });

  it("is signed with a key of its own: a token signed with JWT_SECRET itself does not pass for one", async () => {
    const nowS = Math.floor(NOW / 1000);
    const forged = await new SignJWT({ ...login() })
      .setProtectedHeader({ alg: "HS256" })
      .setAudience("fleet-edge-oidc-login-state")
      .setIssuedAt(nowS)
      .setExpirationTime(nowS + 60)
      .sign(SECRET);
    expect(await openLoginState(SECRET, forged, NOW)).toBeUndefined();
  });
});

describe("usernames of new accounts", () => {
  it("come from the e-mail's local part, with the characters a username may not hold replaced", () => {
    expect(usernameFromEmail("pat.o'neil+fleet@example.com")).toBe("pat.o_neil+fleet");
    expect(usernameFromEmail("@example.com")).toBe("user");
    expect(usernameFromEmail(`${"a".repeat(80)}@example.com`)).toHaveLength(56);
  });
});

describe("OpenID Connect endpoints without a reachable provider", () => {
  const app = createApp();
  // Port 9 (discard) on loopback: nothing listens, so the connection is refused at once.
  const UNREACHABLE = { OIDC_ISSUER: "http://127.0.0.1:9", OIDC_CLIENT_ID: "fleet-edge", OIDC_CLIENT_SECRET: "client-secret" };

  async function send(bindings: Record<string, string | undefined>, path: string, init: RequestInit = {}) {
    const ctx = createExecutionContext();
    const res = await app.request(path, init, { ...env, ...bindings }, ctx);
    await waitOnExecutionContext(ctx);
    await checkResponse(new Request(`http://fleet.test${path}`, init), res.clone());
    return res;
  }

  const failures = (reason: string) => db().select().from(schema.auditLogs)
    .where(and(eq(schema.auditLogs.eventType, "login_failed"), like(schema.auditLogs.eventMetadata, `%${reason}%`))).all();

  it("answers 503 naming exactly the variables still missing", async () => {
    const res = await send({ OIDC_ISSUER: "https://id.example.com", OIDC_CLIENT_SECRET: "  " }, "/api/v1/auth/login");
    expect(res.status).toBe(503);
    const { detail } = await res.json<{ detail: string }>();
    expect(detail).toMatch(/set OIDC_CLIENT_ID, OIDC_CLIENT_SECRET$/);
    const callback = await send({}, "/api/v1/auth/callback?code=x&state=y");
    expect(callback.status).toBe(503);
  });

  it("answers 503 for an issuer that is not a URL", async () => {
    const res = await send({ ...UNREACHABLE, OIDC_ISSUER: "id.example.com" }, "/api/v1/auth/login");
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ detail: expect.stringMatching(/OIDC_ISSUER is not an absolute URL/) });
  });

  it("answers 502 when the provider cannot be reached to start a login", async () => {
    const res = await send(UNREACHABLE, "/api/v1/auth/login");
    expect(res.status).toBe(502);
    expect(await res.json()).toEqual({ detail: expect.stringMatching(/identity provider could not be used: discovery/) });
    expect(res.headers.get("set-cookie")).toBeNull();
  });

  it("refuses a callback without the login's cookie (400), audited with the reason", async () => {
    const marker = unique("state");
    const res = await send(UNREACHABLE, `/api/v1/auth/callback?code=abc&state=${marker}`);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ detail: expect.stringMatching(/no valid state cookie/) });
    const before = await db().select().from(schema.users).all();
    const audited = await failures("no valid state cookie");
    expect(audited.length).toBeGreaterThan(0);
    expect(audited.at(-1)!.eventMetadata).toMatchObject({ method: "oidc", reason: expect.stringMatching(/state cookie/) });
    expect(await db().select().from(schema.users).all()).toHaveLength(before.length);
  });

  it("refuses a state that is not the cookie's (400), and a state cookie older than 10 minutes", async () => {
    const sealed = login();
    const cookie = `oidc_login=${await sealLoginState(SECRET, sealed, Date.now())}`;
    const wrong = await send(UNREACHABLE, `/api/v1/auth/callback?code=abc&state=${randomToken()}`, { headers: { cookie } });
    expect(wrong.status).toBe(400);
    expect(await wrong.json()).toEqual({ detail: expect.stringMatching(/state parameter does not match/) });
    const stale = `oidc_login=${await sealLoginState(SECRET, sealed, Date.now() - (LOGIN_STATE_TTL_S + 5) * 1000)}`;
    const expired = await send(UNREACHABLE, `/api/v1/auth/callback?code=abc&state=${sealed.state}`, { headers: { cookie: stale } });
    expect(expired.status).toBe(400);
    expect(await expired.json()).toEqual({ detail: expect.stringMatching(/older than 10 minutes/) });
  });

  it("passes on the provider's own refusal (400), and answers 502 when the provider cannot be reached for the code", async () => {
    const sealed = login();
    const cookie = `oidc_login=${await sealLoginState(SECRET, sealed, Date.now())}`;
    const denied = await send(UNREACHABLE, `/api/v1/auth/callback?error=access_denied&error_description=User+cancelled&state=${sealed.state}`, { headers: { cookie } });
    expect(denied.status).toBe(400);
    expect(await denied.json()).toEqual({ detail: "The identity provider refused the login: access_denied (User cancelled)" });
    const unreachable = await send(UNREACHABLE, `/api/v1/auth/callback?code=abc&state=${sealed.state}`, { headers: { cookie } });
    expect(unreachable.status).toBe(502);
    expect(unreachable.headers.get("set-cookie")).toBeNull();
    expect((await failures("could not be used")).length).toBeGreaterThan(0);
  });
});
