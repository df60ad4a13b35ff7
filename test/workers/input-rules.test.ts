import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, createSite, db, fetchChecked, signup, unique } from "./helpers";
import { deviceHeaders, registerDevice } from "./device-helpers";
import { isUniqueViolation } from "../../src/lib/errors";
import { findDuplicateKey } from "../../src/lib/json-keys";

const signupBytes = (bytes: Uint8Array) =>
  fetchChecked(new Request("http://fleet.test/api/v1/auth/signup", { method: "POST", headers: { "Content-Type": "application/json" }, body: bytes }));

const userByEmail = (email: string) => db().select().from(schema.users).where(eq(schema.users.email, email)).get();

describe("request bodies are read strictly", () => {
  it("refuses a body that is not valid UTF-8 with 400, and creates nothing", async () => {
    const email = `${unique("utf")}@example.com`;
    const head = new TextEncoder().encode(`{"email":"${email}","password":"secret1","full_name":"Jos`);
    const tail = new TextEncoder().encode(`"}`);
    // 0xE9 alone is Latin-1 "é": not a UTF-8 sequence. A lenient decoder turns it into U+FFFD.
    const body = new Uint8Array([...head, 0xe9, ...tail]);
    const res = await signupBytes(body);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ detail: expect.stringMatching(/UTF-8/) });
    expect(await userByEmail(email)).toBeUndefined();
    // overlong encodings and lone surrogates are invalid UTF-8 too
    for (const bad of [[0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]]) {
      expect((await signupBytes(new Uint8Array([...head, ...bad, ...tail]))).status, JSON.stringify(bad)).toBe(400);
    }
    // control: the same body in proper UTF-8 is accepted
    const good = await signupBytes(new Uint8Array([...head, 0xc3, 0xa9, ...tail]));
    expect(good.status).toBe(201);
    expect((await userByEmail(email))?.fullName).toBe("José");
  });

  it("refuses JSON with a duplicate key at any depth with 400 naming it, and changes nothing", async () => {
    const email = `${unique("dup")}@example.com`;
    const other = `${unique("dup")}@example.com`;
    const top = await call("/api/v1/auth/signup", { method: "POST", rawBody: `{"email":"${email}","password":"secret1","email":"${other}"}` });
    expect(top.status).toBe(400);
    expect(top.json).toEqual({ detail: expect.stringContaining("email") });
    expect(await userByEmail(email)).toBeUndefined();
    expect(await userByEmail(other)).toBeUndefined();

    const user = await signup();
    const site = unique("DUP-");
    const cases = [
      // the same key spelled with an escape is the same key
      `{"site_id":"${site}","name":"a","n\\u0061me":"b"}`,
      // nested in an object inside an array
      `{"site_id":"${site}","name":"a","extra":[1,{"k":1,"k":2}]}`,
      // deep nesting
      `{"site_id":"${site}","name":"a","x":{"y":{"z":{"__proto__":1,"__proto__":2}}}}`,
    ];
    for (const rawBody of cases) {
      const res = await call("/api/v1/sites/sites", { method: "POST", token: user.token, rawBody });
      expect(res.status, rawBody).toBe(400);
      expect(res.json, rawBody).toEqual({ detail: expect.stringMatching(/duplicate key/i) });
    }
    expect(await db().select().from(schema.sites).where(eq(schema.sites.siteId, site)).get()).toBeUndefined();

    // control: equal keys in different objects, and key-like strings as values, are fine
    const ok = await call("/api/v1/sites/sites", {
      method: "POST", token: user.token,
      rawBody: `{"site_id":"${site}","name":"a","x":[{"k":1},{"k":2}],"y":{"name":"name"},"z":"\\"name\\":1"}`,
    });
    expect(ok.status).toBe(201);
  });

  it("keeps answering malformed JSON with 400", async () => {
    const user = await signup();
    for (const rawBody of ["{", "{\"name\":}", "{\"a\":1,}", "[1,2"]) {
      const res = await call("/api/v1/sites/sites", { method: "POST", token: user.token, rawBody });
      expect(res.status, rawBody).toBe(400);
      expect(res.json).toEqual({ detail: expect.any(String) });
    }
  });

  it("checks credentials before reading the body", async () => {
    const res = await call("/api/v1/sites/sites", { method: "POST", rawBody: `{"name":"a","name":"b"}` });
    expect(res.status).toBe(401);
  });
});

