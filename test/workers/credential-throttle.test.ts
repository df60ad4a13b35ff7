import { createExecutionContext, runDurableObjectAlarm, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { and, eq, sql } from "drizzle-orm";
import bcrypt from "bcryptjs";
import { describe, expect, it } from "vitest";
import * as schema from "../../src/db/schema";
import { createApp } from "../../src/app";
import { ExpiringMap } from "../../src/lib/expiring-map";
import { CHECKS_IN_FLIGHT_PER_ADDRESS, clientAddressOf } from "../../src/services/credential-throttle";
import { DEVICE_AUTH_THROTTLED } from "../../src/services/device-auth";
import { LOGIN_THROTTLED } from "../../src/services/users";
import { FAILURES_PER_CLIENT, FAILURES_PER_CREDENTIAL, GUARD_WINDOW_MS } from "../../src/shared/guard-contract";
import { checkResponse } from "./response-contract";
import { call, db, signup, unique } from "./helpers";
import { deviceHeaders, heartbeat, registerDevice, siteWithOperator } from "./device-helpers";
import { guardStub, installClock, installGuardClock } from "./clock";

/** wrangler.toml, [[ratelimits]]: failed credential checks and signups per address and minute. */
const ADDRESS_FAILURE_LIMIT = 10;
const SIGNUP_LIMIT = 10;

const from = (address: string) => ({ "CF-Connecting-IP": address });
let addresses = Math.floor(Math.random() * 200) * 250;
/** A client address no other test uses (198.18.0.0/15 is reserved for tests like these). */
const newAddress = () => { addresses++; return `198.18.${Math.floor(addresses / 250) % 256}.${(addresses % 250) + 1}`; };

const login = (email: string, password: string, address: string) =>
  call("/api/v1/auth/login", { method: "POST", body: { email, password }, headers: from(address) });

const loginFailures = (email: string) => db().select().from(schema.auditLogs)
  .where(and(eq(schema.auditLogs.eventType, "login_failed"), sql`json_extract(${schema.auditLogs.eventMetadata}, '$.email') = ${email.toLowerCase()}`))
  .all();

/** A device written straight to D1, as another isolate would have: its key costs this isolate a bcrypt. */
async function importedDevice(siteId: string) {
  const deviceId = unique("IMP-");
  const apiKey = `key-${crypto.randomUUID()}`;
  await db().insert(schema.devices).values({ deviceId, siteId, name: deviceId, apiKeyHash: await bcrypt.hash(apiKey, 10) });
  return { deviceId, apiKey };
}

const heartbeatFrom = (deviceId: string, apiKey: string, address: string) =>
  call("/api/v1/agent/heartbeat", { method: "POST", headers: { ...deviceHeaders(deviceId, apiKey), ...from(address) }, body: {} });

describe("client addresses", () => {
  it("keys IPv4 as is and IPv6 by its /64, in any spelling", () => {
    expect(clientAddressOf("203.0.113.9")).toBe("203.0.113.9");
    expect(clientAddressOf(" 203.0.113.9 ")).toBe("203.0.113.9");
    expect(clientAddressOf("2001:db8:a:b:1:2:3:4")).toBe("2001:db8:a:b::/64");
    expect(clientAddressOf("2001:0DB8:000a:000b::ffff")).toBe("2001:db8:a:b::/64");
    expect(clientAddressOf("2001:db8:a::1")).toBe("2001:db8:a:0::/64");
    expect(clientAddressOf("[2001:db8:a:b::1]")).toBe("2001:db8:a:b::/64");
    expect(clientAddressOf("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
    expect(clientAddressOf("::ffff:198.51.100.7")).toBe("198.51.100.7");
    expect(clientAddressOf("64:ff9b::198.51.100.7")).toBe("64:ff9b:0:0::/64");
    expect(clientAddressOf("not:an:address::x::")).toBe("not:an:address::x::");
    expect(clientAddressOf(undefined)).toBeUndefined();
    expect(clientAddressOf("")).toBeUndefined();
  });

  it("ExpiringMap: entries lapse at their time, and the oldest goes first when it is full", () => {
    let now = 1_000;
    const map = new ExpiringMap<string>(2, () => now);
    map.set("a", "first", 2_000);
    map.set("b", "second", 3_000);
    expect([map.get("a"), map.get("b")]).toEqual(["first", "second"]);
    now = 2_000;
    expect([map.has("a"), map.has("b")]).toEqual([false, true]);
    map.set("c", "third", 5_000);
    map.set("d", "fourth", 5_000);
    expect([map.has("b"), map.has("c"), map.has("d"), map.size]).toEqual([false, true, true, 2]);
    map.deleteWhere((key) => key === "c");
    expect([map.has("c"), map.has("d")]).toEqual([false, true]);
  });
});

describe("login throttling", () => {
  it("checks exactly 5 of 40 parallel wrong logins; the others answer 429 unchecked", async () => {
    const victim = await signup();
    // No address (so no per-address limit in this isolate): the account's guard alone counts them.
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) =>
      call("/api/v1/auth/login", { method: "POST", body: { email: victim.email, password: `wrong-${i}` } })));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 401)).toHaveLength(FAILURES_PER_CLIENT);
    expect(statuses.filter((s) => s === 429)).toHaveLength(40 - FAILURES_PER_CLIENT);
    for (const refused of results.filter((r) => r.status === 429)) {
      expect(refused.json.detail).toBe(LOGIN_THROTTLED);
      expect(Number(refused.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    }
    // Only the checked attempts are audited: the refused ones never reached a bcrypt.
    expect(await loginFailures(victim.email)).toHaveLength(FAILURES_PER_CLIENT);
  });

  it("lets the owner in from an address that has not failed, however many attackers failed before", async () => {
    const owner = await signup();
    const [first, second, third, home] = [newAddress(), newAddress(), newAddress(), newAddress()];
    for (const attacker of [first, second]) {
      for (let i = 0; i < FAILURES_PER_CLIENT; i++) expect((await login(owner.email, `wrong-${i}`, attacker)).status).toBe(401);
      const refused = await login(owner.email, "wrong-again", attacker);
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("Retry-After"))).toBeGreaterThan(800);
    }
    // The account has now failed 10 times: a third address gets one check, then waits like the others.
    expect(FAILURES_PER_CREDENTIAL).toBe(2 * FAILURES_PER_CLIENT);
    expect((await login(owner.email, "wrong", third)).status).toBe(401);
    expect((await login(owner.email, "wrong", third)).status).toBe(429);

    const welcome = await login(owner.email, owner.password, home);
    expect(welcome.status, welcome.text).toBe(200);
    // An attacker's address stays refused, even with the right password.
    expect((await login(owner.email, owner.password, first)).status).toBe(429);
  });

  it("forgets failures after the window, and the guard then holds no storage", async () => {
    const user = await signup();
    const address = newAddress();
    const clock = await installGuardClock("email", user.email);
    for (let i = 0; i < FAILURES_PER_CLIENT; i++) expect((await login(user.email, `wrong-${i}`, address)).status).toBe(401);
    expect(await guardStub("email", user.email).failureCount()).toBe(FAILURES_PER_CLIENT);

    clock.advance(GUARD_WINDOW_MS - 60_000);
    const waiting = await login(user.email, user.password, address);
    expect(waiting.status).toBe(429);
    expect(Number(waiting.headers.get("Retry-After"))).toBeLessThanOrEqual(60);
    clock.advance(60_000);
    expect((await login(user.email, user.password, address)).status).toBe(200);

    await runDurableObjectAlarm(guardStub("email", user.email));
    const stored = await runInDurableObject(guardStub("email", user.email), async (_guard, state) =>
      ({ failures: state.storage.kv.get("failures"), alarm: await state.storage.getAlarm() }));
    expect(stored).toEqual({ failures: undefined, alarm: null });
  });

  it("runs at most 4 checks at once per address, whatever credentials they name", async () => {
    const attacker = newAddress();
    const results = await Promise.all(Array.from({ length: 12 }, () => login(`${unique("nobody")}@example.com`, "wrong-password", attacker)));
    const checked = results.filter((r) => r.status === 401).length;
    expect(checked).toBeGreaterThanOrEqual(1);
    expect(checked).toBeLessThanOrEqual(CHECKS_IN_FLIGHT_PER_ADDRESS);
    for (const refused of results.filter((r) => r.status !== 401)) {
      expect([refused.status, refused.headers.get("Retry-After")]).toEqual([429, "1"]);
    }
  });

  it("refuses an address that failed on many credentials, by its /64 for IPv6, before any check", async () => {
    const net = (Math.floor(Math.random() * 0xffff)).toString(16);
    const attacker = `2001:db8:${net}:1::1`;
    let checked = 0;
    let refused: Awaited<ReturnType<typeof call>> | undefined;
    // The limiter counts per minute: a minute boundary during the loop lets at most one more minute's worth through.
    for (let i = 0; i < 2 * ADDRESS_FAILURE_LIMIT + 2 && !refused; i++) {
      const res = await login(`${unique("nobody")}@example.com`, "wrong-password", attacker);
      if (res.status === 429) refused = res;
      else {
        expect(res.status).toBe(401);
        checked++;
      }
    }
    expect(refused).toBeDefined();
    expect(checked).toBeGreaterThan(ADDRESS_FAILURE_LIMIT);
    expect(checked).toBeLessThanOrEqual(2 * ADDRESS_FAILURE_LIMIT + 1);
    expect(Number(refused!.headers.get("Retry-After"))).toBeGreaterThan(60);

    const fresh = `${unique("nobody")}@example.com`;
    const before = (await loginFailures(fresh)).length;
    expect((await login(fresh, "wrong-password", `2001:db8:${net}:1:ffff::2`)).status).toBe(429);
    expect((await loginFailures(fresh)).length).toBe(before);
    expect((await login(fresh, "wrong-password", `2001:db8:${net}:2::1`)).status).toBe(401);
  });
});

