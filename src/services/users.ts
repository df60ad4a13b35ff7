import { asc, desc, eq, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditLogs, siteMemberships, tenantMemberships, users, wsTickets } from "../db/schema";
import { badRequest, isUniqueViolation, unauthorized } from "../lib/errors";
import { auditRow } from "../shared/audit-row";
import { visibleSiteIds } from "./access";
import { syncLiveAccess } from "./live-access";
import { forgetCachedSiteAccess } from "./site-access-cache";
import { decoyVerify, hashSecret, verifySecret } from "./passwords";
import { recordAudit } from "./audit";
import { clientOfRequest, verifyThrottled } from "./credential-throttle";
import { currentDate } from "../lib/clock";

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

/**
 * The account of an e-mail address, whatever its case. New addresses are stored in lower case, but
 * accounts from before that keep their spelling; where two such accounts differ only in case, the
 * exact spelling wins, then the older account.
 */
export const findUserByEmail = (db: Db, email: string) =>
  db.select().from(users)
    .where(sql`lower(${users.email}) = lower(${email})`)
    .orderBy(desc(sql`${users.email} = ${email}`), asc(users.caseFoldExempt), asc(users.id))
    .get();

const usernameTaken = async (db: Db, username: string) =>
  !!(await db.select({ id: users.id }).from(users).where(sql`lower(${users.username}) = lower(${username})`).get());

export const findUserById = (db: Db, id: number) => db.select().from(users).where(eq(users.id, id)).get();

export async function createUser(
  db: Db,
  input: { email: string; password: string; username?: string; fullName?: string },
): Promise<UserRow> {
  const email = input.email.toLowerCase();
  // A local part may hold characters a chosen username may not (o'brien@…): those become "_".
  const username = input.username ?? email.split("@")[0].replace(/[^\w.@+-]/g, "_");
  if (await findUserByEmail(db, email)) throw badRequest("Email already registered");
  if (await usernameTaken(db, username)) throw badRequest("Username already taken");
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
    if (isUniqueViolation(error, "users.email") || isUniqueViolation(error, "users_email_ci_uq")) throw badRequest("Email already registered");
    if (isUniqueViolation(error, "users.username") || isUniqueViolation(error, "users_username_ci_uq")) throw badRequest("Username already taken");
    throw error;
  }
}

/**
 * Creates a regular account for an identity from an OpenID Connect provider: no password, never
 * an administrator. The username is the one asked for, or it with the first free number appended.
 * Audited as `user_created`. Undefined when the e-mail address or the identity was taken meanwhile.
 */
export async function createExternalUser(
  db: Db,
  input: { email: string; username: string; fullName?: string; oidcIssuer: string; oidcSubject: string },
  request?: Request,
): Promise<UserRow | undefined> {
  for (let attempt = 0; attempt < 20; attempt++) {
    let username = input.username;
    for (let n = 2; await usernameTaken(db, username); n++) username = `${input.username}${n}`;
    try {
      const row = await db.insert(users).values({
        email: input.email.toLowerCase(),
        username,
        fullName: input.fullName ?? null,
        passwordHash: null,
        isAdmin: false,
        oidcIssuer: input.oidcIssuer,
        oidcSubject: input.oidcSubject,
      }).returning().get();
      await recordAudit(db, {
        eventType: "user_created",
        description: `User ${row.email} signed up through OpenID Connect`,
        userId: row.id,
        metadata: { method: "oidc", issuer: input.oidcIssuer },
        request,
      });
      return row;
    } catch (error) {
      // Another account took the username between the check and the insert: look for the next one.
      if (isUniqueViolation(error, "users.username") || isUniqueViolation(error, "users_username_ci_uq")) continue;
      if (isUniqueViolation(error)) return undefined;
      throw error;
    }
  }
  return undefined;
}

/**
 * Deletes the user with their memberships and unused WebSocket tickets, in one batch with its audit
 * row, then closes their live connections on every site they could see.
 */
export async function deleteUser(db: Db, env: Env, target: UserRow, by: AuthUser, request?: Request) {
  const sitesSeen = await visibleSiteIds(db, toAuthUser(target));
  await db.batch([
    db.delete(siteMemberships).where(eq(siteMemberships.userId, target.id)),
    db.delete(tenantMemberships).where(eq(tenantMemberships.userId, target.id)),
    db.delete(wsTickets).where(eq(wsTickets.userId, target.id)),
    db.delete(users).where(eq(users.id, target.id)),
    db.insert(auditLogs).values(auditRow({
      eventType: "user_deleted",
      description: `User ${target.email} deleted`,
      userId: by.id,
      metadata: { deleted_user_id: target.id, email: target.email },
      request,
    })),
  ]);
  forgetCachedSiteAccess();
  await syncLiveAccess(env, db, target.id, sitesSeen);
}

/**
 * Deactivates or reactivates a user. A deactivated user's tokens stop working at once (every
 * request re-reads the user), and their live connections on every site they could see are closed.
 */
export async function setUserActive(db: Db, env: Env, target: UserRow, active: boolean, by: AuthUser, request?: Request) {
  await db.batch([
    db.update(users).set({ isActive: active, updatedAt: currentDate().toISOString() }).where(eq(users.id, target.id)),
    db.insert(auditLogs).values(auditRow({
      eventType: active ? "user_activated" : "user_deactivated",
      description: `User ${target.email} ${active ? "reactivated" : "deactivated"}`,
      userId: by.id,
      metadata: { target_user_id: target.id, email: target.email },
      request,
    })),
  ]);
  forgetCachedSiteAccess();
  if (!active) await syncLiveAccess(env, db, target.id, await visibleSiteIds(db, toAuthUser(target)));
  return { ...target, isActive: active };
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
