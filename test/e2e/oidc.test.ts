// End-to-end: OpenID Connect login against a real provider (the `oidc-provider` package) started on
// loopback inside the test. The built Worker fetches discovery, keys and the token endpoint over
// loopback; the test plays the browser with plain HTTP, following every redirect by hand.
import { generateKeyPairSync } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Provider from "oidc-provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";

const CLIENT_ID = "fleet-edge-test";
const CLIENT_SECRET = "a-client-secret-for-the-loopback-provider";
const FRONTEND_URL = "https://console.example.com";
/** How soon after reading the provider's keys the service reads them again for an unknown key id. */
const KEY_SET_REFRESH_COOLDOWN_MS = 5_000;

interface TestAccount { sub: string; email: string; email_verified: boolean; name: string }

let service: RunningService;
let providerServer: Server;
let issuer: string;
const accounts = new Map<string, TestAccount>();
/** The account the provider signs in at its next login prompt (the test's "user" typing credentials). */
let signingIn: string | undefined;
/** When set, the ID token in the next token response is altered in transit (one claim character changed). */
let tamperNextIdToken = false;
/** What the loopback provider's server runs; replaced to play a provider that rotated its signing keys. */
let handler: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => { res.statusCode = 503; res.end(); };

const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

function account(overrides: Partial<TestAccount> = {}): TestAccount {
  const sub = unique("sub");
  const created = { sub, email: `${sub}@example.com`, email_verified: true, name: "Pat Example", ...overrides };
  accounts.set(created.sub, created);
  return created;
}

/** Changes the first character of the token's subject, keeping its length (and so the body's Content-Length). */
function tamper(idToken: string): string {
  const [header, payload, signature] = idToken.split(".");
  const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  claims.sub = `${claims.sub.startsWith("x") ? "y" : "x"}${claims.sub.slice(1)}`;
  return [header, Buffer.from(JSON.stringify(claims)).toString("base64url"), signature].join(".");
}

/** The provider, signing with `signingKeys` when given (otherwise with keys it makes up itself). */
function providerFor(serviceUrl: string, signingKeys?: { keys: object[] }) {
  const provider = new Provider(issuer, {
    ...(signingKeys ? { jwks: signingKeys } : {}),
    clients: [{
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: [`${serviceUrl}/api/v1/auth/callback`],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    }],
    claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"] },
    async findAccount(_ctx: unknown, sub: string) {
      const found = accounts.get(sub);
      return found ? { accountId: sub, claims: async () => ({ ...found }) } : undefined;
    },
    interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    features: { devInteractions: { enabled: false } },
    cookies: { keys: ["loopback-provider-cookie-key"] },
    pkce: { required: () => true },
  });
  const handle = provider.callback();
  return async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "").split("?")[0];
    if (path.startsWith("/interaction/")) {
      // The provider's login and consent pages, answered at once for the chosen account.
      const details = await provider.interactionDetails(req, res);
      if (details.prompt.name === "login") {
        await provider.interactionFinished(req, res, { login: { accountId: signingIn } }, { mergeWithLastSubmission: false });
      } else {
        const grant = new provider.Grant({ accountId: details.session!.accountId, clientId: details.params.client_id });
        grant.addOIDCScope(details.params.scope);
        await provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true });
      }
      return;
    }
    if (path === "/token" && tamperNextIdToken) {
      tamperNextIdToken = false;
      const end = res.end.bind(res) as (chunk?: unknown, ...rest: unknown[]) => ServerResponse;
      res.end = ((chunk?: unknown, ...rest: unknown[]) => {
        if (chunk) {
          const body: { id_token?: string } = JSON.parse(String(chunk));
          if (body.id_token) body.id_token = tamper(body.id_token);
          chunk = JSON.stringify(body);
        }
        return end(chunk, ...rest);
      }) as ServerResponse["end"];
    }
    handle(req, res);
  };
}

