/**
 * Sign-in through any OpenID Connect provider: the authorization code flow with PKCE (S256), a
 * state, a nonce, and an ID token verified against the provider's published keys. Nothing is kept
 * server-side between the two legs: the verifier, state and nonce travel in a short-lived cookie
 * signed with a key derived from JWT_SECRET. docs/oidc.md describes configuration and failures.
 */
import { and, eq, isNull } from "drizzle-orm";
import { SignJWT, base64url, createLocalJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload, type JWTVerifyOptions } from "jose";
import { z } from "zod";
import type { AppConfig, Db } from "../env";
import { users } from "../db/schema";
import { ApiError, badRequest, conflict, forbidden, unauthorized } from "../lib/errors";
import { recordAudit } from "./audit";
import { acceptInvitationsForVerifiedEmail } from "./invitations";
import { createExternalUser, findUserByEmail } from "./users";

type UserRow = typeof users.$inferSelect;

/** The cookie carrying the login's verifier, state and nonce from `GET /login` to `GET /callback`. */
export const LOGIN_STATE_COOKIE = "oidc_login";
/** How long a started login may take to come back, in seconds. */
export const LOGIN_STATE_TTL_S = 600;
/** How far the provider's clock may differ from ours when checking `exp` and `iat`. */
export const ID_TOKEN_CLOCK_SKEW_S = 60;
/** Discovery documents are re-read this often. */
const DISCOVERY_TTL_MS = 60 * 60_000;
/** Signing keys are re-read this often, and sooner when a token names a key we do not have... */
const KEY_SET_TTL_MS = 10 * 60_000;
/**
 * ...but not more than once per this interval. ID tokens come from the provider's token endpoint, not
 * from the browser, so an unknown key id means the provider rotated; the pause only keeps a provider
 * that misbehaves from being asked on every login.
 */
const KEY_SET_REFRESH_COOLDOWN_MS = 5_000;
const PROVIDER_TIMEOUT_MS = 10_000;
/** Audience of the login-state cookie's own token, so no other token of ours can stand in for it. */
const LOGIN_STATE_AUDIENCE = "fleet-edge-oidc-login-state";
const CALLBACK_PATH = "/api/v1/auth/callback";

// ---------------------------------------------------------------------------------------------
// Pure parts: random values, PKCE, the signed login-state cookie.

/** A random URL-safe token of `bytes` random bytes (32 bytes: a 43-character PKCE verifier). */
export const randomToken = (bytes = 32) => base64url.encode(crypto.getRandomValues(new Uint8Array(bytes)));

/** The S256 code challenge of a PKCE verifier: base64url(SHA-256(verifier)). */
export async function pkceChallenge(verifier: string): Promise<string> {
  return base64url.encode(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));
}

export interface LoginState {
  state: string;
  nonce: string;
  verifier: string;
}

const LoginStateSchema = z.object({ state: z.string().min(1), nonce: z.string().min(1), verifier: z.string().min(43).max(128) });

/** The cookie key: derived from JWT_SECRET for this one purpose, so it signs nothing else. */
async function loginStateKey(secret: Uint8Array): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode("fleet-edge oidc login-state cookie v1")));
}

/** Signs a login state into a cookie value that expires after LOGIN_STATE_TTL_S. */
export async function sealLoginState(secret: Uint8Array, login: LoginState, nowMs: number): Promise<string> {
  const nowS = Math.floor(nowMs / 1000);
  return new SignJWT({ ...login })
    .setProtectedHeader({ alg: "HS256" })
    .setAudience(LOGIN_STATE_AUDIENCE)
    .setIssuedAt(nowS)
    .setExpirationTime(nowS + LOGIN_STATE_TTL_S)
    .sign(await loginStateKey(secret));
}

