import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { admin, call, fetchChecked, signup } from "./helpers";
import { AUDIT_EXPORT_FIELDS } from "../../src/services/audit-export";

let adminToken: string;
beforeAll(async () => {
  adminToken = (await admin()).token;
});

interface Row { eventType: string; category?: string; severity?: string; description?: string | null; userId?: number | null; siteId?: string | null; metadata?: unknown; at: string }

/** Writes events with the given timestamps straight into D1 (each test uses its own year, so files do not overlap). */
async function insertEvents(rows: Row[]) {
  const statement = env.DB.prepare(
    "INSERT INTO audit_logs (event_type, category, severity, description, user_id, site_id, event_metadata, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  await env.DB.batch(rows.map((r) => statement.bind(r.eventType, r.category ?? "business_events", r.severity ?? "info", r.description ?? null,
    r.userId ?? null, r.siteId ?? null, JSON.stringify(r.metadata ?? {}), r.at)));
}

async function exportRequest(body: unknown, path = "/api/v1/audit/export", token = adminToken) {
  return fetchChecked(new Request(`http://fleet.test${path}`, {
    method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` }, body: JSON.stringify(body),
  }));
}

/** The body as UTF-8 text (workerd warns when .text() reads a type it does not know as text). */
const bodyText = async (response: Response) => new TextDecoder().decode(await response.arrayBuffer());

const gunzip = async (response: Response) =>
  new Response(response.body!.pipeThrough(new DecompressionStream("gzip"))).text();

const year = (y: number) => ({ start: `${y}-01-01T00:00:00Z`, end: `${y + 1}-01-01T00:00:00Z` });

describe("POST /audit/export", () => {
  beforeAll(async () => {
    await insertEvents([
      { eventType: "transaction_processed", at: "2001-03-01T10:00:00.000Z", metadata: { amount: 12 }, description: "first", userId: 7, siteId: "S-1" },
      { eventType: "login_failed", category: "security_events", severity: "warning", at: "2001-03-02T10:00:00.000Z", metadata: { email: "a@example.com" } },
      { eventType: "transaction_processed", at: "2001-03-03T10:00:00.000Z", description: "third" },
      // outside the period on either side
      { eventType: "transaction_processed", at: "2000-12-31T23:59:59.999Z" },
      { eventType: "transaction_processed", at: "2002-01-01T00:00:00.000Z" },
    ]);
  });

  it("json: the period's events oldest first, every exported field, as an attachment", async () => {
    const res = await exportRequest({ format: "json", period: year(2001) });
    expect(res.status).toBe(200);
    expect(res.headers.get("Content-Type")).toMatch(/^application\/json/);
    expect(res.headers.get("Content-Disposition")).toBe('attachment; filename="audit-export-20010101T000000Z-20020101T000000Z.json"');
    const events = await res.json() as Record<string, unknown>[];
    expect(events.map((e) => e.description)).toEqual(["first", null, "third"]);
    expect(Object.keys(events[0])).toEqual(AUDIT_EXPORT_FIELDS.map((f) => f.name));
    expect(events[0]).toMatchObject({ event_type: "transaction_processed", user_id: 7, site_id: "S-1", event_metadata: { amount: 12 }, created_at: "2001-03-01T10:00:00.000Z" });
  });

  it("json of an empty period is an empty array", async () => {
    const res = await exportRequest({ format: "json", period: year(1990) });
    expect(await res.json()).toEqual([]);
  });

  it("ndjson with a category filter and without metadata, under the unversioned path too", async () => {
    for (const path of ["/api/v1/audit/export", "/audit/export"]) {
      const res = await exportRequest({ format: "ndjson", period: year(2001), categories: ["security_events"], include_metadata: false }, path);
      expect(res.status).toBe(200);
      expect(res.headers.get("Content-Type")).toBe("application/x-ndjson");
      const lines = (await bodyText(res)).trimEnd().split("\n").map((l) => JSON.parse(l));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({ event_type: "login_failed", category: "security_events" });
      expect(lines[0]).not.toHaveProperty("event_metadata");
    }
  });

  it("csv: a header of the field names, metadata as a JSON cell", async () => {
    const res = await exportRequest({ format: "csv", period: year(2001) });
    expect(res.headers.get("Content-Type")).toMatch(/^text\/csv/);
    const lines = (await res.text()).split("\r\n");
    expect(lines[0]).toBe(AUDIT_EXPORT_FIELDS.map((f) => f.name).join(","));
    expect(lines).toHaveLength(5); // header, three events, and the empty text after the last line break
    expect(lines[1]).toContain('"{""amount"":12}"');
  });

  it("csv: text a spreadsheet would run as a formula is escaped", async () => {
    const dangerous = ["=HYPERLINK(\"http://evil\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\r=1"];
    await insertEvents(dangerous.map((description, i) => ({ eventType: "transaction_processed", description, at: `2003-01-01T00:00:0${i}.000Z` })));
    const res = await exportRequest({ format: "csv", period: year(2003), include_metadata: false });
    const text = await res.text();
    // The description column, found by its header.
    const header = text.split("\r\n")[0].split(",");
    const at = header.indexOf("description");
    const cells = parseCsv(text).slice(1).map((row) => row[at]);
    expect(cells).toEqual(dangerous.map((d) => `'${d}`));
    for (const cell of cells) expect(cell[0]).toBe("'");
  });

  it("gzip round trip: compressed file, .gz name, same content", async () => {
    const plain = await bodyText(await exportRequest({ format: "ndjson", period: year(2001) }));
    const res = await exportRequest({ format: "ndjson", period: year(2001), compress: true });
    expect(res.headers.get("Content-Type")).toBe("application/gzip");
    expect(res.headers.get("Content-Disposition")).toMatch(/\.ndjson\.gz"$/);
    expect(await gunzip(res)).toBe(plain);
  });

  it("streams a long period page after page: 5,000 events, each once, in order", async () => {
    await env.DB.prepare(`
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
      INSERT INTO audit_logs (event_type, category, severity, description, event_metadata, created_at)
      SELECT 'transaction_processed', 'business_events', 'info', 'bulk ' || i, '{}',
             strftime('%Y-%m-%dT%H:%M:%fZ', '2004-06-01T00:00:00Z', '+' || (i / 7) || ' seconds')
      FROM n`).run();
    const res = await exportRequest({ format: "ndjson", period: year(2004), compress: true });
    const lines = (await gunzip(res)).trimEnd().split("\n").map((l) => JSON.parse(l) as { id: number; description: string; created_at: string });
    expect(lines).toHaveLength(5000);
    expect(new Set(lines.map((l) => l.description)).size).toBe(5000);
    for (let i = 1; i < lines.length; i++) {
      const ordered = lines[i - 1].created_at < lines[i].created_at || (lines[i - 1].created_at === lines[i].created_at && lines[i - 1].id < lines[i].id);
      expect(ordered).toBe(true);
    }
  });

  it("refuses bad input with 422 and non-administrators with 403", async () => {
    for (const body of [
      { format: "xml", period: year(2001) },
      { period: { start: "2001-02-01T00:00:00Z", end: "2001-01-01T00:00:00Z" } },
      { period: { start: "yesterday", end: "2001-01-01T00:00:00Z" } },
      { period: year(2001), categories: ["nope"] },
      { format: "csv" },
    ]) {
      const res = await call("/api/v1/audit/export", { method: "POST", token: adminToken, body });
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.json.detail).toEqual(expect.any(Array));
    }
    const user = await signup();
    expect((await call("/api/v1/audit/export", { method: "POST", token: user.token, body: { period: year(2001) } })).status).toBe(403);
  });
});

/** A small RFC 4180 reader for the test's own check. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (ch === '"') quoted = false; else cell += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ",") { row.push(cell); cell = ""; }
    else if (ch === "\r" && text[i + 1] === "\n") { row.push(cell); rows.push(row); row = []; cell = ""; i++; }
    else cell += ch;
  }
  if (cell || row.length) { row.push(cell); rows.push(row); }
  return rows;
}