beforeAll(async () => {
  providerServer = createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => providerServer.listen(0, "127.0.0.1", resolve));
  issuer = `http://127.0.0.1:${(providerServer.address() as AddressInfo).port}`;
  service = await startService({
    quiet: true,
    bindings: { OIDC_ISSUER: issuer, OIDC_CLIENT_ID: CLIENT_ID, OIDC_CLIENT_SECRET: CLIENT_SECRET, FRONTEND_URL },
  });
  handler = providerFor(service.url);
});

afterAll(async () => {
  await service?.stop();
  await new Promise((resolve) => providerServer?.close(resolve));
});

// Node's fetch splits Set-Cookie headers; this project's global types are the Workers' ones, which lack the method.
const setCookieLines = (response: Response): string[] => (response.headers as Headers & { getSetCookie(): string[] }).getSetCookie();

/** The cookies a response sets, as name → value. */
function setCookies(response: Response): Map<string, string> {
  const jar = new Map<string, string>();
  for (const line of setCookieLines(response)) {
    const [pair] = line.split(";");
    const at = pair.indexOf("=");
    jar.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
  }
  return jar;
}

const cookieHeader = (jar: Map<string, string>) => [...jar].map(([name, value]) => `${name}=${value}`).join("; ");

interface StartedLogin { authUrl: URL; stateCookie: string }

async function startLogin(): Promise<StartedLogin> {
  const response = await fetch(`${service.url}/api/v1/auth/login`);
  expect(response.status).toBe(200);
  const body: any = await response.json();
  const stateCookie = setCookies(response).get("oidc_login");
  expect(stateCookie).toBeTruthy();
  return { authUrl: new URL(body.auth_url), stateCookie: stateCookie! };
}

/** Plays the browser at the provider, signing in `accountId`: follows redirects until one goes back to the service. */
async function authorize(authUrl: URL, accountId: string): Promise<URL> {
  signingIn = accountId;
  const jar = new Map<string, string>();
  let next = authUrl.toString();
  for (let hop = 0; hop < 10; hop++) {
    const response = await fetch(next, { redirect: "manual", headers: { cookie: cookieHeader(jar) } });
    for (const [name, value] of setCookies(response)) jar.set(name, value);
    const location = response.headers.get("location");
    if (!location) throw new Error(`the provider answered ${response.status} without a redirect: ${await response.text()}`);
    const target = new URL(location, next);
    if (target.toString().startsWith(service.url)) return target;
    next = target.toString();
  }
  throw new Error("the provider never redirected back to the service");
}

async function callback(returned: URL, stateCookie: string) {
  const response = await fetch(returned, { redirect: "manual", headers: { cookie: `oidc_login=${stateCookie}` } });
  const text = await response.text();
  return { status: response.status, location: response.headers.get("location"), cookies: setCookies(response), body: text ? safeJson(text) : undefined };
}

function safeJson(text: string) {
  try { return JSON.parse(text); } catch { return text; }
}

async function signInAs(who: TestAccount) {
  const login = await startLogin();
  return callback(await authorize(login.authUrl, who.sub), login.stateCookie);
}