describe("device key throttling", () => {
  it("answers a wrong-key flood with 429 and no bcrypt after 5 failures; the device itself still gets in", async () => {
    const { siteId } = await siteWithOperator();
    const { deviceId, apiKey } = await importedDevice(siteId);
    const [attacker, store] = [newAddress(), newAddress()];
    for (let i = 0; i < FAILURES_PER_CLIENT; i++) {
      const res = await heartbeatFrom(deviceId, `wrong-${i}`, attacker);
      expect(res.status).toBe(401);
      expect(res.headers.get("Server-Timing")).toContain('desc="bcrypt"');
    }
    for (let i = 0; i < 3; i++) {
      const res = await heartbeatFrom(deviceId, `wrong-again-${i}`, attacker);
      expect(res.status).toBe(429);
      expect(res.json.detail).toBe(DEVICE_AUTH_THROTTLED);
      expect(res.headers.get("Server-Timing")).toBe('device-auth;desc="throttled"');
      expect(Number(res.headers.get("Retry-After"))).toBeGreaterThan(800);
    }
    // This isolate remembers the refusal and answers a repeat before its hub call: even with the
    // guard's counts gone, the attacker is refused without a check.
    await guardStub("device", deviceId).forget();
    const remembered = await heartbeatFrom(deviceId, "wrong-once-more", attacker);
    expect([remembered.status, remembered.headers.get("Server-Timing")]).toEqual([429, 'device-auth;desc="throttled"']);
    expect(await guardStub("device", deviceId).failureCount()).toBe(0);

    const admitted = await heartbeatFrom(deviceId, apiKey, store);
    expect(admitted.status).toBe(200);
    expect(admitted.headers.get("Server-Timing")).toContain('desc="bcrypt"');
  });

  it("checks exactly 5 of 20 parallel wrong keys on a route that authenticates in its middleware", async () => {
    const { siteId } = await siteWithOperator();
    const { deviceId } = await importedDevice(siteId);
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => call("/api/v1/agent/device-dna", {
      method: "POST", headers: deviceHeaders(deviceId, `wrong-${i}`), body: { hostname: "till" },
    })));
    expect(results.filter((r) => r.status === 401)).toHaveLength(FAILURES_PER_CLIENT);
    expect(results.filter((r) => r.status === 429)).toHaveLength(20 - FAILURES_PER_CLIENT);
    expect(await guardStub("device", deviceId).failureCount()).toBe(FAILURES_PER_CLIENT);
  });

  it("forgets a device's failures when its key is rotated, so the device gets in with the new one at once", async () => {
    const { owner, siteId } = await siteWithOperator();
    const { deviceId } = await importedDevice(siteId);
    const store = newAddress();
    // A till with a stale key keeps failing until it waits.
    for (let i = 0; i < FAILURES_PER_CLIENT; i++) expect((await heartbeatFrom(deviceId, "stale-key", store)).status).toBe(401);
    expect((await heartbeatFrom(deviceId, "stale-key", store)).status).toBe(429);
    const rotated = await call(`/api/v1/devices/${deviceId}/rotate-key`, { method: "POST", token: owner.token });
    expect(rotated.status).toBe(200);
    expect(await guardStub("device", deviceId).failureCount()).toBe(0);
    expect((await heartbeatFrom(deviceId, rotated.json.api_key, store)).status).toBe(200);
  });
});