/** The login state a cookie value carries, or undefined when it is forged, altered, malformed or expired. */
export async function openLoginState(secret: Uint8Array, cookie: string, nowMs: number): Promise<LoginState | undefined> {
  try {
    const { payload } = await jwtVerify(cookie, await loginStateKey(secret), {
      algorithms: ["HS256"],
      audience: LOGIN_STATE_AUDIENCE,
      currentDate: new Date(nowMs),
      requiredClaims: ["exp"],
    });
    const parsed = LoginStateSchema.safeParse(payload);
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** A username for a new account from its e-mail's local part (the characters a username may hold). */
export function usernameFromEmail(email: string): string {
  const local = email.split("@")[0].replace(/[^\w.@+-]/g, "_").slice(0, 56);
  return local || "user";
}

// ---------------------------------------------------------------------------------------------
// Configuration and the provider's metadata.

export interface OidcSettings {
  issuer: string;
  clientId: string;
  clientSecret: string;
  redirectUri: string;
  scopes: string;
  /** The path the login-state cookie is sent to: the callback's. */
  cookiePath: string;
  /** Where the browser goes once signed in. */
  afterLoginUrl: string;
}

/** Whether OpenID Connect sign-in is offered: its three required settings are present. */
export const oidcConfigured = (config: AppConfig) => Boolean(config.oidc.issuer && config.oidc.clientId && config.oidc.clientSecret);

/** The settings, or 503 naming what is missing or malformed. `requestUrl` supplies the defaults' origin. */
export function oidcSettings(config: AppConfig, requestUrl: string): OidcSettings {
  const { issuer, clientId, clientSecret, redirectUri, scopes, frontendUrl } = config.oidc;
  const missing = [["OIDC_ISSUER", issuer], ["OIDC_CLIENT_ID", clientId], ["OIDC_CLIENT_SECRET", clientSecret]]
    .filter(([, value]) => !value).map(([name]) => name);
  if (!issuer || !clientId || !clientSecret) {
    throw new ApiError(503, `OpenID Connect login is not configured on this service: set ${missing.join(", ")}`);
  }
  const origin = new URL(requestUrl).origin;
  const callback = redirectUri ?? `${origin}${CALLBACK_PATH}`;
  for (const [name, value] of [["OIDC_ISSUER", issuer], ["OIDC_REDIRECT_URI", callback], ["FRONTEND_URL", frontendUrl]] as const) {
    if (value !== undefined && !isAbsoluteUrl(value)) throw new ApiError(503, `OpenID Connect login is misconfigured: ${name} is not an absolute URL`);
  }
  return {
    issuer,
    clientId,
    clientSecret,
    redirectUri: callback,
    scopes,
    cookiePath: new URL(callback).pathname,
    afterLoginUrl: frontendUrl ? `${frontendUrl}/dashboard` : `${origin}/dashboard/`,
  };
}

function isAbsoluteUrl(value: string): boolean {
  try {
    return /^https?:$/.test(new URL(value).protocol);
  } catch {
    return false;
  }
}

const ProviderMetadataSchema = z.object({
  issuer: z.string().min(1),
  authorization_endpoint: z.url(),
  token_endpoint: z.url(),
  jwks_uri: z.url(),
  userinfo_endpoint: z.url().optional(),
  token_endpoint_auth_methods_supported: z.array(z.string()).optional(),
  id_token_signing_alg_values_supported: z.array(z.string()).optional(),
});
type ProviderMetadata = z.infer<typeof ProviderMetadataSchema>;

const discoveryCache = new Map<string, { metadata: ProviderMetadata; expiresAt: number }>();
/**
 * The keys themselves, never a fetch in flight: a Worker request may not await a promise another
 * request started, so two logins that find the cache stale each fetch the keys (jose's remote key
 * set shares one pending fetch between callers, which is why it is not used here).
 */
const keySets = new Map<string, { keys: ReturnType<typeof createLocalJWKSet>; fetchedAt: number }>();

const unreachable = (what: string) => new ApiError(502, `The identity provider could not be used: ${what}`);
const withoutTrailingSlash = (url: string) => url.replace(/\/+$/, "");

/** The provider's discovery document (cached for an hour per isolate). */
export async function discoverProvider(issuer: string, now: number): Promise<ProviderMetadata> {
  const cached = discoveryCache.get(issuer);
  if (cached && cached.expiresAt > now) return cached.metadata;
  const url = `${withoutTrailingSlash(issuer)}/.well-known/openid-configuration`;
  let response: Response;
  try {
    response = await fetch(url, { headers: { accept: "application/json" }, signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS) });
  } catch (error) {
    throw unreachable(`discovery at ${url} failed (${error instanceof Error ? error.message : String(error)})`);
  }
  if (!response.ok) throw unreachable(`discovery at ${url} answered ${response.status}`);
  const parsed = ProviderMetadataSchema.safeParse(await response.json().catch(() => undefined));
  if (!parsed.success) throw unreachable(`discovery at ${url} is not an OpenID Provider configuration`);
  // The document must speak for the issuer it was fetched from, or its keys prove nothing about it.
  if (withoutTrailingSlash(parsed.data.issuer) !== withoutTrailingSlash(issuer)) {
    throw unreachable(`discovery at ${url} names the issuer ${parsed.data.issuer}, not OIDC_ISSUER`);
  }
  discoveryCache.set(issuer, { metadata: parsed.data, expiresAt: now + DISCOVERY_TTL_MS });
  return parsed.data;
}

const JsonWebKeySetSchema = z.object({ keys: z.array(z.looseObject({ kty: z.string() })) });

async function fetchKeySet(jwksUri: string, now: number) {
  let response: Response;
  try {
    response = await fetch(jwksUri, { headers: { accept: "application/json" }, signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS) });
  } catch (error) {
    throw unreachable(`its signing keys could not be read from ${jwksUri} (${error instanceof Error ? error.message : String(error)})`);
  }
  if (!response.ok) throw unreachable(`its signing keys could not be read: ${jwksUri} answered ${response.status}`);
  const parsed = JsonWebKeySetSchema.safeParse(await response.json().catch(() => undefined));
  if (!parsed.success) throw unreachable(`its signing keys could not be read: ${jwksUri} is not a JSON Web Key Set`);
  const entry = { keys: createLocalJWKSet(parsed.data as JSONWebKeySet), fetchedAt: now };
  keySets.set(jwksUri, entry);
  return entry;
}

