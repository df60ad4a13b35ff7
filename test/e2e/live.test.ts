// End-to-end: the site's live channel over a real network connection — the BUILT bundle (dist/, from
// `npm run build`) served by workerd through Miniflare (scripts/lib/serve-bundle.mjs), a real WebSocket
// client (`ws`) and a streaming HTTP client for server-sent events.
//
// "A device goes offline" is exercised through a real status transition a device causes itself: its
// heartbeat reports `status: "error"` (the device leaves the healthy state), then a plain heartbeat
// brings it back online. The alarm-driven silent offline takes 30 s minimum (3 missed heartbeats) and is
// covered by the workers tests with runDurableObjectAlarm.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openJsonSocket } from "./json-socket";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, unique, type ApiCall } from "./http";

let service: RunningService;
let base: string;
let wsBase: string;

beforeAll(async () => {
  service = await startService({ quiet: true });
  base = service.url;
  wsBase = base.replace(/^http/, "ws");
});

afterAll(async () => {
  await service?.stop();
});

/** Sockets and streams a test opened, closed after it whether it passed or not. */
const openedByTest: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of openedByTest.splice(0)) await close();
});

type LiveEvent = { seq: number; type: string; site_id: string; ts: string; data: any };


const api = (path: string, call?: ApiCall) => callApi(base, path, call);

async function user() {
  const email = `${unique("live")}@example.com`;
  const res = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } });
  expect(res.status).toBe(201);
  return res.json.data.access_token as string;
}

async function siteWithDevice() {
  const token = await user();
  const siteId = unique("SITE");
  expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Live store" } })).status).toBe(201);
  const device = await api(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token, body: { name: "Till 1", device_type: "pos_terminal" } });
  expect(device.status).toBe(201);
  const headers = { "X-Device-ID": device.json.device_id as string, "X-API-Key": device.json.api_key as string };
  const beat = (body: Record<string, unknown> = {}) => api("/api/v1/agent/heartbeat", { method: "POST", headers, body });
  return { token, siteId, deviceId: device.json.device_id as string, beat };
}

/** A subscriber: resolves once the socket is open (or with the HTTP status it was refused with). */
function subscribe(url: string, headers: Record<string, string> = {}) {
  const { ws, messages, opened, until, close } = openJsonSocket<LiveEvent>(url, headers, (m) => [m.seq, m.type]);
  openedByTest.push(close);
  return { ws, messages, opened, until, close };
}

const statusOf = (deviceId: string) => (m: LiveEvent[]) => m.filter((e) => e.type === "device.status" && e.data.device_id === deviceId);

describe("live channel over a real WebSocket", () => {
  it("delivers device.status in order, and replays what a reconnecting client missed", async () => {
    const { token, siteId, deviceId, beat } = await siteWithDevice();
    const first = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws`, { authorization: `Bearer ${token}` });
    expect(await first.opened).toBe(101);

    expect((await beat()).json.device_status).toBe("online");
    expect((await beat({ status: "error" })).json.device_status).toBe("error");
    expect((await beat()).json.device_status).toBe("online");
    const changes = await first.until((m) => statusOf(deviceId)(m).length >= 3 && statusOf(deviceId)(m));
    expect(changes.map((e) => [e.data.previous, e.data.status])).toEqual([[null, "online"], ["online", "error"], ["error", "online"]]);
    for (const e of changes) expect(e).toMatchObject({ site_id: siteId, ts: expect.stringMatching(/Z$/), data: { device_id: deviceId, reason: expect.any(String) } });
    const seqs = first.messages.map((m) => m.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    const last = first.messages.at(-1)!.seq;
    await first.close();

    // While nobody is connected the device goes into error: the next subscriber asks from where it left off.
    expect((await beat({ status: "error" })).json.device_status).toBe("error");
    const again = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws?since=${last}`, { authorization: `Bearer ${token}` });
    expect(await again.opened).toBe(101);
    const missed = await again.until((m) => statusOf(deviceId)(m).length >= 1 && statusOf(deviceId)(m));
    expect(missed[0].data).toMatchObject({ previous: "online", status: "error" });
    expect(again.messages[0].seq).toBe(last + 1);
    await again.close();
  });

  it("refuses a user of another site before the upgrade (the site does not exist for them), and accepts a one-use ticket", async () => {
    const { token, siteId } = await siteWithDevice();
    const stranger = await user();
    const refused = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws`, { authorization: `Bearer ${stranger}` });
    expect(await refused.opened).toBe(404);
    const anonymous = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws`);
    expect(await anonymous.opened).toBe(401);

    const ticket = await api(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", token });
    expect(ticket.status).toBe(201);
    const browser = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws?ticket=${encodeURIComponent(ticket.json.ticket)}`);
    expect(await browser.opened).toBe(101);
    await browser.close();
    const replayed = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws?ticket=${encodeURIComponent(ticket.json.ticket)}`);
    expect(await replayed.opened).toBe(401);
    expect((await api(`/api/v1/sites/${siteId}/ws-ticket`, { method: "POST", token: stranger })).status).toBe(404);
  });
});

describe("live channel as server-sent events", () => {
  it("resumes from Last-Event-ID, then streams live", async () => {
    const { token, siteId, deviceId, beat } = await siteWithDevice();
    await beat();
    await beat({ status: "error" });
    const probe = subscribe(`${wsBase}/api/v1/sites/${siteId}/ws?since=0`, { authorization: `Bearer ${token}` });
    const [online] = await probe.until((m) => statusOf(deviceId)(m).length >= 2 && statusOf(deviceId)(m));
    await probe.close();

    const controller = new AbortController();
    openedByTest.push(() => controller.abort());
    // A read waiting for a frame that never comes ends at the deadline instead of at the test timeout.
    const deadline = Date.now() + 10_000;
    const stop = setTimeout(() => controller.abort(), 10_000);
    openedByTest.push(() => clearTimeout(stop));
    const res = await fetch(`${base}/api/v1/sites/${siteId}/events`, {
      headers: { authorization: `Bearer ${token}`, "Last-Event-ID": String(online.seq) },
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    const frames = () => text.split("\n\n").filter((f) => f.startsWith("id: ")).map((f) => {
      const [idLine, dataLine] = f.split("\n");
      return { id: Number(idLine.slice(4)), event: JSON.parse(dataLine.slice(6)) as LiveEvent };
    });
    const statuses = () => frames().filter((f) => f.event.type === "device.status" && f.event.data.device_id === deviceId).map((f) => f.event.data.status);
    let beaten = false;
    while (statuses().length < 2) {
      if (Date.now() > deadline) throw new Error(`no events: ${text}`);
      const { value, done } = await reader.read().catch((error: unknown) => {
        if (controller.signal.aborted) throw new Error(`no events in time: ${text}`);
        throw error;
      });
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (!beaten && statuses().length >= 1) {
        beaten = true;
        await beat(); // live, after the replay
      }
    }
    controller.abort();
    expect(frames()[0].id).toBe(online.seq + 1);
    expect(statuses()).toEqual(["error", "online"]);
    expect(frames().every((f) => f.id === f.event.seq)).toBe(true);

    const stranger = await user();
    expect((await fetch(`${base}/api/v1/sites/${siteId}/events`, { headers: { authorization: `Bearer ${stranger}` } })).status).toBe(404);
  });
});