describe("unknown device ids", () => {
  it("remembers an unknown id for a short while, and admits at once a device this isolate registers", async () => {
    const { owner, siteId } = await siteWithOperator();
    const probed = unique("GHOST-");
    expect((await heartbeat(probed, "any-key")).status).toBe(401);
    // Written to D1 behind this isolate's back (as another isolate would): unknown here until the entry lapses.
    const apiKey = `key-${crypto.randomUUID()}`;
    await db().insert(schema.devices).values({ deviceId: probed, siteId, name: probed, apiKeyHash: await bcrypt.hash(apiKey, 10) });
    expect((await heartbeat(probed, apiKey)).status).toBe(401);

    // A device registered through this isolate is known at once, even under an id probed before.
    const chosen = unique("POS-");
    expect((await heartbeat(chosen, "any-key")).status).toBe(401);
    const registered = await registerDevice(owner.token, siteId, { device_id: chosen });
    expect((await heartbeat(chosen, registered.api_key)).status).toBe(200);
  });
});

describe("a wrong device key answers 401 whatever the body", () => {
  /** Sends without the response contract check: a 415 is Hono's own answer, which no route declares. */
  async function send(path: string, deviceId: string, apiKey: string, body: { raw: string; type: string }) {
    const res = await exports.default.fetch(new Request(`http://fleet.test${path}`, {
      method: "POST", headers: { ...deviceHeaders(deviceId, apiKey), ...from(newAddress()), "Content-Type": body.type }, body: body.raw,
    }));
    return { status: res.status, json: await res.json<{ detail: unknown }>() };
  }

  it("gives an unknown device, a wrong key and a known device with a bad body and a wrong key the same 401", async () => {
    const { owner, siteId } = await siteWithOperator();
    const d = await registerDevice(owner.token, siteId);
    const ghost = unique("GHOST-");
    const bodies = {
      400: { raw: "{not json", type: "application/json" },
      422: { raw: JSON.stringify({ status: 42, heartbeat_interval_s: "soon", cpu_usage: "high", hostname: ["x"] }), type: "application/json" },
      415: { raw: "status=ok", type: "text/plain" },
    };
    for (const path of ["/api/v1/agent/heartbeat", "/api/v1/agent/telemetry", "/api/v1/analytics/device-metrics", "/agent/heartbeat", "/api/v1/agent/device-dna"]) {
      for (const [status, body] of Object.entries(bodies)) {
        const unknown = await send(path, ghost, "some-key", body);
        const wrongKey = await send(path, d.device_id, `${d.api_key}-not`, body);
        expect([unknown.status, wrongKey.status], `${path} ${status}`).toEqual([401, 401]);
        expect(wrongKey.json).toEqual(unknown.json);
        // Only the holder of the right key learns what was wrong with its body.
        expect((await send(path, d.device_id, d.api_key, body)).status, `${path} ${status}`).toBe(Number(status));
      }
    }
  });
});

