// End-to-end: the device channel over a real network connection — the BUILT bundle (dist/, from
// `npm run build`) served by workerd through Miniflare, and a real WebSocket client (`ws`) playing the
// device. The hub's own clock cannot be moved here, so the one lease this file waits for is a real
// 60 s lease (a wait for the redelivery message, not a sleep); the pool tests drive every other
// lease with a ManualClock.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, unique, type ApiCall } from "./http";
import { openJsonSocket } from "./json-socket";

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

const openedByTest: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of openedByTest.splice(0)) await close();
});

type HubMessage = { type: string; ref?: string; [key: string]: any };


const api = (path: string, call?: ApiCall) => callApi(base, path, call);

async function siteWithDevice() {
  const email = `${unique("chan")}@example.com`;
  const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } });
  expect(signup.status).toBe(201);
  const token = signup.json.data.access_token as string;
  const siteId = unique("SITE");
  expect((await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Channel store" } })).status).toBe(201);
  const device = await api(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token, body: { name: "Till 1", device_type: "pos_terminal" } });
  expect(device.status).toBe(201);
  const deviceId = device.json.device_id as string;
  const headers = { "X-Device-ID": deviceId, "X-API-Key": device.json.api_key as string };
  return { token, siteId, deviceId, headers };
}

/** The device's side of the channel: resolves `opened` with 101, or the HTTP status it was refused with. */
function connect(headers: Record<string, string>) {
  const socket = openJsonSocket<HubMessage>(`${wsBase}/api/v1/agent/channel`, headers, (m) => m.type);
  const { ws, messages, until, close } = socket;
  openedByTest.push(close);
  const send = (message: Record<string, unknown>) => ws.send(JSON.stringify(message));
  const reply = (ref: string) => until((m) => m.find((x) => x.ref === ref));
  const commands = () => messages.filter((m) => m.type === "command");
  return { ...socket, send, reply, commands };
}

const queue = (token: string, deviceId: string, commandType = "restart") =>
  api(`/api/v1/devices/${deviceId}/commands`, { method: "POST", token, body: { command_type: commandType } });

describe("device channel over a real WebSocket", () => {
  it("refuses a bad key with 401 before the upgrade", async () => {
    const { deviceId } = await siteWithDevice();
    const refused = connect({ "X-Device-ID": deviceId, "X-API-Key": "not-the-key" });
    expect(await refused.opened).toBe(401);
  });

  it("heartbeat and telemetry on the socket have the same effects as over HTTP", async () => {
    const { token, siteId, deviceId, headers } = await siteWithDevice();
    const device = connect(headers);
    expect(await device.opened).toBe(101);
    expect(await device.until((m) => m.find((x) => x.type === "hello"))).toMatchObject({ device_id: deviceId, site_id: siteId, next_heartbeat_s: 10 });

    device.send({ type: "heartbeat", id: "hb" });
    expect(await device.reply("hb")).toMatchObject({ type: "heartbeat.ok", device_status: "online" });
    const seen = await api(`/api/v1/devices/${deviceId}`, { token });
    expect(seen.json.status).toBe("online");

    const sample = { cpu_usage: 10, memory_usage: 20, disk_usage: 30 };
    device.send({ type: "telemetry", id: "t1", samples: [sample] });
    expect(await device.reply("t1")).toMatchObject({ results: [{ stored: true, reason: "first_sample" }] });
    // The same unchanged sample over HTTP is judged against what the socket stored: one delta state.
    const overHttp = await api("/api/v1/agent/telemetry", { method: "POST", headers, body: sample });
    expect(overHttp.json).toMatchObject({ stored: false, reason: "unchanged" });
    device.send({ type: "telemetry", id: "t2", samples: [{ ...sample, cpu_usage: 80 }] });
    expect(await device.reply("t2")).toMatchObject({ results: [{ stored: true, reason: "changed" }] });
  });

  it("a queued command arrives on the socket at once, and ack and result finish it", async () => {
    const { token, deviceId, headers } = await siteWithDevice();
    const device = connect(headers);
    expect(await device.opened).toBe(101);
    await device.until((m) => m.find((x) => x.type === "hello"));
    const queuedAt = Date.now();
    const queued = await queue(token, deviceId);
    expect(queued.status).toBe(201);
    const arrived = await device.until((m) => m.find((x) => x.type === "command"));
    // Generous: the hub sends it before the queue call even answers.
    expect(Date.now() - queuedAt).toBeLessThan(1_000);
    expect(arrived.command).toMatchObject({ command_id: queued.json.command_id, status: "delivered", attempts: 1 });
    device.send({ type: "ack", id: "a", command_id: queued.json.command_id });
    expect(await device.reply("a")).toMatchObject({ type: "ack.ok" });
    device.send({ type: "result", id: "r", command_id: queued.json.command_id, status: "completed", result: { ok: true } });
    expect(await device.reply("r")).toMatchObject({ type: "result.ok", command: { status: "completed" } });
  });

  it("switches between polling and the channel at will", async () => {
    const { token, deviceId, headers } = await siteWithDevice();
    // Polling: a command queued while no socket is open waits for the poll.
    const first = await queue(token, deviceId, "ping");
    const polled = await api("/api/v1/devices/pending", { headers });
    expect(polled.json.commands.map((c: { command_id: string }) => c.command_id)).toEqual([first.json.command_id]);
    expect((await api(`/api/v1/commands/${first.json.command_id}/ack`, { method: "POST", headers })).status).toBe(200);

    // Channel: the next one comes on the socket, and the poll has nothing.
    const device = connect(headers);
    expect(await device.opened).toBe(101);
    await device.until((m) => m.find((x) => x.type === "hello"));
    const second = await queue(token, deviceId, "ping");
    expect((await device.until((m) => m.find((x) => x.type === "command"))).command.command_id).toBe(second.json.command_id);
    expect((await api("/api/v1/devices/pending", { headers })).json.commands).toEqual([]);
    // The ack of the first, polled command may come on the socket too.
    device.send({ type: "result", id: "r1", command_id: first.json.command_id, status: "completed" });
    expect(await device.reply("r1")).toMatchObject({ type: "result.ok", command: { command_id: first.json.command_id, status: "completed" } });

    // And back to polling: with the socket closed, a new command waits for the poll again.
    await device.close();
    const third = await queue(token, deviceId, "ping");
    expect(third.json.status).toBe("pending");
    expect((await api("/api/v1/devices/pending", { headers })).json.commands.map((c: { command_id: string }) => c.command_id)).toEqual([third.json.command_id]);
  });

  it("a socket that drops before the ack loses nothing: the command is redelivered when its 60 s lease ends", async () => {
    const { token, deviceId, headers } = await siteWithDevice();
    const first = connect(headers);
    expect(await first.opened).toBe(101);
    const queued = await queue(token, deviceId);
    await first.until((m) => m.find((x) => x.type === "command"));
    first.ws.terminate();

    // Reconnected at once, the command is still leased to the dropped delivery: it does not come yet.
    const second = connect(headers);
    expect(await second.opened).toBe(101);
    await second.until((m) => m.find((x) => x.type === "hello"));
    expect(second.commands()).toEqual([]);
    // When the lease ends the hub's alarm puts it back out on the open socket, same id, second delivery.
    const again = await second.until((m) => m.find((x) => x.type === "command"), 80_000);
    expect(again.command).toMatchObject({ command_id: queued.json.command_id, attempts: 2 });
  }, 100_000);
});
