import { afterEach, describe, expect, it, vi } from "vitest";
import { env } from "cloudflare:workers";
import { eq, inArray, like } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { COMMAND_RETENTION_MS } from "../../src/shared/vocabulary";
import { db, signup, unique } from "./helpers";
import { runCron } from "./commands-helpers";

const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();

afterEach(() => { vi.restoreAllMocks(); });

/** Rows that tell old from fresh by a marker this test chose. */
async function seedRetention(now: number, tag: string) {
  const user = await signup();
  // Raw request-log rows are kept 7 days (the rollups keep their aggregates for the analytics retention).
  await db().insert(schema.apiRequestLogs).values([
    { endpoint: `/${tag}/old`, method: "GET", statusCode: 200, responseTimeMs: 1, createdAt: iso(now - 8 * DAY) },
    { endpoint: `/${tag}/fresh`, method: "GET", statusCode: 200, responseTimeMs: 1, createdAt: iso(now - 6 * DAY) },
  ]);
  await db().insert(schema.userActivities).values([
    { userId: user.id, activityType: `${tag}/old`, createdAt: iso(now - 91 * DAY) },
    { userId: user.id, activityType: `${tag}/fresh`, createdAt: iso(now - 89 * DAY) },
  ]);
  await db().insert(schema.wsTickets).values([
    { ticketHash: `${tag}/old`, siteId: tag, userId: user.id, expiresAt: iso(now - 1000) },
    { ticketHash: `${tag}/fresh`, siteId: tag, userId: user.id, expiresAt: iso(now + 60_000) },
  ]);
  // Closed long enough ago to forget; closed recently (kept for lookups); still open and within its TTL.
  await db().insert(schema.commandIndex).values([
    { commandId: `${tag}/old`, siteId: tag, deviceId: "D", expiresAt: iso(now - COMMAND_RETENTION_MS - 2 * DAY), closedAt: iso(now - COMMAND_RETENTION_MS - DAY) },
    { commandId: `${tag}/fresh`, siteId: tag, deviceId: "D", expiresAt: iso(now - COMMAND_RETENTION_MS + DAY), closedAt: iso(now - COMMAND_RETENTION_MS + DAY) },
    { commandId: `${tag}/open`, siteId: tag, deviceId: "D", expiresAt: iso(now + 3_600_000), closedAt: null },
  ]);
  return user;
}

/** Which of this test's rows each pruned table still holds. */
async function remaining(tag: string) {
  const pick = (names: string[]) => names.map((n) => n.slice(tag.length + 1)).sort();
  return {
    api_request_logs: pick((await db().select().from(schema.apiRequestLogs).where(like(schema.apiRequestLogs.endpoint, `/${tag}/%`)).all()).map((r) => r.endpoint.slice(1))),
    user_activities: pick((await db().select().from(schema.userActivities).where(like(schema.userActivities.activityType, `${tag}/%`)).all()).map((r) => r.activityType)),
    ws_tickets: pick((await db().select().from(schema.wsTickets).where(eq(schema.wsTickets.siteId, tag)).all()).map((r) => r.ticketHash)),
    command_index: pick((await db().select().from(schema.commandIndex).where(eq(schema.commandIndex.siteId, tag)).all()).map((r) => r.commandId)),
  };
}

describe("cron: retention and pruning", () => {
  it("removes exactly the rows past their retention from every pruned table", async () => {
    const now = Date.now();
    const tag = unique("RET-");
    await seedRetention(now, tag);
    expect(await remaining(tag)).toEqual({
      api_request_logs: ["fresh", "old"], user_activities: ["fresh", "old"], ws_tickets: ["fresh", "old"],
      command_index: ["fresh", "old", "open"],
    });

    await runCron(now);
    expect(await remaining(tag)).toEqual({
      api_request_logs: ["fresh"], user_activities: ["fresh"], ws_tickets: ["fresh"],
      command_index: ["fresh", "open"],
    });
    // Running again at the same time changes nothing more.
    await runCron(now);
    expect((await remaining(tag)).command_index).toEqual(["fresh", "open"]);
  });

  it("closes an index entry left open a day past its expiry, and forgets it only after the retention", async () => {
    const now = Date.now();
    const tag = unique("OPEN-");
    await db().insert(schema.commandIndex).values([
      { commandId: `${tag}/stale`, siteId: tag, deviceId: "D", expiresAt: iso(now - 2 * DAY), closedAt: null },
      { commandId: `${tag}/recent`, siteId: tag, deviceId: "D", expiresAt: iso(now - 3_600_000), closedAt: null },
    ]);
    await runCron(now);
    const rows = await db().select().from(schema.commandIndex).where(inArray(schema.commandIndex.commandId, [`${tag}/stale`, `${tag}/recent`])).all();
    const byId = Object.fromEntries(rows.map((r) => [r.commandId.slice(tag.length + 1), r.closedAt]));
    // The recent one stays open: its hub gets to sweep it (and audit it) first.
    expect(byId).toEqual({ stale: iso(now), recent: null });
    await runCron(now + COMMAND_RETENTION_MS + 1000);
    const after = await db().select().from(schema.commandIndex).where(eq(schema.commandIndex.siteId, tag)).all();
    expect(after.map((r) => r.commandId)).not.toContain(`${tag}/stale`);
  });
});

describe("cron: one failing step does not stop the others", () => {
  it("logs the failure and still runs the steps before and after it", async () => {
    const now = Date.now();
    const tag = unique("ISO-");
    await seedRetention(now, tag);
    const siteId = unique("SITE-");
    const intentId = unique("intent-");
    await db().insert(schema.enrolmentIntents).values({ intentId, siteId, status: "pending", claimTokenHash: "not-a-real-hash", expiresAt: iso(now - 60_000) });
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);

    // Takes away the table of the second step; restored whatever happens.
    await env.DB.exec("ALTER TABLE user_activities RENAME TO user_activities_away");
    try {
      await runCron(now); // the run itself still ends normally
    } finally {
      await env.DB.exec("ALTER TABLE user_activities_away RENAME TO user_activities");
    }

    const failures = errors.mock.calls.filter(([message]) => String(message).startsWith("scheduled step"));
    expect(failures.map(([message]) => message)).toEqual(['scheduled step "user_activities retention" failed']);
    const left = await remaining(tag);
    expect(left.user_activities).toEqual(["fresh", "old"]);
    // The step before it, and every step after it, did their work.
    expect(left.api_request_logs).toEqual(["fresh"]);
    expect(left.ws_tickets).toEqual(["fresh"]);
    expect(left.command_index).toEqual(["fresh", "open"]);
    const intent = await db().select().from(schema.enrolmentIntents).where(eq(schema.enrolmentIntents.intentId, intentId)).get();
    expect(intent!.status).toBe("expired");

    // With the table back, the next run catches up.
    await runCron(now);
    expect((await remaining(tag)).user_activities).toEqual(["fresh"]);
  });
});