// NUL, ESC, DEL, NEL (C1) and CSI (C1), and the line breaks and tab a one-line value must not hold either.
const CONTROLS = ["\u0000", "\u001b", "\u007f", "\u0085", "\u009b", "\n", "\t"];

describe("names and identifiers refuse control characters", () => {
  it("answers 422 for a control character in any name or identifier, and stores nothing", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const device = await registerDevice(owner.token, siteId);
    const cases: { path: string; method?: string; body: (bad: string) => Record<string, unknown>; token?: string; headers?: Record<string, string> }[] = [
      { path: "/api/v1/auth/signup", body: (bad) => ({ email: `${unique("cc")}@example.com`, password: "secret1", full_name: `Ann${bad}` }) },
      { path: "/api/v1/sites/sites", body: (bad) => ({ name: `Store${bad}` }) },
      { path: "/api/v1/sites/sites", body: (bad) => ({ name: "Store", location: `Main St${bad}` }) },
      { path: `/api/v1/devices/sites/${siteId}/devices`, body: (bad) => ({ name: `Till${bad}` }) },
      { path: `/api/v1/devices/sites/${siteId}/devices`, body: (bad) => ({ name: "Till", device_type: `pos${bad}` }) },
      { path: `/api/v1/devices/${device.device_id}`, method: "PATCH", body: (bad) => ({ name: `Till${bad}` }) },
      { path: `/api/v1/jobs/sites/${siteId}/jobs`, body: (bad) => ({ action: `restart${bad}` }) },
      { path: `/api/v1/sites/${siteId}/enrolment-intents`, body: (bad) => ({ expected_device_identity: `SN-1${bad}` }) },
      { path: `/api/v1/sites/${siteId}/enrolment-intents`, body: (bad) => ({ idempotency_key: `k${bad}` }) },
      { path: "/api/v1/audit/events", body: (bad) => ({ event_type: "transaction_processed", session_id: `s${bad}` }) },
      { path: `/api/v1/agents/${device.device_id}/push`, body: (bad) => ({ title: `Hello${bad}` }) },
      { path: "/api/v1/agent/device-dna", body: (bad) => ({ hostname: `till-1${bad}` }), token: "", headers: deviceHeaders(device.device_id, device.api_key) },
    ];
    for (const c of cases) {
      for (const bad of CONTROLS) {
        const body = c.body(bad);
        const res = await call(c.path, { method: c.method ?? "POST", token: c.token ?? owner.token, headers: c.headers, body });
        expect(res.status, `${c.path} ${JSON.stringify(body)}`).toBe(422);
        expect(JSON.stringify(res.json.detail), `${c.path} ${JSON.stringify(body)}`).toMatch(/control character/i);
      }
    }
    expect((await db().select().from(schema.users).where(eq(schema.users.fullName, "Ann\u0000")).all())).toEqual([]);
    expect((await db().select().from(schema.devices).where(eq(schema.devices.siteId, siteId)).all()).map((d) => d.name)).toEqual(["Till"]);
  });

  it("lets descriptions and messages hold line breaks and tabs, but no other control character", async () => {
    const owner = await signup();
    const multiLine = await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { name: "Store", description: "Line one\r\n\tLine two" } });
    expect(multiLine.status).toBe(201);
    for (const bad of ["\u0000", "\u001b", "\u007f", "\u0085", "\u009b"]) {
      const res = await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { name: "Store", description: `Line${bad}` } });
      expect(res.status, JSON.stringify(bad)).toBe(422);
      const event = await call("/api/v1/audit/events", { method: "POST", token: owner.token, body: { event_type: "transaction_processed", description: `Sale${bad}` } });
      expect(event.status, JSON.stringify(bad)).toBe(422);
    }
  });

  it("accepts names in any script, with spaces and punctuation", async () => {
    const owner = await signup();
    const res = await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { name: "Café Zürich — Kasse 1 (東京) 🛒", location: "Bahnhofstraße 1" } });
    expect(res.status).toBe(201);
  });
});

