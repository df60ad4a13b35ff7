import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, db, fetchChecked, signup, unique } from "./helpers";

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