/**
 * Verifies a token with the provider's keys, cached per isolate. A token signed with a key the cache
 * lacks (the provider rotated) re-reads the keys once and tries again.
 */
async function verifyWithProviderKeys(token: string, jwksUri: string, options: JWTVerifyOptions, now: number) {
  let keySet = keySets.get(jwksUri);
  if (!keySet || now - keySet.fetchedAt >= KEY_SET_TTL_MS) keySet = await fetchKeySet(jwksUri, now);
  try {
    return await jwtVerify(token, keySet.keys, options);
  } catch (error) {
    const mayBeRotated = error instanceof joseErrors.JWKSNoMatchingKey || error instanceof joseErrors.JWKSMultipleMatchingKeys;
    if (!mayBeRotated || now - keySet.fetchedAt < KEY_SET_REFRESH_COOLDOWN_MS) throw error;
    return jwtVerify(token, (await fetchKeySet(jwksUri, now)).keys, options);
  }
}

// ---------------------------------------------------------------------------------------------
// The first leg: GET /login.

export interface StartedLogin {
  authUrl: string;
  /** The signed login state, to be set as LOGIN_STATE_COOKIE on `cookiePath`. */
  cookie: string;
  cookiePath: string;
}

export async function startLogin(config: AppConfig, requestUrl: string, now: number): Promise<StartedLogin> {
  const settings = oidcSettings(config, requestUrl);
  const provider = await discoverProvider(settings.issuer, now);
  const login: LoginState = { state: randomToken(), nonce: randomToken(), verifier: randomToken() };
  const authUrl = new URL(provider.authorization_endpoint);
  const params = {
    response_type: "code",
    client_id: settings.clientId,
    redirect_uri: settings.redirectUri,
    scope: settings.scopes,
    state: login.state,
    nonce: login.nonce,
    code_challenge: await pkceChallenge(login.verifier),
    code_challenge_method: "S256",
  };
  for (const [name, value] of Object.entries(params)) authUrl.searchParams.set(name, value);
  return { authUrl: authUrl.toString(), cookie: await sealLoginState(config.jwt.secret, login, now), cookiePath: settings.cookiePath };
}

