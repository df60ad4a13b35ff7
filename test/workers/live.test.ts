import { afterEach, describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { healthAt } from "../../durable-objects/agent-model";
import { call, db, eventually, fetchChecked, signup } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { agentRow, alarmOf, hub, runAlarm, simulatedDevice } from "./agents-helpers";
import { installClock, installWorkerClock } from "./clock";

type Event = { seq: number; type: string; site_id: string; ts: string; data: any };

/** Every socket and stream a test opened, closed after it whether it passed or not. */
const opened: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of opened.splice(0)) {
    try { await o.close(); } catch { /* already closed */ }
  }
});

/** Opens the site's WebSocket through the Worker, like a client would. */
async function subscribe(path: string, token?: string) {
  const headers = new Headers({ Upgrade: "websocket" });
  if (token) headers.set("Authorization", `Bearer ${token}`);
  const res = await fetchChecked(new Request(`http://fleet.test${path}`, { headers }));
  const ws = res.webSocket;
  if (!ws) return { status: res.status, body: await res.json<{ detail: string }>(), ws: undefined, messages: [] as Event[], raw: [] as string[] };
  ws.accept();
  opened.push({ close: () => ws.close(1000, "test over") });
  const messages: Event[] = [];
  const raw: string[] = [];
  ws.addEventListener("message", (e) => {
    raw.push(e.data as string);
    try { messages.push(JSON.parse(e.data as string)); } catch { /* pong */ }
  });
  return { status: res.status, body: undefined, ws, messages, raw };
}

/**
 * Sets when the hub last ran its 2-second health tick. An hour ahead, no tick comes due by the wall
 * clock until the test runs the alarm itself; 2 s back, the tick is due on the next alarm the test runs.
 */
async function setLastTick(siteId: string, at: number) {
  await runInDurableObject(hub(siteId), (instance) => {
    const runtime = (instance as unknown as { agentRuntime?: { lastTickMs?: number } }).agentRuntime;
    if (typeof runtime?.lastTickMs !== "number") throw new Error("SiteHub no longer keeps agentRuntime.lastTickMs: update setLastTick");
    runtime.lastTickMs = at;
  });
}

const statusEvents = (messages: Event[], deviceId: string) => messages.filter((m) => m.type === "device.status" && m.data.device_id === deviceId);