const UNSAFE_URLS = [
  "file:///etc/passwd",
  "javascript:alert(1)",
  "http://config.example.com/pos.json",
  "ftp://config.example.com/pos.json",
  "data:text/plain,hello",
  "https://",
  "https://user:secret@config.example.com/pos.json",
  "/relative/path.json",
  "config.example.com/pos.json",
];

describe("config_url accepts only https URLs", () => {
  it("on jobs: 422 for any other scheme, a missing host or embedded credentials; nothing is created", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    for (const config_url of UNSAFE_URLS) {
      const res = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "update_config", config_url } });
      expect(res.status, config_url).toBe(422);
      expect(res.json.detail[0].loc, config_url).toEqual(["body", "config_url"]);
    }
    expect(await db().select().from(schema.jobs).where(eq(schema.jobs.siteId, siteId)).all()).toEqual([]);
    const ok = await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token: owner.token, body: { action: "update_config", config_url: "https://config.example.com/pos.json?v=2" } });
    expect(ok.status).toBe(201);
  });

  it("in command payloads and pushes, wherever the key config_url appears", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const device = await registerDevice(owner.token, siteId);
    const command = (payload: Record<string, unknown>) =>
      call(`/api/v1/devices/${device.device_id}/commands`, { method: "POST", token: owner.token, body: { command_type: "update_config", payload } });
    const pushed = (body: Record<string, unknown>) => call(`/api/v1/agents/${device.device_id}/push`, { method: "POST", token: owner.token, body });
    for (const url of UNSAFE_URLS) {
      const top = await command({ config_url: url });
      expect(top.status, url).toBe(422);
      expect(top.json.detail[0].loc, url).toEqual(["body", "payload", "config_url"]);
      expect((await command({ settings: { config_url: url } })).status, url).toBe(422);
      expect((await pushed({ title: "Update", data: { config_url: url } })).status, url).toBe(422);
      expect((await pushed({ config: { config_url: url } })).status, url).toBe(422);
    }
    // a payload too deep to look through is refused rather than passed unchecked
    let deep: Record<string, unknown> = { config_url: "file:///etc/passwd" };
    for (let i = 0; i < 40; i++) deep = { inner: deep };
    const tooDeep = await command(deep);
    expect(tooDeep.status).toBe(422);
    expect(JSON.stringify(tooDeep.json.detail)).toMatch(/levels deep/);
    const listed = await call(`/api/v1/devices/${device.device_id}/commands`, { token: owner.token });
    expect(listed.json.total).toBe(0);
    expect((await command({ config_url: "https://config.example.com/pos.json" })).status).toBe(201);
    expect((await pushed({ title: "Update", data: { config_url: "https://config.example.com/pos.json" } })).status).toBe(200);
  });
});

