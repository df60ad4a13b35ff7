import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SignJWT } from "jose";
import { call, signup } from "./helpers";

const SECRET = new TextEncoder().encode(env.JWT_SECRET!);
const ISSUER = env.JWT_ISSUER ?? "fleet-edge";
const AUDIENCE = env.JWT_AUDIENCE ?? "fleet-edge-api";
const LIFETIME_S = Number(env.ACCESS_TOKEN_MINUTES ?? "30") * 60;

const nowS = () => Math.floor(Date.now() / 1000);

/** A token signed with the service's own secret, issuer and audience, with the times given. */
function token(userId: number, times: { iat?: number | null; exp: number }) {
  const jwt = new SignJWT({ email: "x@example.com", is_admin: false })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(String(userId))
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setExpirationTime(times.exp);
  if (times.iat !== null) jwt.setIssuedAt(times.iat ?? nowS());
  return jwt.sign(SECRET);
}

const me = async (t: string) => (await call("/api/v1/auth/me", { token: t })).status;

describe("token lifetime", () => {
  it("accepts a token within the configured lifetime (control for the cases below)", async () => {
    const user = await signup();
    expect(LIFETIME_S).toBe(30 * 60);
    expect(await me(await token(user.id, { iat: nowS(), exp: nowS() + LIFETIME_S }))).toBe(200);
    expect(await me(await token(user.id, { iat: nowS() - LIFETIME_S + 60, exp: nowS() + 60 }))).toBe(200);
  });

  it("refuses a token without iat", async () => {
    const user = await signup();
    expect(await me(await token(user.id, { iat: null, exp: nowS() + 600 }))).toBe(401);
  });

  it("refuses a token issued in the future beyond 60 s of clock skew, and accepts one within it", async () => {
    const user = await signup();
    expect(await me(await token(user.id, { iat: nowS() + 300, exp: nowS() + 600 }))).toBe(401);
    expect(await me(await token(user.id, { iat: nowS() + 90, exp: nowS() + 600 }))).toBe(401);
    expect(await me(await token(user.id, { iat: nowS() + 30, exp: nowS() + 600 }))).toBe(200);
  });

  it("refuses a token that claims a longer life than the service grants", async () => {
    const user = await signup();
    const tenYears = 10 * 365 * 86_400;
    expect(await me(await token(user.id, { iat: nowS(), exp: nowS() + tenYears }))).toBe(401);
    expect(await me(await token(user.id, { iat: nowS(), exp: nowS() + LIFETIME_S + 120 }))).toBe(401);
  });

  it("refuses a token older than the lifetime, whatever its exp says", async () => {
    const user = await signup();
    expect(await me(await token(user.id, { iat: nowS() - LIFETIME_S - 120, exp: nowS() + 600 }))).toBe(401);
    expect(await me(await token(user.id, { iat: nowS() - 365 * 86_400, exp: nowS() + 600 }))).toBe(401);
  });

  it("accepts the tokens the service issues itself, from signup and login", async () => {
    const user = await signup();
    expect(await me(user.token)).toBe(200);
    const login = await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    expect(await me(login.json.data.access_token)).toBe(200);
  });
});
