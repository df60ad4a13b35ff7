import { eq } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { users } from "../db/schema";
import { badRequest, isUniqueViolation, unauthorized } from "../lib/errors";
import { decoyVerify, hashSecret, verifySecret } from "./passwords";
import { recordAudit } from "./audit";
import { clientOfRequest, verifyThrottled } from "./credential-throttle";

type UserRow = typeof users.$inferSelect;

export const toAuthUser = (row: UserRow): AuthUser => ({
  id: row.id,
  email: row.email,
  username: row.username,
  fullName: row.fullName,
  isAdmin: row.isAdmin,
});

export async function findActiveUserById(db: Db, id: number): Promise<AuthUser | undefined> {
  const row = await db.select().from(users).where(eq(users.id, id)).get();
  return row && row.isActive ? toAuthUser(row) : undefined;
}

export const findUserByEmail = (db: Db, email: string) =>
  db.select().from(users).where(eq(users.email, email.toLowerCase())).get();

export const findUserById = (db: Db, id: number) => db.select().from(users).where(eq(users.id, id)).get();

export async function createUser(
  db: Db,
  input: { email: string; password: string; username?: string; fullName?: string },
): Promise<UserRow> {
  const email = input.email.toLowerCase();
  // A local part may hold characters a chosen username may not (o'brien@…): those become "_".
  const username = input.username ?? email.split("@")[0].replace(/[^\w.@+-]/g, "_");
  if (await findUserByEmail(db, email)) throw badRequest("Email already registered");
  if (await db.select({ id: users.id }).from(users).where(eq(users.username, username)).get()) {
    throw badRequest("Username already taken");
  }
  const passwordHash = await hashSecret(input.password);
  try {
    const row = await db
      .insert(users)
      .values({ email, username, fullName: input.fullName ?? null, passwordHash, isAdmin: false })
      .returning()
      .get();
    return row;
  } catch (error) {
    // Two signups racing past the checks above: the unique indexes decide.
    if (isUniqueViolation(error, "users.email")) throw badRequest("Email already registered");
    if (isUniqueViolation(error, "users.username")) throw badRequest("Username already taken");
    throw error;
  }
}

export async function deleteUserByEmail(db: Db, email: string): Promise<boolean> {
  const deleted = await db.delete(users).where(eq(users.email, email.toLowerCase())).returning({ id: users.id }).all();
  return deleted.length > 0;
}

export const LOGIN_FAILED = "Incorrect email or password";
export const LOGIN_THROTTLED = "Too many failed logins; try again later";

/**
 * Checks an e-mail address and password: the user, or 401 (one body, and one bcrypt's time, for an
 * unknown address and a wrong password). The bcrypt is throttled per address and client
 * (verifyThrottled), so a flood of wrong passwords answers 429 without hashing; each failure that
 * was checked is audited as `login_failed`.
 */
export async function verifyLogin(env: Env, db: Db, email: string, password: string, request?: Request): Promise<UserRow> {
  let user: UserRow | undefined;
  const valid = await verifyThrottled(env, { kind: "email", id: email, client: clientOfRequest(request), refusal: LOGIN_THROTTLED }, async () => {
    user = await findUserByEmail(db, email);
    return user?.passwordHash && user.isActive ? verifySecret(password, user.passwordHash) : decoyVerify(password);
  });
  if (!user || !valid) {
    await recordAudit(db, {
      eventType: "login_failed",
      description: `Failed login for ${email.toLowerCase()}`,
      userId: user?.id ?? null,
      metadata: { email: email.toLowerCase() },
      request,
    });
    throw unauthorized(LOGIN_FAILED);
  }
  return user;
}
