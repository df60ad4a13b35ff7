// End-to-end: an alert rule's webhook delivered to a real HTTP receiver on loopback, and an
// integration forwarding to a real TCP syslog receiver on loopback. The built bundle
// runs with the two test-only settings (AUDIT_ALLOW_LOOPBACK_RECEIVERS lets http://127.0.0.1
// through; AUDIT_DELIVERY_RETRY_BASE_MS shortens the backoff to a fraction of a second); a second
// service in the default configuration refuses the same receiver.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer } from "node:net";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { callApi, unique, type ApiCall } from "./http";

let testing: RunningService;
let defaults: RunningService;
let receiver: Server;
let receiverUrl: string;
let syslog: TcpServer;
let syslogPort: number;
/** Every byte the syslog receiver got, per connection. */
const syslogConnections: string[] = [];
const received: { headers: Record<string, string | string[] | undefined>; body: string; answered: number }[] = [];
/** The statuses the receiver answers, in order; then 200. */
let script: number[] = [];

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => { body += chunk; });
    req.on("end", () => {
      const answered = script.shift() ?? 200;
      received.push({ headers: req.headers, body, answered });
      res.writeHead(answered, { "content-type": "text/plain" }).end("ok");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks/fleet`;
  syslog = createTcpServer((socket) => {
    const index = syslogConnections.push("") - 1;
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => { syslogConnections[index] += chunk; });
  });
  await new Promise<void>((resolve) => syslog.listen(0, "127.0.0.1", resolve));
  syslogPort = (syslog.address() as AddressInfo).port;
  [testing, defaults] = await Promise.all([
    startService({ quiet: true, bindings: { AUDIT_ALLOW_LOOPBACK_RECEIVERS: "true", AUDIT_DELIVERY_RETRY_BASE_MS: "200" } }),
    startService({ quiet: true }),
  ]);
});

afterAll(async () => {
  await Promise.all([testing?.stop(), defaults?.stop()]);
  await new Promise((resolve) => receiver?.close(resolve));
  await new Promise((resolve) => syslog?.close(resolve));
});


const api = (service: RunningService, path: string, call?: ApiCall) => callApi(service.url, path, call);

async function administrator(service: RunningService) {
  const email = `${unique("admin")}@example.com`;
  expect((await api(service, "/api/v1/auth/signup", { method: "POST", body: { email, password: "correct-horse" } })).status).toBe(201);
  const d1 = await service.mf.getD1Database("DB");
  await d1.prepare("UPDATE users SET is_admin = 1 WHERE email = ?").bind(email).run();
  const login = await api(service, "/api/v1/auth/login", { method: "POST", body: { email, password: "correct-horse" } });
  return login.json.data.access_token as string;
}

const until = async <T>(check: () => T | undefined | false, what: string, timeoutMs = 20_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
};

/** What a receiver does with X-Fleet-Signature: recompute the HMAC over "t.body", compare, check the age. */
function verifySignature(header: string, body: string, secret: string, maxAgeS = 300): boolean {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!match) return false;
  const [, t, v1] = match;
  if (Math.abs(Date.now() / 1000 - Number(t)) > maxAgeS) return false;
  const expected = createHmac("sha256", secret).update(`${t}.${body}`).digest();
  return timingSafeEqual(expected, Buffer.from(v1, "hex"));
}

describe("alert webhooks", () => {
  it("deliver a signed payload to a real receiver, retrying after 500s, every try logged", async () => {
    const token = await administrator(testing);
    const type = unique("till_drawer_forced").replace(/-/g, "_");
    const created = await api(testing, "/api/v1/audit/alerts", {
      method: "POST", token,
      body: { alert_name: "Drawer forced", event_types: [type], threshold: 2, time_window: 60, cooldown: 0, notification: { webhook: receiverUrl } },
    });
    expect(created.status).toBe(201);
    const secret = created.json.webhook_secret as string;
    const alertId = created.json.alert_id as string;

    script = [500, 500];
    for (let i = 0; i < 2; i++) {
      expect((await api(testing, "/api/v1/audit/events", { method: "POST", token, body: { event_type: type, metadata: { till: i } } })).status).toBe(201);
    }
    const tries = await until(() => received.length >= 3 && received, "three tries");
    expect(tries.map((t) => t.answered)).toEqual([500, 500, 200]);

    const bodies = new Set(tries.map((t) => t.body));
    expect(bodies.size).toBe(1); // every try sends the same notification
    for (const t of tries) {
      expect(verifySignature(String(t.headers["x-fleet-signature"]), t.body, secret)).toBe(true);
      expect(verifySignature(String(t.headers["x-fleet-signature"]), t.body, "whsec_wrong")).toBe(false);
      expect(t.headers["content-type"]).toBe("application/json");
    }
    expect(tries.map((t) => t.headers["x-fleet-attempt"])).toEqual(["1", "2", "3"]);
    const payload = JSON.parse(tries[0].body);
    expect(payload).toMatchObject({
      type: "audit.alert", alert: { id: alertId, name: "Drawer forced", event_types: [type], threshold: 2, time_window: 60 }, count: 2,
      window: { seconds: 60 },
    });
    expect(payload.sample_events.map((e: { event_type: string }) => e.event_type)).toEqual([type, type]);
    expect(payload.firing_id).toBe(tries[0].headers["x-fleet-delivery"]);

    let deliveries: { attempt: number; outcome: string; http_status: number | null }[] = [];
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
      deliveries = (await api(testing, `/api/v1/audit/alerts/${alertId}/deliveries`, { token })).json.deliveries;
      if (deliveries.length === 3) break;
    }
    expect(deliveries.map((d) => [d.attempt, d.outcome, d.http_status])).toEqual([[3, "delivered", 200], [2, "retrying", 500], [1, "retrying", 500]]);
  });

  it("refuse a loopback or private receiver in the default configuration", async () => {
    const token = await administrator(defaults);
    for (const webhook of [receiverUrl, "https://10.0.0.8/hooks", "https://192.168.0.10/hooks"]) {
      const res = await api(defaults, "/api/v1/audit/alerts", {
        method: "POST", token, body: { alert_name: "x", event_types: ["login_failed"], threshold: 1, time_window: 60, notification: { webhook } },
      });
      expect(res.status, webhook).toBe(422);
    }
    expect((await api(defaults, "/api/v1/audit/alerts", { token })).json.alerts).toEqual([]);
  });
});

/** Splits octet-counted syslog frames (RFC 6587: "<byte length> <message>"); throws on a malformed frame. */
function octetCountedFrames(text: string): string[] {
  const bytes = Buffer.from(text, "utf8");
  const frames: string[] = [];
  let at = 0;
  while (at < bytes.length) {
    const space = bytes.indexOf(0x20, at);
    const length = Number(bytes.subarray(at, space).toString());
    if (!Number.isInteger(length) || length <= 0) throw new Error(`bad frame length at byte ${at}: ${text}`);
    frames.push(bytes.subarray(space + 1, space + 1 + length).toString("utf8"));
    at = space + 1 + length;
  }
  return frames;
}

describe("syslog integration", () => {
  it("forwards matching events to a real TCP receiver as RFC 5424 with octet counting, and the test event on demand", async () => {
    const token = await administrator(testing);
    const created = await api(testing, "/api/v1/audit/integrations", {
      method: "POST", token,
      body: { type: "syslog", destination: `tcp://127.0.0.1:${syslogPort}`, format: "rfc5424", filter: { categories: ["business_events"], severities: ["warning"] } },
    });
    expect(created.status).toBe(201);
    const type = unique("till_void").replace(/-/g, "_");
    const skipped = await api(testing, "/api/v1/audit/events", { method: "POST", token, body: { event_type: type, severity: "info", description: "not forwarded" } });
    const forwarded = await api(testing, "/api/v1/audit/events", { method: "POST", token, body: { event_type: type, severity: "warning", description: "Till 3 voided €120", metadata: { till: 3 } } });
    expect(forwarded.status).toBe(201);

    const frames = await until(() => {
      const all = syslogConnections.flatMap(octetCountedFrames);
      return all.some((f) => f.includes(`id="${forwarded.json.id}"`)) && all;
    }, "the forwarded event");
    const frame = frames.find((f) => f.includes(`id="${forwarded.json.id}"`))!;
    // facility log audit (13) × 8 + warning (4) = 108
    expect(frame).toMatch(new RegExp(`^<108>1 \\S+ fleet-edge fleet-edge - ${type} \\[audit@32473 id="${forwarded.json.id}" category="business_events" severity="warning"`));
    expect(frame).toContain("Till 3 voided €120");
    expect(frames.some((f) => f.includes(`id="${skipped.json.id}"`))).toBe(false);

    const before = syslogConnections.length;
    const tested = await api(testing, "/api/v1/audit/test", { method: "POST", token });
    expect(tested.status).toBe(200);
    expect(tested.json.results).toContainEqual(expect.objectContaining({ integration_id: created.json.integration_id, delivered: true, error: null, passes_filter: false }));
    const testFrames = await until(() => {
      const all = syslogConnections.slice(before).flatMap(octetCountedFrames);
      return all.some((f) => f.includes("integration_test")) && all;
    }, "the test event");
    expect(testFrames.find((f) => f.includes("integration_test"))).toMatch(/^<110>1 /);
  });
});
