// End-to-end: the live audit stream over a real network connection (the BUILT bundle served by
// workerd through Miniflare), read by a streaming HTTP client that drops the connection and resumes
// with Last-Event-ID; and the offline chain verifier (scripts/verify-audit-chain.mjs) run on events
// this service sealed. Publication here is the real path: the Worker nudges the AuditStream object
// after each request that recorded an event.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, unique, type ApiCall } from "./http";

let service: RunningService;
let base: string;

beforeAll(async () => {
  service = await startService({ quiet: true });
  base = service.url;
});

afterAll(async () => {
  await service?.stop();
});


const api = (path: string, call?: ApiCall) => callApi(base, path, call);

async function ownerOfSite() {
  const email = `${unique("audit")}@example.com`;
  const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } });
  expect(signup.status).toBe(201);
  const token = signup.json.data.access_token as string;
  const siteId = unique("SITE");
  expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Audited store" } })).status).toBe(201);
  return { token, siteId };
}

async function administrator() {
  const email = `${unique("admin")}@example.com`;
  expect((await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } })).status).toBe(201);
  const d1 = await service.mf.getD1Database("DB");
  await d1.prepare("UPDATE users SET is_admin = 1 WHERE email = ?").bind(email).run();
  return (await api("/api/v1/auth/login", { method: "POST", body: { email, password: "correct-horse" } })).json.data.access_token as string;
}

const record = async (token: string, siteId: string, n: number) => {
  const res = await api("/api/v1/audit/events", { method: "POST", token, body: { event_type: "transaction_processed", site_id: siteId, metadata: { n } } });
  expect(res.status).toBe(201);
  return res.json.id as number;
};

type Frame = { id: number; event: { id: number; site_id: string; hash: string | null } };

/**
 * Opens the stream; resolves once the server answered, by which time the subscription is registered.
 * `until` reads frames until the predicate holds; `close` drops the connection.
 */
async function openStream(url: string, token: string, lastEventId?: number) {
  const controller = new AbortController();
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: "text/event-stream" };
  if (lastEventId !== undefined) headers["last-event-id"] = String(lastEventId);
  const res = await fetch(url, { headers, signal: controller.signal });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const frames = (): Frame[] => text.split("\n\n").filter((f) => f.startsWith("id: ")).map((f) => {
    const [idLine, dataLine] = f.split("\n");
    return { id: Number(idLine.slice(4)), event: JSON.parse(dataLine.slice(6)) };
  });
  return {
    async until(enough: (frames: Frame[]) => boolean, timeoutMs = 15_000) {
      const timer = setTimeout(() => controller.abort(), timeoutMs);
      try {
        while (!enough(frames())) {
          const { value, done } = await reader.read();
          if (done) throw new Error(`stream ended early: ${text}`);
          text += decoder.decode(value, { stream: true });
        }
      } finally {
        clearTimeout(timer);
      }
      return frames();
    },
    close: () => controller.abort(),
  };
}

describe("live audit stream over HTTP", () => {
  it("delivers events as they are recorded and resumes after Last-Event-ID without gap or duplicate", async () => {
    const { token, siteId } = await ownerOfSite();
    const url = `${base}/api/v1/audit/events/stream?site_id=${siteId}&event_type=transaction_processed`;

    const first = await openStream(url, token);
    const firstIds = [await record(token, siteId, 1), await record(token, siteId, 2)];
    const seen = await first.until((frames) => frames.length >= 2);
    first.close();
    expect(seen.map((f) => f.id)).toEqual(firstIds);
    expect(seen.every((f) => f.event.site_id === siteId && /^[0-9a-f]{64}$/.test(f.event.hash ?? ""))).toBe(true);

    // Disconnected: three more are recorded; the resume gets exactly those, then live ones.
    const missed = [await record(token, siteId, 3), await record(token, siteId, 4), await record(token, siteId, 5)];
    const resumed = await openStream(url, token, seen[seen.length - 1].id);
    await resumed.until((frames) => frames.length >= 3);
    const live = await record(token, siteId, 6);
    const all = await resumed.until((frames) => frames.some((f) => f.id === live));
    resumed.close();
    expect(all.map((f) => f.id)).toEqual([...missed, live]);
  });
});

describe("offline chain verification", () => {
  const script = fileURLToPath(new URL("../../scripts/verify-audit-chain.mjs", import.meta.url));
  const run = (file: string) => {
    try {
      return { code: 0, report: JSON.parse(execFileSync("node", [script, file], { encoding: "utf8" })) };
    } catch (error) {
      const failed = error as { status: number; stdout: string };
      return { code: failed.status, report: JSON.parse(failed.stdout) };
    }
  };

  it("accepts a site's sealed events and names the row that was changed", async () => {
    const { token, siteId } = await ownerOfSite();
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await record(token, siteId, i));
    // Sealing follows the request within moments (the Worker's nudge).
    let events: { id: number; site_id: string; hash: string | null; event_metadata: Record<string, unknown> }[] = [];
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
      events = (await api(`/api/v1/audit/events?limit=500`, { token })).json.events.filter((e: { site_id: string }) => e.site_id === siteId);
      if (events.length === 5 && events.every((e) => e.hash)) break;
    }
    expect(events.length).toBe(5);
    const dir = mkdtempSync(join(tmpdir(), "audit-chain-"));
    const exported = join(dir, "export.ndjson");
    writeFileSync(exported, events.map((e) => JSON.stringify(e)).join("\n") + "\n");
    const good = run(exported);
    expect(good.code).toBe(0);
    expect(good.report.chains).toEqual([expect.objectContaining({ chain: siteId, ok: true, sealed: 5, anchor: expect.objectContaining({ genesis: true }) })]);

    const tampered = join(dir, "tampered.ndjson");
    const victim = ids[1];
    writeFileSync(tampered, events.map((e) => JSON.stringify(e.id === victim ? { ...e, event_metadata: { n: 1000 } } : e)).join("\n") + "\n");
    const bad = run(tampered);
    expect(bad.code).toBe(1);
    expect(bad.report.chains[0]).toMatchObject({ ok: false, broken_at: { id: victim, reason: "hash_mismatch" } });

    // The same segment as an administrator's export verifies alike.
    const admin = await administrator();
    const period = { start: new Date(Date.now() - 3_600_000).toISOString(), end: new Date(Date.now() + 60_000).toISOString() };
    const download = await fetch(`${base}/api/v1/audit/export`, {
      method: "POST", headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ format: "ndjson", period, include_metadata: true }),
    });
    expect(download.status).toBe(200);
    const siteLines = (await download.text()).split("\n").filter((line) => line && JSON.parse(line).site_id === siteId);
    expect(siteLines).toHaveLength(5);
    const fromExport = join(dir, "from-export.ndjson");
    writeFileSync(fromExport, siteLines.join("\n") + "\n");
    expect(run(fromExport)).toMatchObject({ code: 0, report: { chains: [expect.objectContaining({ chain: siteId, ok: true, sealed: 5 })] } });

    const gap = join(dir, "gap.ndjson");
    writeFileSync(gap, events.filter((e) => e.id !== victim).map((e) => JSON.stringify(e)).join("\n") + "\n");
    expect(run(gap).report.chains[0]).toMatchObject({ ok: false, broken_at: { id: ids[2], reason: "prev_hash_mismatch" } });
  });
});