async function api(path: string, { method = "GET", token, body }: { method?: string; token?: string; body?: unknown } = {}) {
  const response = await fetch(`${service.url}${path}`, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json: any = await response.json();
  return { status: response.status, json };
}

async function query<T>(sql: string, ...params: unknown[]): Promise<T[]> {
  const db = await service.mf.getD1Database("DB");
  return (await db.prepare(sql).bind(...params).all<T>()).results;
}

const usersWithEmail = (email: string) => query<{ id: number; oidc_issuer: string | null; oidc_subject: string | null; is_admin: number; password_hash: string | null }>(
  "SELECT id, oidc_issuer, oidc_subject, is_admin, password_hash FROM users WHERE lower(email) = lower(?)", email);

const failuresMentioning = (text: string) => query<{ event_metadata: string }>(
  "SELECT event_metadata FROM audit_logs WHERE event_type = 'login_failed' AND event_metadata LIKE ?", `%${text}%`);

describe("OpenID Connect login against a real provider", () => {
  it("GET /login answers the provider's authorization URL with state, nonce and PKCE S256, and a signed cookie for the callback", async () => {
    const response = await fetch(`${service.url}/api/v1/auth/login`);
    const { auth_url }: any = await response.json();
    const url = new URL(auth_url);
    expect(url.origin).toBe(issuer);
    expect(url.searchParams.get("client_id")).toBe(CLIENT_ID);
    expect(url.searchParams.get("redirect_uri")).toBe(`${service.url}/api/v1/auth/callback`);
    expect(url.searchParams.get("scope")).toBe("openid email profile");
    expect(url.searchParams.get("code_challenge_method")).toBe("S256");
    for (const name of ["state", "nonce", "code_challenge"]) expect(url.searchParams.get(name)?.length).toBeGreaterThanOrEqual(43);
    const cookie = setCookieLines(response).find((line) => line.startsWith("oidc_login="))!;
    expect(cookie).toMatch(/Path=\/api\/v1\/auth\/callback/);
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    expect(cookie).toMatch(/Max-Age=600/);

    const browser = await fetch(`${service.url}/api/v1/auth/login`, { redirect: "manual", headers: { accept: "text/html,application/xhtml+xml" } });
    expect(browser.status).toBe(302);
    expect(new URL(browser.headers.get("location")!).origin).toBe(issuer);
    const asked = await fetch(`${service.url}/api/v1/auth/login?redirect=1`, { redirect: "manual" });
    expect(asked.status).toBe(302);
  });

  it("creates a regular account at the first login, signs the same one in the next time, and it can provision a device", async () => {
    const who = account({ email: `${unique("Pat.O'Neil")}@example.com` });
    const first = await signInAs(who);
    expect(first.status, JSON.stringify(first.body)).toBe(302);
    expect(first.location).toBe(`${FRONTEND_URL}/dashboard`);
    const token = first.cookies.get("access_token")!;
    expect(token).toBeTruthy();
    const me = await api("/api/v1/auth/me", { token });
    expect(me.status).toBe(200);
    expect(me.json.data).toMatchObject({ email: who.email.toLowerCase(), full_name: "Pat Example", is_admin: false });
    expect(me.json.data.username).toMatch(/^pat\.o_neil-/);
    const [row] = await usersWithEmail(who.email);
    expect(row).toMatchObject({ oidc_issuer: issuer, oidc_subject: who.sub, is_admin: 0, password_hash: null });

    const again = await signInAs(who);
    expect(again.status).toBe(302);
    const meAgain = await api("/api/v1/auth/me", { token: again.cookies.get("access_token") });
    expect(meAgain.json.data.id).toBe(me.json.data.id);
    expect(await usersWithEmail(who.email)).toHaveLength(1);

    // Single sign-on device set-up: the signed-in operator provisions a terminal.
    const siteId = unique("SITE").toUpperCase();
    expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "OIDC store" } })).status).toBe(201);
    const provisioned = await api("/api/v1/devices/provision", { method: "POST", token, body: { site_id: siteId, device_name: "Till 1" } });
    expect(provisioned.status).toBe(201);
    expect(provisioned.json.api_key).toBeTruthy();
  });

  it("gives a second account whose e-mail's local part is taken a username of its own", async () => {
    const local = unique("same");
    const a = account({ email: `${local}@one.example` });
    const b = account({ email: `${local}@two.example` });
    const first = await signInAs(a);
    const second = await signInAs(b);
    const names = await Promise.all([first, second].map(async (r) => (await api("/api/v1/auth/me", { token: r.cookies.get("access_token") })).json.data.username));
    expect(names[0]).toBe(local);
    expect(names[1]).toBe(`${local}2`);
  });

  it("links an existing password account by e-mail when the provider verified the address", async () => {
    const email = `${unique("linked")}@example.com`;
    const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } });
    expect(signup.status).toBe(201);
    const [before] = await usersWithEmail(email);
    const who = account({ email, email_verified: true });
    const result = await signInAs(who);
    expect(result.status, JSON.stringify(result.body)).toBe(302);
    const me = await api("/api/v1/auth/me", { token: result.cookies.get("access_token") });
    expect(me.json.data.id).toBe(before.id);
    const [after] = await usersWithEmail(email);
    expect(after).toMatchObject({ id: before.id, oidc_issuer: issuer, oidc_subject: who.sub });
    expect(after.password_hash).toBe(before.password_hash);
  });

  it("collects the invitations waiting for an address only when the provider verified it", async () => {
    const owner = await api("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("owner")}@example.com`, password: "correct-horse" } });
    const token = owner.json.data.access_token;
    const siteId = unique("INVITED").toUpperCase();
    expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Invited store" } })).status).toBe(201);
    const verified = account({ email_verified: true });
    const unverified = account({ email_verified: false });
    for (const who of [verified, unverified]) {
      expect((await api(`/api/v1/sites/${siteId}/members`, { method: "POST", token, body: { email: who.email, role: "operator" } })).status).toBe(202);
    }
    const siteFor = async (who: TestAccount) => {
      const signedIn = await signInAs(who);
      expect(signedIn.status, JSON.stringify(signedIn.body)).toBe(302);
      return (await api(`/api/v1/sites/${siteId}`, { token: signedIn.cookies.get("access_token") })).status;
    };
    expect(await siteFor(verified)).toBe(200);
    expect(await siteFor(unverified)).toBe(404);
    const pending = await api(`/api/v1/sites/${siteId}/invitations`, { token });
    expect(pending.json.invitations.map((i: { email: string }) => i.email)).toEqual([unverified.email.toLowerCase()]);
  });

  it("takes over an account of the replaced service that carries the same subject without an issuer, and refuses one linked to another identity (409)", async () => {
    const db = await service.mf.getD1Database("DB");
    const legacyEmail = `${unique("legacy")}@example.com`;
    expect((await api("/api/v1/auth/signup", { method: "POST", body: { email: legacyEmail, password: "correct-horse" } })).status).toBe(201);
    const legacy = account({ email: legacyEmail });
    await db.prepare("UPDATE users SET oidc_subject = ? WHERE email = ?").bind(legacy.sub, legacyEmail).run();
    expect((await signInAs(legacy)).status).toBe(302);
    expect((await usersWithEmail(legacyEmail))[0]).toMatchObject({ oidc_issuer: issuer, oidc_subject: legacy.sub });

    const takenEmail = `${unique("taken")}@example.com`;
    const first = account({ email: takenEmail });
    expect((await signInAs(first)).status).toBe(302);
    const second = account({ email: takenEmail });
    const refused = await signInAs(second);
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({ detail: expect.stringMatching(/linked to another identity/) });
    expect((await usersWithEmail(takenEmail))[0]).toMatchObject({ oidc_subject: first.sub });
  });

  it("refuses to link when the provider did not verify the e-mail address, and changes nothing", async () => {
    const email = `${unique("unverified")}@example.com`;
    expect((await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } })).status).toBe(201);
    const who = account({ email, email_verified: false });
    const result = await signInAs(who);
    expect(result.status).toBe(409);
    expect(result.body).toEqual({ detail: expect.stringMatching(/did not verify/) });
    expect(result.cookies.has("access_token")).toBe(false);
    const rows = await usersWithEmail(email);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ oidc_issuer: null, oidc_subject: null });
    expect(await failuresMentioning(who.sub)).toHaveLength(1);
  });

  it("refuses a callback whose state is not the browser's login (400), audited, creating nothing", async () => {
    const who = account();
    const mine = await startLogin();
    const other = await startLogin();
    const returned = await authorize(other.authUrl, who.sub);
    const result = await callback(returned, mine.stateCookie);
    expect(result.status).toBe(400);
    expect(result.body).toEqual({ detail: expect.stringMatching(/state/) });
    const missing = await fetch(returned, { redirect: "manual" });
    expect(missing.status).toBe(400);
    expect(await missing.json()).toEqual({ detail: expect.stringMatching(/state cookie/) });
    expect(await usersWithEmail(who.email)).toHaveLength(0);
    expect((await failuresMentioning("state")).length).toBeGreaterThanOrEqual(2);
  });

  it("refuses a replayed code (401) after it signed in once", async () => {
    const who = account();
    const login = await startLogin();
    const returned = await authorize(login.authUrl, who.sub);
    expect((await callback(returned, login.stateCookie)).status).toBe(302);
    const replay = await callback(returned, login.stateCookie);
    expect(replay.status).toBe(401);
    expect(replay.body).toEqual({ detail: expect.stringMatching(/invalid_grant/) });
    expect(replay.cookies.has("access_token")).toBe(false);
    expect(await failuresMentioning("invalid_grant")).not.toHaveLength(0);
  });

  it("refuses an ID token altered in transit (401: the signature does not verify), creating nothing", async () => {
    const who = account();
    const login = await startLogin();
    const returned = await authorize(login.authUrl, who.sub);
    tamperNextIdToken = true;
    const result = await callback(returned, login.stateCookie);
    expect(result.status).toBe(401);
    expect(result.body).toEqual({ detail: expect.stringMatching(/signature/) });
    expect(await usersWithEmail(who.email)).toHaveLength(0);
    expect(await failuresMentioning("signature")).not.toHaveLength(0);
  });

  it("refuses an ID token carrying another login's nonce (401), creating nothing", async () => {
    const who = account();
    const victim = await startLogin();
    const attacker = await startLogin();
    // The authorization request of one login, its nonce swapped for the other's: the provider puts that nonce in the token.
    const forged = new URL(victim.authUrl);
    forged.searchParams.set("nonce", attacker.authUrl.searchParams.get("nonce")!);
    const returned = await authorize(forged, who.sub);
    const result = await callback(returned, victim.stateCookie);
    expect(result.status).toBe(401);
    expect(result.body).toEqual({ detail: expect.stringMatching(/nonce/) });
    expect(await usersWithEmail(who.email)).toHaveLength(0);
  });

  it("refuses a deactivated account (403)", async () => {
    const who = account();
    expect((await signInAs(who)).status).toBe(302);
    const db = await service.mf.getD1Database("DB");
    await db.prepare("UPDATE users SET is_active = 0 WHERE oidc_subject = ?").bind(who.sub).run();
    const result = await signInAs(who);
    expect(result.status).toBe(403);
    expect(result.cookies.has("access_token")).toBe(false);
  });

  it("follows the provider's key rotation: logins signed with a new key, several at once, verify after the keys are read again", async () => {
    // A first login leaves the provider's current keys in the service's cache.
    expect((await signInAs(account())).status).toBe(302);
    await new Promise((resolve) => setTimeout(resolve, KEY_SET_REFRESH_COOLDOWN_MS + 100));
    const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const rotated = { ...privateKey.export({ format: "jwk" }), kid: unique("rotated"), use: "sig", alg: "RS256" };
    handler = providerFor(service.url, { keys: [rotated] });

    const people = [account(), account(), account()];
    const returns: { url: URL; stateCookie: string }[] = [];
    for (const who of people) {
      const login = await startLogin();
      returns.push({ url: await authorize(login.authUrl, who.sub), stateCookie: login.stateCookie });
    }
    // The callbacks arrive together, each finding a key id the cached set lacks.
    const results = await Promise.all(returns.map(({ url, stateCookie }) => callback(url, stateCookie)));
    for (const result of results) expect(result.status, JSON.stringify(result.body)).toBe(302);
    for (const who of people) expect(await usersWithEmail(who.email)).toHaveLength(1);
  });
});