describe("usernames, e-mails, site ids and device ids are unique regardless of case", () => {
  it("refuses a username that differs from a taken one only in case (400)", async () => {
    const name = unique("Bob");
    await signup({ username: name });
    const res = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("u")}@example.com`, password: "secret1", username: name.toLowerCase() } });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ detail: "Username already taken" });
    const upper = await call("/api/v1/auth/signup", { method: "POST", body: { email: `${unique("u")}@example.com`, password: "secret1", username: name.toUpperCase() } });
    expect(upper.status).toBe(400);
  });

  it("finds an account stored with capitals by any spelling of its e-mail, and refuses a twin", async () => {
    // Accounts made before e-mails were normalised keep their spelling.
    const email = `${unique("Ann.Legacy")}@Example.COM`;
    const password = "correct-horse";
    const { hashSecret } = await import("../../src/services/passwords");
    await db().insert(schema.users).values({ email, username: unique("legacy"), passwordHash: await hashSecret(password) });
    const login = await call("/api/v1/auth/login", { method: "POST", body: { email: email.toLowerCase(), password } });
    expect(login.status).toBe(200);
    const twin = await call("/api/v1/auth/signup", { method: "POST", body: { email: email.toLowerCase(), password: "secret1" } });
    expect(twin.status).toBe(400);
    expect(twin.json).toEqual({ detail: "Email already registered" });
    // the database itself refuses a twin that skips the service's checks
    const direct = await db().insert(schema.users).values({ email: email.toUpperCase(), username: unique("direct") }).run().catch((e: unknown) => e);
    expect(direct).toBeInstanceOf(Error);
  });

  it("refuses a site id that differs from an existing one only in case (409)", async () => {
    const owner = await signup();
    const siteId = unique("STORE-CI-");
    await createSite(owner.token, { site_id: siteId });
    const res = await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { site_id: siteId.toLowerCase(), name: "Twin" } });
    expect(res.status).toBe(409);
    expect(res.json).toEqual({ detail: expect.stringContaining("already exists") });
    expect(await db().select().from(schema.sites).where(eq(schema.sites.siteId, siteId.toLowerCase())).get()).toBeUndefined();
    // a create racing past the check is stopped by the index, which the service recognises as a conflict
    const raced = await db().insert(schema.sites).values({ siteId: siteId.toLowerCase(), name: "Twin" }).run().catch((e: unknown) => e);
    expect(isUniqueViolation(raced, "sites_site_id_ci_uq")).toBe(true);
  });

  it("refuses a device id that differs from an existing one only in case, in any site (409)", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const otherSite = await createSite(owner.token);
    const deviceId = unique("POS-CI-");
    await registerDevice(owner.token, siteId, { device_id: deviceId });
    for (const [site, id] of [[siteId, deviceId.toLowerCase()], [otherSite, deviceId.toLowerCase()], [otherSite, deviceId]]) {
      const res = await call(`/api/v1/devices/sites/${site}/devices`, { method: "POST", token: owner.token, body: { device_id: id, name: "Twin" } });
      expect(res.status, `${site} ${id}`).toBe(409);
    }
    expect(await db().select().from(schema.devices).where(eq(schema.devices.deviceId, deviceId.toLowerCase())).get()).toBeUndefined();
  });
});

describe("findDuplicateKey", () => {
  it("names the path of the first repeated key, reading strings, escapes and nesting correctly", () => {
    const cases: [string, (string | number)[] | undefined][] = [
      ['{"a":1,"b":2}', undefined],
      ['{"a":1,"a":2}', ["a"]],
      ['{"a":[{"b":1},{"b":1,"b":2}]}', ["a", 1, "b"]],
      ['[[0],[1,{"x":{"y":1,"y":2}}]]', [1, 1, "x", "y"]],
      // braces, quotes and commas inside strings are text, not structure
      ['{"a":"}\\",{\\"a\\":","b":1}', undefined],
      ['{"a":"}\\",{","a":1}', ["a"]],
      // a string ending in an escaped backslash
      ['{"x":"\\\\","y":"\\\\\\\\","x":2}', ["x"]],
      // the same key written with escapes
      ['{"é":1,"\\u00e9":2}', ["é"]],
      ['{"a\\nb":1,"a\\u000ab":2}', ["a\nb"]],
      // equal keys in sibling and nested objects are different keys
      ['{"k":{"k":{"k":1}},"j":[{"k":1},{"k":2}]}', undefined],
      ['"just a string"', undefined],
      ['{}', undefined],
    ];
    for (const [json, expected] of cases) {
      JSON.parse(json);
      expect(findDuplicateKey(json), json).toEqual(expected);
    }
  });
});
