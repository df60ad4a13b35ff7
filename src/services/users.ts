import { eq } from "drizzle-orm";
import type { AuthUser, Db } from "../env";
import { users } from "../db/schema";
import { badRequest, isUniqueViolation } from "../lib/errors";
import { hashSecret } from "./passwords";

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
  const username = input.username ?? email.split("@")[0];
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