// ---------------------------------------------------------------------------------------------
// The second leg: GET /callback.

export interface CallbackParams {
  code?: string;
  state?: string;
  error?: string;
  error_description?: string;
}

export interface CompletedLogin {
  user: UserRow;
  /** What happened to the account: found by its identity, linked by verified e-mail, or created. */
  outcome: "signed_in" | "linked" | "created";
  afterLoginUrl: string;
  cookiePath: string;
}

/**
 * Checks the callback against the browser's login state, exchanges the code, verifies the ID token
 * and finds, links or creates the account. Every refusal is audited as `login_failed` with its
 * reason and changes nothing else.
 */
export async function completeLogin(
  db: Db,
  config: AppConfig,
  request: Request,
  params: CallbackParams,
  stateCookie: string | undefined,
  now: number,
): Promise<CompletedLogin> {
  const settings = oidcSettings(config, request.url);
  let claims: IdentityClaims | undefined;
  try {
    const login = stateCookie ? await openLoginState(config.jwt.secret, stateCookie, now) : undefined;
    if (!login) throw badRequest("The login has no valid state cookie (missing, altered or older than 10 minutes): start again at GET /api/v1/auth/login");
    if (!params.state || params.state !== login.state) throw badRequest("The state parameter does not match this browser's login: start again at GET /api/v1/auth/login");
    if (params.error) throw badRequest(`The identity provider refused the login: ${params.error}${params.error_description ? ` (${params.error_description.slice(0, 200)})` : ""}`);
    if (!params.code) throw badRequest("The callback carries no authorization code");
    const provider = await discoverProvider(settings.issuer, now);
    const tokens = await exchangeCode(provider, settings, params.code, login.verifier);
    claims = await verifyIdToken(provider, settings, tokens.id_token, login.nonce, now);
    claims = await withUserInfo(provider, claims, tokens.access_token);
    const { user, outcome } = await findOrLinkUser(db, provider.issuer, claims, request, now);
    await recordAudit(db, {
      eventType: "login_success",
      description: `User ${user.email} logged in through OpenID Connect`,
      userId: user.id,
      metadata: { user_id: user.id, method: "oidc", issuer: provider.issuer, outcome },
      request,
    });
    // Invitations go to an e-mail address: only one the provider vouches for may collect them.
    if (claims.emailVerified) await acceptInvitationsForVerifiedEmail(db, user, request);
    return { user, outcome, afterLoginUrl: settings.afterLoginUrl, cookiePath: settings.cookiePath };
  } catch (error) {
    if (error instanceof ApiError && error.status !== 503) {
      const reason = typeof error.detail === "string" ? error.detail : "invalid callback";
      await recordAudit(db, {
        eventType: "login_failed",
        description: `Failed OpenID Connect login${claims?.email ? ` for ${claims.email}` : ""}: ${reason}`,
        metadata: { method: "oidc", reason, issuer: settings.issuer, ...(claims ? { subject: claims.subject, email: claims.email ?? null } : {}) },
        request,
      });
    }
    throw error;
  }
}

const TokenResponseSchema = z.object({ id_token: z.string().min(1), access_token: z.string().min(1).optional() });
const TokenErrorSchema = z.object({ error: z.string(), error_description: z.string().optional() });

