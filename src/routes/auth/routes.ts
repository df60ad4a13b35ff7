import { z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { AppEnv } from "../../env";
import { THROTTLING_DESCRIPTION, apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { notFound, unauthorized } from "../../lib/errors";
import { ACCESS_TOKEN_COOKIE } from "../../middleware/auth";
import { recordAudit } from "../../services/audit";
import { issueAccessToken } from "../../services/tokens";
import { LOGIN_STATE_COOKIE, LOGIN_STATE_TTL_S, completeLogin, oidcConfigured, startLogin } from "../../services/oidc";
import { assertCookieOrigin } from "../../middleware/cookie-origin";
import { clientOfRequest, limitSignups } from "../../services/credential-throttle";
import { createUser, deleteUser, findUserByEmail, setUserActive, verifyLogin } from "../../services/users";
import { LIVE_REVOKED_CLOSE_CODE } from "../../shared/hub-contract";
import { workerClock } from "../../lib/clock";
import * as s from "./schema";

export const authRoutes = newRouter();

/** The httpOnly `access_token` cookie that password and OpenID Connect logins both set. */
function setAccessTokenCookie(c: Context<AppEnv>, accessToken: string) {
  const { cookie, jwt } = c.var.config;
  setCookie(c, ACCESS_TOKEN_COOKIE, accessToken, {
    httpOnly: true,
    sameSite: cookie.sameSite,
    secure: cookie.secure || cookie.sameSite === "None",
    path: "/",
    maxAge: jwt.lifetimeMinutes * 60,
  });
}

authRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/signup",
    auth: "none",
    tags: ["Auth"],
    summary: "Create an account",
    description: "Creates a regular user. `role` is accepted but never grants administrator rights: administrators are made with `npm run create-admin`. The username defaults to the e-mail's local part. The address is not verified, so invitations waiting for it are not applied: the invitee accepts each with its code (`POST /api/v1/invitations/accept`). Signups are limited per client address (10 a minute); beyond that they answer 429 with Retry-After.",
    request: jsonBody(s.SignupBody),
    responses: { 201: jsonResponse(s.SignupResponse, "Account created") },
    errors: [400, 429],
  }),
  async (c) => {
    const body = c.req.valid("json");
    await limitSignups(c.env, clientOfRequest(c.req.raw));
    const user = await createUser(c.var.db, { email: body.email, password: body.password, username: body.username, fullName: body.full_name });
    await recordAudit(c.var.db, { eventType: "user_created", description: `User ${user.email} signed up`, userId: user.id, request: c.req.raw });
    const accessToken = await issueAccessToken(c.var.config, user);
    return c.json({ success: true, message: "User created successfully", data: { access_token: accessToken } }, 201);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/login",
    auth: "none",
    tags: ["Auth"],
    summary: "Log in with e-mail and password",
    description: "Returns a bearer token and sets it as the httpOnly `access_token` cookie. Every try is audited as `login_attempt` before its outcome (`login_success` or `login_failed`). An unknown e-mail and a wrong password answer the same 401 and take the same time. Failed logins are counted per e-mail address (known or not) and per client address: " + THROTTLING_DESCRIPTION,
    request: jsonBody(s.LoginBody),
    responses: { 200: jsonResponse(s.LoginResponse, "Logged in") },
    errors: [401, 429],
  }),
  async (c) => {
    const { email, password } = c.req.valid("json");
    const db = c.var.db;
    await recordAudit(db, { eventType: "login_attempt", description: `Login attempt for ${email.toLowerCase()}`, metadata: { email: email.toLowerCase(), method: "password" }, request: c.req.raw });
    const user = await verifyLogin(c.env, db, email, password, c.req.raw);
    const accessToken = await issueAccessToken(c.var.config, user);
    await recordAudit(db, { eventType: "login_success", description: `User ${user.email} logged in`, userId: user.id, metadata: { user_id: user.id }, request: c.req.raw });
    setAccessTokenCookie(c, accessToken);
    return c.json({
      success: true,
      message: "Login successful",
      data: { access_token: accessToken, token_type: "bearer" as const, username: user.username, is_admin: user.isAdmin },
    }, 200);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/login",
    auth: "none",
    tags: ["Auth"],
    summary: "Start OpenID Connect login",
    description: "Returns the identity provider's authorization URL (authorization code flow with PKCE S256, a state and a nonce) and sets the short-lived (10 minutes), signed, httpOnly `oidc_login` cookie on the callback's path, which `GET /callback` checks. Answers 302 to that URL instead when `redirect=1` or the request accepts text/html. Answers 503 naming what is missing until OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET are set, and 502 when the provider's discovery document cannot be read. See docs/oidc.md.",
    request: { query: s.OidcLoginQuery },
    responses: {
      200: jsonResponse(s.OidcLoginResponse, "Authorization URL"),
      302: { description: "Redirect to the identity provider (Location)" },
    },
    errors: [502, 503],
  }),
  async (c) => {
    const { redirect } = c.req.valid("query");
    const login = await startLogin(c.var.config, c.req.url, workerClock.now());
    setCookie(c, LOGIN_STATE_COOKIE, login.cookie, {
      httpOnly: true,
      // Lax, whatever COOKIE_SAMESITE says: the callback is a top-level navigation from the provider's site.
      sameSite: "Lax",
      secure: c.var.config.cookie.secure,
      path: login.cookiePath,
      maxAge: LOGIN_STATE_TTL_S,
    });
    const wantsRedirect = redirect === "1" || redirect === "true" || (redirect === undefined && /\btext\/html\b/.test(c.req.header("accept") ?? ""));
    if (wantsRedirect) return c.redirect(login.authUrl, 302);
    return c.json({ auth_url: login.authUrl }, 200);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/callback",
    auth: "none",
    tags: ["Auth"],
    summary: "Finish OpenID Connect login",
    description: "Where the identity provider sends the browser back. Checks `state` against the `oidc_login` cookie, exchanges the code with the PKCE verifier, verifies the ID token against the provider's keys (signature, iss, aud, exp, iat, nonce), then signs in the account linked to that identity; else links the account with the same e-mail address if the provider verified it; else creates a regular account (no password, never an administrator). Sets the `access_token` cookie as password login does and redirects to `{FRONTEND_URL}/dashboard` (or this service's own dashboard, `/dashboard/`, when FRONTEND_URL is unset). Refusals are audited as `login_failed` with the reason and create nothing: 400 missing or wrong state, no code, or the provider's own refusal; 401 a code the provider refuses (expired, replayed) or an ID token that fails verification; 403 a deactivated account; 409 an existing account whose e-mail address the provider did not verify; 502 the provider cannot be reached; 503 not configured. See docs/oidc.md.",
    request: { query: s.OidcCallbackQuery },
    responses: { 302: { description: "Signed in: `access_token` cookie set, redirect to the front end (Location)" } },
    errors: [400, 401, 403, 409, 502, 503],
  }),
  async (c) => {
    const done = await completeLogin(c.var.db, c.var.config, c.req.raw, c.req.valid("query"), getCookie(c, LOGIN_STATE_COOKIE), workerClock.now());
    setAccessTokenCookie(c, await issueAccessToken(c.var.config, done.user));
    deleteCookie(c, LOGIN_STATE_COOKIE, { path: done.cookiePath, httpOnly: true, sameSite: "Lax", secure: c.var.config.cookie.secure });
    return c.redirect(done.afterLoginUrl, 302);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/methods",
    auth: "none",
    tags: ["Auth"],
    summary: "How one can sign in here",
    description: "`password` is always offered; `oidc` when OpenID Connect is configured (OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET set), in which case `oidc_login_url` starts it in a browser. The dashboard's sign-in screen shows its buttons from this.",
    responses: { 200: jsonResponse(s.SignInMethods, "Sign-in methods") },
  }),
  (c) => {
    const oidc = oidcConfigured(c.var.config);
    return c.json({ password: true, oidc, oidc_login_url: oidc ? "/api/v1/auth/login?redirect=1" : null }, 200);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/logout",
    auth: "none",
    tags: ["Auth"],
    summary: "Sign this browser out",
    description: "Clears the httpOnly `access_token` cookie, which a page's scripts cannot do themselves. Needs no credentials (an expired session can still be ended) but is refused (403) from a page of another origin, so no other site can sign a user out. The token itself stays valid until it expires (ACCESS_TOKEN_MINUTES): a client holding it as a bearer token is unaffected. 204 whether or not a cookie was set.",
    responses: { 204: { description: "Signed out: the cookie is cleared" } },
    errors: [403],
  }),
  (c) => {
    assertCookieOrigin(c.req.raw, c.var.config.corsOrigins);
    const { cookie } = c.var.config;
    deleteCookie(c, ACCESS_TOKEN_COOKIE, { path: "/", httpOnly: true, sameSite: cookie.sameSite, secure: cookie.secure || cookie.sameSite === "None" });
    return c.body(null, 204);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/me",
    auth: "user",
    tags: ["Auth"],
    summary: "The current user",
    responses: { 200: jsonResponse(s.MeResponse, "The authenticated user") },
  }),
  (c) => {
    const u = c.var.user!;
    return c.json({
      success: true,
      message: "Current user",
      data: { id: u.id, email: u.email, username: u.username, full_name: u.fullName, is_admin: u.isAdmin },
    }, 200);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "delete",
    path: "/users/{email}",
    auth: "admin",
    tags: ["Auth"],
    summary: "Delete a user (administrators)",
    description: `Removes the user and their site and tenant memberships, and closes their open live connections on every site at once (close code ${LIVE_REVOKED_CLOSE_CODE}). An unknown e-mail answers 401, not 404, as the service this one replaces answered; existing clients rely on it.`,
    request: { params: s.EmailParam },
    responses: { 200: jsonResponse(s.DeleteUserResponse, "User deleted") },
  }),
  async (c) => {
    const { email } = c.req.valid("param");
    const db = c.var.db;
    const target = await findUserByEmail(db, email);
    if (!target) throw unauthorized("User not found");
    await deleteUser(db, c.env, target, c.var.user!, c.req.raw);
    return c.json({ success: true, message: "User deleted successfully", data: { email: target.email } }, 200);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "patch",
    path: "/users/{email}",
    auth: "admin",
    tags: ["Auth"],
    summary: "Deactivate or reactivate a user (administrators)",
    description: `A deactivated user cannot log in, their tokens stop working on the next request, and their open live connections on every site are closed at once (close code ${LIVE_REVOKED_CLOSE_CODE}). Memberships are kept, so reactivating restores their access. Unknown e-mail → 404.`,
    request: { params: s.EmailParam, ...jsonBody(s.UserActiveBody) },
    responses: { 200: jsonResponse(s.UserActiveResponse, "The user's state") },
    errors: [404],
  }),
  async (c) => {
    const { email } = c.req.valid("param");
    const { is_active } = c.req.valid("json");
    const target = await findUserByEmail(c.var.db, email);
    if (!target) throw notFound("User not found");
    const updated = await setUserActive(c.var.db, c.env, target, is_active, c.var.user!, c.req.raw);
    return c.json({ success: true, message: is_active ? "User reactivated" : "User deactivated", data: { email: updated.email, is_active: updated.isActive } }, 200);
  },
);

authRoutes.openapi(
  apiRoute({
    method: "put",
    path: "/users/{user_id}/role",
    auth: "admin",
    tags: ["Auth"],
    summary: "Change a user's role (disabled)",
    description: "Always 501: roles are granted per site and tenant through the members endpoints, and administrators only by the operator script.",
    request: { params: s.UserIdParam, query: s.RoleQuery },
    responses: { 501: jsonResponse(z.object({ detail: z.string() }), "Disabled") },
  }),
  (c) => c.json({ detail: "Role assignment is disabled; use site or tenant membership endpoints" }, 501),
);
