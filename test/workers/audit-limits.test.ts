import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, db, signup, unique } from "./helpers";

const MB = 1024 * 1024;
const record = (token: string, body: Record<string, unknown>) => call("/api/v1/audit/events", { method: "POST", token, body });
const rowsOfType = (eventType: string) => db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, eventType)).all();

describe("recording: bounded events", () => {
  it("refuses metadata over 8 KB serialized (422), and stores nothing", async () => {
    const user = await signup();
    const eventType = unique("sale_").toLowerCase();
    // {"blob":"…"} is 11 bytes of JSON around the string; multi-byte characters count by their UTF-8 bytes
    const justFits = { blob: "x".repeat(8 * 1024 - 11) };
    expect(new TextEncoder().encode(JSON.stringify(justFits)).byteLength).toBe(8 * 1024);
    expect((await record(user.token, { event_type: eventType, metadata: justFits })).status).toBe(201);
    for (const metadata of [{ blob: "x".repeat(8 * 1024) }, { blob: "é".repeat(4 * 1024) }, { blob: "x".repeat(1024 * 1024 - 100) }]) {
      const res = await record(user.token, { event_type: eventType, metadata });
      expect(res.status).toBe(422);
      expect(res.json.detail[0].loc).toEqual(["body", "metadata"]);
    }
    expect(await rowsOfType(eventType)).toHaveLength(1);
  });

  it("refuses a description over 1,000 characters (422)", async () => {
    const user = await signup();
    const eventType = unique("sale_").toLowerCase();
    expect((await record(user.token, { event_type: eventType, description: "d".repeat(1000) })).status).toBe(201);
    const res = await record(user.token, { event_type: eventType, description: "d".repeat(1001) });
    expect(res.status).toBe(422);
    expect(res.json.detail[0].loc).toEqual(["body", "description"]);
    expect(await rowsOfType(eventType)).toHaveLength(1);
  });

  it("lets only administrators record critical events (403 for others, nothing stored)", async () => {
    const user = await signup();
    const eventType = unique("till_alarm_").toLowerCase();
    const refused = await record(user.token, { event_type: eventType, severity: "critical" });
    expect(refused.status).toBe(403);
    expect(refused.json).toEqual({ detail: expect.stringMatching(/critical/) });
    expect(await rowsOfType(eventType)).toEqual([]);
    expect((await record(user.token, { event_type: eventType, severity: "error" })).status).toBe(201);
    const a = await admin();
    const ok = await record(a.token, { event_type: eventType, severity: "critical" });
    expect(ok.status).toBe(201);
    expect(ok.json.severity).toBe("critical");
  });
});

describe("listing: bounded pages", () => {
  it("returns the metadata once, as event_metadata", async () => {
    const user = await signup();
    const eventType = unique("sale_").toLowerCase();
    await record(user.token, { event_type: eventType, metadata: { amount: 3 } });
    const res = await call(`/api/v1/audit/events?event_type=${eventType}`, { token: user.token });
    expect(res.json.events).toHaveLength(1);
    expect(res.json.events[0].event_metadata).toEqual({ amount: 3 });
    expect(res.json.events[0]).not.toHaveProperty("metadata");
  });

  it("stops a page before its body passes 1 MB, says so, and pages on from next_offset without gaps", async () => {
    const a = await admin();
    const eventType = unique("legacy_bulk_").toLowerCase();
    // Rows written before metadata was capped: 30 events of ~100 KB each are ~3 MB in all.
    const big = "m".repeat(100 * 1024);
    for (let i = 0; i < 30; i += 10) {
      await db().insert(schema.auditLogs).values(Array.from({ length: 10 }, (_, j) => ({
        eventType, category: "business_events", severity: "info" as const, eventMetadata: { n: i + j, blob: big },
      })));
    }
    const seen: number[] = [];
    let offset: number | null = 0;
    let pages = 0;
    while (offset !== null) {
      const res = await call(`/api/v1/audit/events?event_type=${eventType}&limit=500&offset=${offset}`, { token: a.token });
      expect(res.status).toBe(200);
      expect(res.text.length).toBeLessThanOrEqual(MB);
      expect(res.json.total).toBe(30);
      expect(res.json.events.length).toBeGreaterThan(0);
      const last: boolean = offset + res.json.events.length >= 30;
      expect(res.json.truncated).toBe(!last);
      expect(res.json.next_offset).toBe(last ? null : offset + res.json.events.length);
      seen.push(...res.json.events.map((e: { event_metadata: { n: number } }) => e.event_metadata.n));
      offset = res.json.next_offset;
      pages++;
    }
    expect(pages).toBeGreaterThanOrEqual(3);
    expect(seen).toEqual(Array.from({ length: 30 }, (_, i) => 29 - i));
  });

  it("returns an event larger than the page budget on a page of its own rather than never", async () => {
    const a = await admin();
    const eventType = unique("legacy_huge_").toLowerCase();
    await db().insert(schema.auditLogs).values([
      { eventType, category: "business_events", eventMetadata: { n: 0, blob: "h".repeat(MB + 1024) } },
      { eventType, category: "business_events", eventMetadata: { n: 1 } },
    ]);
    const first = await call(`/api/v1/audit/events?event_type=${eventType}`, { token: a.token });
    expect(first.json.events.map((e: { event_metadata: { n: number } }) => e.event_metadata.n)).toEqual([1]);
    expect(first.json).toMatchObject({ truncated: true, next_offset: 1 });
    const second = await call(`/api/v1/audit/events?event_type=${eventType}&offset=1`, { token: a.token });
    expect(second.json.events.map((e: { event_metadata: { n: number } }) => e.event_metadata.n)).toEqual([0]);
    expect(second.json).toMatchObject({ truncated: false, next_offset: null });
  });

  it("says nothing was cut when the page is short only because of limit", async () => {
    const user = await signup();
    const eventType = unique("sale_").toLowerCase();
    for (let i = 0; i < 3; i++) await record(user.token, { event_type: eventType });
    const res = await call(`/api/v1/audit/events?event_type=${eventType}&limit=2`, { token: user.token });
    expect(res.json).toMatchObject({ total: 3, truncated: false, next_offset: 2 });
    const rest = await call(`/api/v1/audit/events?event_type=${eventType}&limit=2&offset=2`, { token: user.token });
    expect(rest.json).toMatchObject({ truncated: false, next_offset: null });
    expect(rest.json.events).toHaveLength(1);
  });
});