/** Exchanges the code with the PKCE verifier; the client authenticates the way the provider advertises. */
async function exchangeCode(provider: ProviderMetadata, settings: OidcSettings, code: string, verifier: string): Promise<z.infer<typeof TokenResponseSchema>> {
  const form = new URLSearchParams({ grant_type: "authorization_code", code, redirect_uri: settings.redirectUri, code_verifier: verifier });
  const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
  const methods = provider.token_endpoint_auth_methods_supported ?? ["client_secret_basic"];
  if (methods.includes("client_secret_basic") || !methods.includes("client_secret_post")) {
    // RFC 6749 §2.3.1: each part form-encoded before joining.
    const encode = (value: string) => encodeURIComponent(value).replace(/%20/g, "+");
    headers.authorization = `Basic ${btoa(`${encode(settings.clientId)}:${encode(settings.clientSecret)}`)}`;
  } else {
    form.set("client_id", settings.clientId);
    form.set("client_secret", settings.clientSecret);
  }
  let response: Response;
  try {
    response = await fetch(provider.token_endpoint, { method: "POST", headers, body: form, signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS) });
  } catch (error) {
    throw unreachable(`the token endpoint failed (${error instanceof Error ? error.message : String(error)})`);
  }
  const body: unknown = await response.json().catch(() => undefined);
  if (!response.ok) {
    const refusal = TokenErrorSchema.safeParse(body);
    if (refusal.success && refusal.data.error === "invalid_grant") {
      throw unauthorized("The identity provider refused the authorization code (invalid_grant): it has expired, was already used, or was issued for another login");
    }
    if (refusal.success && response.status < 500) throw unreachable(`the token endpoint refused this service (${refusal.data.error}): check OIDC_CLIENT_ID, OIDC_CLIENT_SECRET and OIDC_REDIRECT_URI`);
    throw unreachable(`the token endpoint answered ${response.status}`);
  }
  const tokens = TokenResponseSchema.safeParse(body);
  if (!tokens.success) throw unreachable("the token endpoint returned no ID token");
  return tokens.data;
}

const UserInfoSchema = z.object({
  sub: z.string(),
  email: z.string().optional(),
  email_verified: z.union([z.boolean(), z.string()]).optional(),
  name: z.string().optional(),
});

/**
 * Providers that follow the core spec to the letter put the e-mail claims of the `email` scope in
 * the UserInfo answer rather than in the ID token when an access token is issued: read them there,
 * for the subject the verified ID token names.
 */
async function withUserInfo(provider: ProviderMetadata, claims: IdentityClaims, accessToken: string | undefined): Promise<IdentityClaims> {
  if (claims.email || !provider.userinfo_endpoint || !accessToken) return claims;
  let response: Response;
  try {
    response = await fetch(provider.userinfo_endpoint, { headers: { authorization: `Bearer ${accessToken}`, accept: "application/json" }, signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS) });
  } catch (error) {
    throw unreachable(`the UserInfo endpoint failed (${error instanceof Error ? error.message : String(error)})`);
  }
  const info = UserInfoSchema.safeParse(response.ok ? await response.json().catch(() => undefined) : undefined);
  if (!info.success) throw unreachable(`the UserInfo endpoint answered ${response.status} without the user's claims`);
  if (info.data.sub !== claims.subject) throw unauthorized("The UserInfo answer is about another subject than the ID token");
  return { ...claims, ...identityOf(info.data), subject: claims.subject };
}

/** The claims the service uses, from an ID token or a UserInfo answer. */
function identityOf(claims: Record<string, unknown>): Omit<IdentityClaims, "subject"> {
  const email = typeof claims.email === "string" && claims.email.includes("@") ? claims.email.toLowerCase() : undefined;
  return {
    email,
    // Some providers send the flag as a string.
    emailVerified: claims.email_verified === true || claims.email_verified === "true",
    name: typeof claims.name === "string" ? claims.name.slice(0, 200) : undefined,
  };
}

interface IdentityClaims {
  subject: string;
  email?: string;
  emailVerified: boolean;
  name?: string;
}

const ASYMMETRIC_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"];

/** Verifies the ID token's signature against the provider's keys and its `iss`, `aud`, `azp`, `exp`, `iat` and `nonce`. */
async function verifyIdToken(provider: ProviderMetadata, settings: OidcSettings, idToken: string, nonce: string, now: number): Promise<IdentityClaims> {
  // Only public-key signatures: "none" proves nothing and a shared-secret one is not the provider's key.
  const advertised = provider.id_token_signing_alg_values_supported ?? ["RS256"];
  const algorithms = advertised.filter((alg) => ASYMMETRIC_ALGORITHMS.includes(alg));
  let payload: JWTPayload;
  try {
    ({ payload } = await verifyWithProviderKeys(idToken, provider.jwks_uri, {
      algorithms: algorithms.length > 0 ? algorithms : ["RS256"],
      issuer: provider.issuer,
      audience: settings.clientId,
      clockTolerance: ID_TOKEN_CLOCK_SKEW_S,
      requiredClaims: ["sub", "iat", "exp"],
      currentDate: new Date(now),
    }, now));
  } catch (error) {
    throw idTokenRefusal(error);
  }
  if (typeof payload.iat === "number" && payload.iat > now / 1000 + ID_TOKEN_CLOCK_SKEW_S) throw unauthorized("The ID token was issued in the future (iat)");
  if (Array.isArray(payload.aud) && payload.aud.length > 1 && payload.azp !== settings.clientId) throw unauthorized("The ID token was issued to another party (azp)");
  if (payload.nonce !== nonce) throw unauthorized("The ID token's nonce does not match this login");
  return { subject: String(payload.sub), ...identityOf(payload) };
}