describe("signup throttling", () => {
  it("limits signups per client address with 429 and Retry-After", async () => {
    const address = newAddress();
    const signupFrom = (ip: string): Promise<Awaited<ReturnType<typeof call>>> => call("/api/v1/auth/signup", {
      method: "POST", body: { email: `${unique("s")}@example.com`, password: "correct-horse" }, headers: from(ip),
    });
    let created = 0;
    let refused: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 2 * SIGNUP_LIMIT + 2 && !refused; i++) {
      const res = await signupFrom(address);
      if (res.status === 429) refused = res;
      else {
        expect(res.status, res.text).toBe(201);
        created++;
      }
    }
    expect(refused).toBeDefined();
    expect(created).toBeGreaterThanOrEqual(SIGNUP_LIMIT);
    expect(created).toBeLessThanOrEqual(2 * SIGNUP_LIMIT);
    expect(refused!.headers.get("Retry-After")).toBe("60");
    expect((await signupFrom(newAddress())).status).toBe(201);
  });
});

describe("bootstrap self-enrolment: throttle and hourly quota", () => {
  const app = createApp();
  const PATH = "/api/v1/devices/bootstrap-provision";

  /** Sends through a fresh app with these variables (the quota is configuration). */
  async function provision(body: Record<string, unknown>, address: string, vars: Partial<typeof env> = {}) {
    const init: RequestInit = { method: "POST", headers: { "Content-Type": "application/json", ...from(address) }, body: JSON.stringify(body) };
    const ctx = createExecutionContext();
    const res = await app.request(PATH, init, { ...env, ...vars }, ctx);
    await waitOnExecutionContext(ctx);
    await checkResponse(new Request(`http://fleet.test${PATH}`, init), res);
    return { status: res.status, headers: res.headers, json: await res.json<{ detail?: string }>() };
  }

  async function siteWithKey() {
    const { owner, siteId } = await siteWithOperator();
    const created = await call(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token: owner.token });
    expect(created.status).toBe(201);
    return { owner, siteId, key: created.json.bootstrap_key as string };
  }

  it("enrols at most BOOTSTRAP_ENROLMENTS_PER_HOUR devices per site in a rolling hour, however many arrive at once", async () => {
    const { siteId, key } = await siteWithKey();
    const clock = await installClock(siteId);
    const store = newAddress();
    const quota = { BOOTSTRAP_ENROLMENTS_PER_HOUR: "3" };
    const results = await Promise.all(Array.from({ length: 5 }, (_, i) =>
      provision({ site_id: siteId, bootstrap_key: key, device_name: `Till ${i}` }, store, quota)));
    expect(results.filter((r) => r.status === 201)).toHaveLength(3);
    const refused = results.filter((r) => r.status === 429);
    expect(refused).toHaveLength(2);
    expect(refused[0].json.detail).toBe("This site's bootstrap enrolment quota is used up (3 devices per hour); try again later");
    expect(Number(refused[0].headers.get("Retry-After"))).toBe(3600);
    expect(await db().select().from(schema.devices).where(eq(schema.devices.siteId, siteId)).all()).toHaveLength(3);

    clock.advance(3_600_000);
    expect((await provision({ site_id: siteId, bootstrap_key: key, device_name: "Till 5" }, store, quota)).status).toBe(201);
  });

  it("gives the slot back when the enrolment fails", async () => {
    const { owner, siteId, key } = await siteWithKey();
    await registerDevice(owner.token, siteId, { name: "Taken" });
    const store = newAddress();
    const quota = { BOOTSTRAP_ENROLMENTS_PER_HOUR: "1" };
    expect((await provision({ site_id: siteId, bootstrap_key: key, device_name: "Taken" }, store, quota)).status).toBe(409);
    expect((await provision({ site_id: siteId, bootstrap_key: key, device_name: "Fresh" }, store, quota)).status).toBe(201);
    expect((await provision({ site_id: siteId, bootstrap_key: key, device_name: "One more" }, store, quota)).status).toBe(429);
  });

  it("throttles wrong keys per site and address, for sites without a key too; the store still enrols", async () => {
    const { siteId, key } = await siteWithKey();
    const attacker = newAddress();
    for (const site of [siteId, unique("NOSITE-")]) {
      for (let i = 0; i < FAILURES_PER_CLIENT; i++) {
        expect((await provision({ site_id: site, bootstrap_key: `bk_wrong_${i}`, device_name: `X ${i}` }, attacker)).status).toBe(401);
      }
      const refused = await provision({ site_id: site, bootstrap_key: "bk_wrong", device_name: "X" }, attacker);
      expect(refused.status).toBe(429);
      expect(refused.json.detail).toBe("Too many failed bootstrap enrolments for this site; try again later");
    }
    expect((await provision({ site_id: siteId, bootstrap_key: key, device_name: "Till" }, newAddress())).status).toBe(201);
  });
});