describe("live channel: WebSocket", () => {
  it("refuses subscribers without access before the upgrade", async () => {
    const { owner, siteId } = await siteWithOperator();
    const stranger = await signup();
    const anonymous = await subscribe(`/api/v1/sites/${siteId}/ws`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.ws).toBeUndefined();
    // A site the caller has no role on answers exactly like one that does not exist.
    const other = await subscribe(`/api/v1/sites/${siteId}/ws`, stranger.token);
    expect(other.status).toBe(404);
    expect(other.ws).toBeUndefined();
    expect(other.body).toEqual({ detail: `Site with ID '${siteId}' not found` });
    const unknown = await subscribe("/api/v1/sites/NO-SUCH-SITE/ws", owner.token);
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ detail: "Site with ID 'NO-SUCH-SITE' not found" });
    expect((await subscribe(`/api/v1/sites/${siteId}/ws?since=-1`, owner.token)).status).toBe(422);
    const ok = await subscribe(`/api/v1/sites/${siteId}/ws`, owner.token);
    expect(ok.status).toBe(101);
  });

  it("delivers device.status in order, and replays what a reconnecting client missed", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const first = await subscribe(`/api/v1/sites/${siteId}/ws`, owner.token);
    expect(first.status).toBe(101);

    await heartbeat(d.device_id, d.api_key);
    await heartbeat(d.device_id, d.api_key, { status: "error" });
    await heartbeat(d.device_id, d.api_key);
    const seen = await eventually(async () => { const s = statusEvents(first.messages, d.device_id); return s.length >= 3 && s; });
    expect(seen.map((e) => [e.data.previous, e.data.status])).toEqual([[null, "online"], ["online", "error"], ["error", "online"]]);
    for (const e of seen) expect(e).toMatchObject({ site_id: siteId, ts: expect.stringMatching(/Z$/) });
    const seqs = first.messages.map((m) => m.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    const lastSeen = first.messages.at(-1)!.seq;
    first.ws!.close(1000, "bye");

    // Missed while disconnected.
    await heartbeat(d.device_id, d.api_key, { status: "error" });
    const again = await subscribe(`/api/v1/sites/${siteId}/ws?since=${lastSeen}`, owner.token);
    const missed = await eventually(async () => statusEvents(again.messages, d.device_id).length >= 1 && statusEvents(again.messages, d.device_id));
    expect(missed[0]).toMatchObject({ data: { previous: "online", status: "error" } });
    expect(again.messages[0].seq).toBe(lastSeen + 1);

    // A replay request over the open socket, and the keep-alive ping.
    again.ws!.send(JSON.stringify({ type: "replay", since: lastSeen - 1 }));
    await eventually(async () => again.messages.filter((m) => m.seq === lastSeen).length === 1);
    again.ws!.send("ping");
    await eventually(async () => again.raw.includes("pong"));
    again.ws!.send("what?");
    await eventually(async () => again.messages.some((m) => m.type === "stream.error"));
  });

  it("says so when the replay point is older than the ring", async () => {
    const { owner, siteId } = await siteWithOperator();
    await hub(siteId).publish(siteId, "test.filler", { i: 0 });
    await runInDurableObject(hub(siteId), (_i, state) => {
      state.storage.sql.exec("INSERT INTO live_events (type, ts, data) SELECT 'test.filler', '2026-01-01T00:00:00.000Z', '{}' FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2198) SELECT i FROM n)");
    });
    await hub(siteId).publish(siteId, "test.filler", { i: 2199 }); // seq 2200: the ring is trimmed every 100 appends
    const s = await subscribe(`/api/v1/sites/${siteId}/ws?since=1`, owner.token);
    const first = await eventually(async () => s.messages[0]);
    expect(first).toMatchObject({ type: "stream.truncated", data: { requested_since: 1 } });
    expect(s.messages[1].seq).toBe(first.seq + 1);
  });

  it("accepts a one-use ticket instead of the token", async () => {
    const { owner, siteId } = await siteWithOperator();
    const other = await siteWithOperator();
    const res = await call(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", token: owner.token });
    expect(res.status).toBe(201);
    expect(res.json.ticket).toEqual(expect.any(String));
    expect(Date.parse(res.json.expires_at) - Date.now()).toBeLessThanOrEqual(60_000);
    expect(Date.parse(res.json.expires_at) - Date.now()).toBeGreaterThan(50_000);
    const rows = await db().select().from(schema.wsTickets).where(eq(schema.wsTickets.siteId, siteId)).all();
    expect(rows).toHaveLength(1);
    expect(JSON.stringify(rows)).not.toContain(res.json.ticket);

    expect((await subscribe(`/api/v1/sites/${other.siteId}/ws?ticket=${res.json.ticket}`)).status).toBe(401);
    const s = await subscribe(`/api/v1/sites/${siteId}/ws?ticket=${res.json.ticket}`);
    expect(s.status).toBe(101);
    expect((await subscribe(`/api/v1/sites/${siteId}/ws?ticket=${res.json.ticket}`)).status).toBe(401);

    const clock = installWorkerClock();
    try {
      const stale = await call(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", token: owner.token });
      clock.advance(61_000);
      expect((await subscribe(`/api/v1/sites/${siteId}/ws?ticket=${stale.json.ticket}`)).status).toBe(401);
    } finally {
      clock.restore();
    }
    expect((await call(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", token: (await signup()).token })).status).toBe(404);
  });

  it("answers the channel's position without an upgrade", async () => {
    const { owner, siteId } = await siteWithOperator();
    await hub(siteId).publish(siteId, "test.event", {});
    const res = await call(`/api/v1/sites/${siteId}/ws`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ site_id: siteId, last_seq: expect.any(Number), oldest_seq: expect.any(Number), subscribers: 0 });
    expect(res.json.last_seq).toBeGreaterThanOrEqual(1);
  });
});

describe("live channel: costs", () => {
  it("coalesces heartbeats into one event per tick", async () => {
    const { owner, siteId } = await siteWithOperator();
    const a = await registerDevice(owner.token, siteId, { name: "A" });
    const b = await registerDevice(owner.token, siteId, { name: "B" });
    await heartbeat(a.device_id, a.api_key);
    await heartbeat(b.device_id, b.api_key);
    const s = await subscribe(`/api/v1/sites/${siteId}/ws`, owner.token);
    await runAlarm(siteId); // a tick now
    // The next tick would be due 2 s later by the wall clock; hold it so the six heartbeats below
    // cannot be split by an alarm firing on its own, and the tick runs only when the test says.
    await setLastTick(siteId, Date.now() + 3_600_000);
    for (let i = 0; i < 3; i++) {
      await heartbeat(a.device_id, a.api_key);
      await heartbeat(b.device_id, b.api_key);
    }
    // Nothing else is due soon either (presence expiry is 30 s out): the only tick is the one run here.
    expect(await alarmOf(siteId)).toBeGreaterThan(Date.now() + 20_000);
    await runAlarm(siteId);
    const beats = await eventually(async () => { const m = s.messages.filter((e) => e.type === "device.heartbeat"); return m.length > 0 && m; });
    expect(beats).toHaveLength(1);
    expect(beats[0].data.count).toBe(2);
    expect(beats[0].data.devices.map((x: { device_id: string }) => x.device_id).sort()).toEqual([a.device_id, b.device_id].sort());
  });

  it("an idle site has no alarm; a subscriber starts 2-second health checks, which stop when it leaves", async () => {
    const { owner, siteId } = await siteWithOperator();
    const clock = await installClock(siteId);
    // An hour ahead of the wall clock, so no alarm the hub sets falls due and fires by itself while
    // the test looks at it: alarms run only when the test runs them.
    clock.advance(3_600_000);
    /** Runs whatever is due, a minute at a time on the hub's clock, until the hub asks for no alarm. */
    const settle = async () => {
      for (let i = 0; i < 5 && (await alarmOf(siteId)) !== null; i++) {
        clock.advance(61_000);
        await runAlarm(siteId);
      }
      expect(await alarmOf(siteId)).toBeNull();
    };
    const d = await simulatedDevice(owner.token, siteId);
    await settle();
    // Reading the agent computes its health on demand; the only alarm it leaves is the coalesced last_seen
    // flush (at most once a minute), and nothing after it.
    await call(`/api/v1/agents/${d.device_id}`, { token: owner.token });
    const flushAt = await alarmOf(siteId);
    expect(flushAt === null || flushAt > clock.now() + 30_000).toBe(true);
    await settle();

    const s = await subscribe(`/api/v1/sites/${siteId}/ws`, owner.token);
    const wake = await alarmOf(siteId);
    expect(wake).not.toBeNull();
    expect(wake!).toBeLessThanOrEqual(clock.now() + 2_000);
    clock.advance(2_000);
    expect(await runAlarm(siteId)).toBe(true);
    const health = await eventually(async () => s.messages.find((m) => m.type === "agent.health"), 1000);
    // The health model is a pure function of the agent and the time: the check must be exactly it.
    const expected = healthAt((await agentRow(siteId, d.device_id))!, Date.parse(health.data.checked_at));
    expect(health.data.checks).toEqual([{
      device_id: d.device_id, state: "idle", status: expected.status, response_time_ms: expected.response_time_ms,
      cpu_usage_percent: expected.metrics.cpu_usage_percent, memory_usage_percent: expected.metrics.memory_usage_percent,
      ...(expected.error ? { error: expected.error } : {}),
    }]);
    expect((await alarmOf(siteId))!).toBeLessThanOrEqual(clock.now() + 2_000);

    s.ws!.close(1000, "leaving");
    await eventually(async () => (await hub(siteId).subscribers(siteId)).websockets === 0);
    clock.advance(2_000);
    await runAlarm(siteId);
    // No more 2 s ticks: what is left is at most the last_seen flush of the checks that ran.
    const left = await alarmOf(siteId);
    expect(left === null || left > clock.now() + 30_000).toBe(true);
    await settle();
  });
});

describe("live channel: server-sent events", () => {
  /**
   * One reader drains the stream into a buffer for the whole test, so no read is ever abandoned
   * (an abandoned read would swallow the chunk it later receives); waiting only looks at the buffer.
   */
  function sse(res: Response) {
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    let ended = false;
    let wake: (() => void) | undefined;
    const pump = (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
          wake?.();
        }
      } catch { /* cancelled */ }
      ended = true;
      wake?.();
    })();
    const stream = {
      async until(predicate: (text: string) => boolean, timeoutMs = 3000) {
        const deadline = Date.now() + timeoutMs;
        while (!predicate(text)) {
          if (ended) throw new Error(`stream ended before the condition: ${text}`);
          const left = deadline - Date.now();
          if (left <= 0) throw new Error(`stream did not deliver in time: ${text}`);
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, left);
            wake = () => { clearTimeout(timer); resolve(); };
          });
          wake = undefined;
        }
        return text;
      },
      async close() {
        await reader.cancel().catch(() => undefined);
        await pump;
      },
    };
    opened.push(stream);
    return stream;
  }

  const frames = (text: string) => text.split("\n\n").filter((f) => f.startsWith("id: ")).map((f) => {
    const [idLine, dataLine] = f.split("\n");
    return { id: Number(idLine.slice(4)), event: JSON.parse(dataLine.slice(6)) as Event };
  });

  it("resumes from Last-Event-ID and then streams live", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    await heartbeat(d.device_id, d.api_key);
    const online = ((await hub(siteId).eventsSince(siteId, 0)) as unknown as Event[]).find((e) => e.type === "device.status")!;
    await heartbeat(d.device_id, d.api_key, { status: "error" });

    const res = await fetchChecked(new Request(`http://fleet.test/api/v1/sites/${siteId}/events`, {
      headers: { Authorization: `Bearer ${owner.token}`, "Last-Event-ID": String(online.seq) },
    }));
    expect(res.status).toBe(200);
    expect(res.headers.get("Content-Type")).toMatch(/^text\/event-stream/);
    const stream = sse(res);
    // The replayed event first; then the stream is live and the next change must arrive on it.
    await stream.until((t) => frames(t).some((f) => f.event.data?.status === "error"));
    await heartbeat(d.device_id, d.api_key);
    const got = frames(await stream.until((t) => frames(t).some((f) => f.event.data?.status === "online" && f.id > online.seq)));
    await stream.close();
    expect(got[0].id).toBe(online.seq + 1);
    expect(got.map((f) => f.id)).toEqual(got.map((f) => f.event.seq));
    const statuses = got.filter((f) => f.event.type === "device.status").map((f) => f.event.data.status);
    expect(statuses).toEqual(["error", "online"]);

    const bad = await call(`/api/v1/sites/${siteId}/events`, { token: owner.token, headers: { "Last-Event-ID": "yesterday" } });
    expect(bad.status).toBe(422);
    expect((await call(`/api/v1/sites/${siteId}/events`, { token: (await signup()).token })).status).toBe(404);
    expect((await call(`/api/v1/sites/${siteId}/events`)).status).toBe(401);
  });
});
