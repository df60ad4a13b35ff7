import { z } from "@hono/zod-openapi";
import { setCookie } from "hono/cookie";
import { THROTTLING_DESCRIPTION, apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { ApiError, notFound, unauthorized } from "../../lib/errors";
import { ACCESS_TOKEN_COOKIE } from "../../middleware/auth";
import { recordAudit } from "../../services/audit";
import { acceptInvitations } from "../../services/invitations";
import { issueAccessToken } from "../../services/tokens";
import { clientOfRequest, limitSignups } from "../../services/credential-throttle";
import { createUser, deleteUser, findUserByEmail, setUserActive, verifyLogin } from "../../services/users";
import { LIVE_REVOKED_CLOSE_CODE } from "../../shared/hub-contract";
import * as s from "./schema";

export const authRoutes = newRouter();

authRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/signup",
    auth: "none",
    tags: ["Auth"],
    summary: "Create an account",
    description: "Creates a regular user. `role` is accepted but never grants administrator rights: administrators are made with `npm run create-admin`. The username defaults to the e-mail's local part. Site and tenant invitations waiting for this e-mail address (compared case-insensitively) are applied. Signups are limited per client address (10 a minute); beyond that they answer 429 with Retry-After.",
    request: jsonBody(s.SignupBody),
    responses: { 201: jsonResponse(s.SignupResponse, "Account created") },
    errors: [400, 429],
  }),
  async (c) => {
    const body = c.req.valid("json");
    await limitSignups(c.env, clientOfRequest(c.req.raw));
    const user = await createUser(c.var.db, { email: body.email, password: body.password, username: body.username, fullName: body.full_name });
    await recordAudit(c.var.db, { eventType: "user_created", description: `User ${user.email} signed up`, userId: user.id, request: c.req.raw });
    await acceptInvitations(c.var.db, user, c.req.raw);
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
    description: "Returns a bearer token and sets it as the httpOnly `access_token` cookie. An unknown e-mail and a wrong password answer the same 401 and take the same time. A successful login applies the site and tenant invitations waiting for the account's e-mail address. Failed logins are counted per e-mail address (known or not) and per client address: " + THROTTLING_DESCRIPTION,
    request: jsonBody(s.LoginBody),
    responses: { 200: jsonResponse(s.LoginResponse, "Logged in") },
    errors: [401, 429],
  }),
  async (c) => {
    const { email, password } = c.req.valid("json");
    const db = c.var.db;
    const user = await verifyLogin(c.env, db, email, password, c.req.raw);
    const accessToken = await issueAccessToken(c.var.config, user);
    await recordAudit(db, { eventType: "login_success", description: `User ${user.email} logged in`, userId: user.id, metadata: { user_id: user.id }, request: c.req.raw });
    await acceptInvitations(db, user, c.req.raw);
    const { cookie, jwt } = c.var.config;
    setCookie(c, ACCESS_TOKEN_COOKIE, accessToken, {
      httpOnly: true,
      sameSite: cookie.sameSite,
      secure: cookie.secure || cookie.sameSite === "None",
      path: "/",
      maxAge: jwt.lifetimeMinutes * 60,
    });
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
    description: "Returns the identity provider's authorization URL. Answers 503 until OpenID Connect is configured (OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI).",
    responses: { 200: jsonResponse(z.object({ auth_url: z.string() }), "Authorization URL") },
    errors: [503],
  }),
  async () => {
    throw new ApiError(503, "OpenID Connect login is not configured on this service");
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