function idTokenRefusal(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  // A plain JOSEError (no subclass) is what jose throws when the key set answers anything but 200.
  const keysUnreadable = !(error instanceof joseErrors.JOSEError) || error.code === "ERR_JOSE_GENERIC"
    || error instanceof joseErrors.JWKSTimeout || error instanceof joseErrors.JWKSInvalid;
  if (keysUnreadable) {
    return unreachable(`its signing keys could not be read (${error instanceof Error ? error.message : String(error)})`);
  }
  if (error instanceof joseErrors.JWTExpired) return unauthorized("The ID token has expired");
  if (error instanceof joseErrors.JWTClaimValidationFailed) return unauthorized(`The ID token's ${error.claim} claim is not valid for this service: ${error.message}`);
  if (error instanceof joseErrors.JWSSignatureVerificationFailed || error instanceof joseErrors.JWKSNoMatchingKey) {
    return unauthorized("The ID token's signature does not verify against the identity provider's keys");
  }
  return unauthorized(`The ID token is not valid: ${error.message}`);
}

/**
 * The account of a verified identity: the one linked to (issuer, subject); else the account with the
 * same e-mail, linked now if the provider verified the address; else a new regular account.
 */
async function findOrLinkUser(db: Db, issuer: string, claims: IdentityClaims, request: Request, now: number): Promise<{ user: UserRow; outcome: CompletedLogin["outcome"] }> {
  const byIdentity = () => db.select().from(users).where(and(eq(users.oidcIssuer, issuer), eq(users.oidcSubject, claims.subject))).get();
  const linked = await byIdentity();
  if (linked) {
    if (!linked.isActive) throw forbidden("This account is deactivated");
    return { user: linked, outcome: "signed_in" };
  }
  if (!claims.email) throw badRequest("The identity provider gave no e-mail address: request the email scope (OIDC_SCOPES)");
  const existing = await findUserByEmail(db, claims.email);
  if (existing) {
    if (!claims.emailVerified) throw conflict("An account with this e-mail address exists and the identity provider did not verify the address, so it is not linked: sign in with the password instead");
    if (!existing.isActive) throw forbidden("This account is deactivated");
    // Accounts of the Google-only service this one replaces carry a subject without an issuer: the same subject may claim it.
    const legacySameSubject = existing.oidcIssuer === null && existing.oidcSubject === claims.subject;
    if (existing.oidcSubject !== null && !legacySameSubject) throw conflict("The account with this e-mail address is linked to another identity");
    const updated = await db.update(users)
      .set({ oidcIssuer: issuer, oidcSubject: claims.subject, updatedAt: new Date(now).toISOString() })
      .where(and(eq(users.id, existing.id), legacySameSubject ? eq(users.oidcSubject, claims.subject) : isNull(users.oidcSubject)))
      .returning().get();
    if (!updated) throw conflict("The account with this e-mail address is linked to another identity");
    return { user: updated, outcome: "linked" };
  }
  const created = await createExternalUser(db, {
    email: claims.email,
    username: usernameFromEmail(claims.email),
    fullName: claims.name,
    oidcIssuer: issuer,
    oidcSubject: claims.subject,
  }, request);
  // Two callbacks of one identity racing: the other created it.
  if (!created) {
    const winner = await byIdentity();
    if (winner) return { user: winner, outcome: "signed_in" };
    throw conflict("An account with this e-mail address was created meanwhile: sign in again");
  }
  return { user: created, outcome: "created" };
}
