import { exports } from "cloudflare:workers";
import { env } from "cloudflare:workers";
import { drizzle } from "drizzle-orm/d1";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { checkResponse } from "./response-contract";

export const db = () => drizzle(env.DB, { schema });

let counter = 0;
/** Unique per call: storage is shared by the tests of one file. */
export const unique = (prefix = "t") => `${prefix}${Date.now().toString(36)}${(counter++).toString(36)}${Math.random().toString(36).slice(2, 6)}`;

export interface Call {
  method?: string;
  body?: unknown;
  rawBody?: string;
  token?: string;
  cookie?: string;
  headers?: Record<string, string>;
}

/**
 * Sends a request through the Worker and checks the answer against the route's declared responses
 * (status and JSON body schema); a mismatch throws, failing the test that made the call.
 */
export async function fetchChecked(request: Request) {
  const response = await exports.default.fetch(request);
  await checkResponse(request, response);
  return response;
}

export async function call(path: string, { method = "GET", body, rawBody, token, cookie, headers = {} }: Call = {}) {
  const h = new Headers(headers);
  if (body !== undefined || rawBody !== undefined) h.set("Content-Type", "application/json");
  if (token) h.set("Authorization", `Bearer ${token}`);
  if (cookie) h.set("Cookie", cookie);
  const response = await fetchChecked(new Request(`http://fleet.test${path}`, {
    method,
    headers: h,
    body: rawBody ?? (body === undefined ? undefined : JSON.stringify(body)),
  }));
  const text = await response.text();
  let json: any;
  try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
  return { status: response.status, headers: response.headers, json, text };
}

export async function signup(overrides: { email?: string; password?: string; username?: string } = {}) {
  const email = overrides.email ?? `${unique("u")}@example.com`;
  const password = overrides.password ?? "correct-horse";
  const res = await call("/api/v1/auth/signup", { method: "POST", body: { email, password, username: overrides.username } });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${res.text}`);
  const user = await db().select().from(schema.users).where(eq(schema.users.email, email)).get();
  return { email, password, token: res.json.data.access_token as string, id: user!.id };
}

export async function admin() {
  const user = await signup();
  await db().update(schema.users).set({ isAdmin: true }).where(eq(schema.users.id, user.id));
  return user;
}

export async function createSite(token: string, body: Record<string, unknown> = {}) {
  const siteId = (body.site_id as string) ?? unique("SITE-");
  const res = await call("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: `Store ${siteId}`, ...body } });
  if (res.status !== 201) throw new Error(`create site failed: ${res.status} ${res.text}`);
  return siteId;
}

/** Polls until `check` returns a truthy value (for work finished in waitUntil after the response). */
export async function eventually<T>(check: () => Promise<T | undefined | null | false>, timeoutMs = 3000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Logs in with e-mail and password (which applies the invitations waiting for the address). */
export async function login(user: { email: string; password: string }) {
  const res = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
  if (res.status !== 200) throw new Error(`login failed: ${res.status} ${res.text}`);
  return res.json.data.access_token as string;
}

/**
 * Gives `user` a role on a site the way an owner does: an e-mail invitation, whose code the user
 * accepts. The user's tokens keep working (roles are read on every request).
 */
export async function grantSiteRole(ownerToken: string, siteId: string, user: { email: string; password: string }, role: string) {
  const res = await call(`/api/v1/sites/${siteId}/members`, { method: "POST", token: ownerToken, body: { email: user.email, role } });
  if (res.status !== 202) throw new Error(`invitation failed: ${res.status} ${res.text}`);
  const accepted = await call("/api/v1/invitations/accept", { method: "POST", token: await login(user), body: { invitation_code: res.json.invitation_code } });
  if (accepted.status !== 200) throw new Error(`accepting the invitation failed: ${accepted.status} ${accepted.text}`);
}
