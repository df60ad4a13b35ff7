import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { readConfig } from "../../src/shared/config";
import { call, createSite, eventually, grantSiteRole, signup } from "./helpers";
import { hub } from "./agents-helpers";
import { installClock } from "./clock";
import { openSocket, openStream } from "./live-helpers";

const ws = (siteId: string) => `/api/v1/sites/${siteId}/ws`;
const events = (siteId: string) => `/api/v1/sites/${siteId}/events`;

describe("live channel limits: configuration", () => {
  it("defaults to 10 subscriptions per user per site and 1000 per site, and no extra origins", () => {
    const defaults = readConfig({});
    expect(defaults.live).toEqual({ maxSubscriptionsPerUser: 10, maxSubscriptionsPerSite: 1000 });
    expect(defaults.corsOrigins).toEqual([]);
    const configured = readConfig({
      LIVE_MAX_SUBSCRIPTIONS_PER_USER: "4", LIVE_MAX_SUBSCRIPTIONS_PER_SITE: "2.5",
      CORS_ORIGINS: " https://Console.Example.com/ , not a url, http://tills.example:8080,null",
    });
    expect(configured.live).toEqual({ maxSubscriptionsPerUser: 4, maxSubscriptionsPerSite: 1000 });
    expect(configured.corsOrigins).toEqual(["https://console.example.com", "http://tills.example:8080"]);
    // the test pool runs with small caps, so the tests below can reach them
    expect(readConfig(env).live).toEqual({ maxSubscriptionsPerUser: 3, maxSubscriptionsPerSite: 5 });
  });
});

describe("live channel limits: subscriptions", () => {
  it("refuses a user's subscription past the per-user cap with 429 and Retry-After, before any upgrade; others still connect", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const first = await openSocket(ws(siteId), { token: owner.token });
    await openSocket(ws(siteId), { token: owner.token });
    expect((await openStream(events(siteId), { token: owner.token })).status).toBe(200);

    for (const refused of [await openSocket(ws(siteId), { token: owner.token }), await openStream(events(siteId), { token: owner.token })]) {
      expect(refused.status).toBe(429);
      expect(refused.headers.get("Retry-After")).toMatch(/^\d+$/);
      expect(refused.body).toEqual({ detail: expect.stringMatching(/3/) });
    }
    expect((await hub(siteId).subscribers(siteId)).subscriptions).toHaveLength(3);
    expect((await openSocket(ws(siteId), { token: viewer.token })).status).toBe(101);

    first.ws!.close(1000, "making room");
    await eventually(async () => (await hub(siteId).subscribers(siteId)).websockets === 2);
    expect((await openSocket(ws(siteId), { token: owner.token })).status).toBe(101);
  });

  it("refuses any subscription past the per-site cap", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const others = [await signup(), await signup()];
    for (const u of others) await grantSiteRole(owner.token, siteId, u, "viewer");
    for (let i = 0; i < 3; i++) expect((await openSocket(ws(siteId), { token: owner.token })).status).toBe(101);
    expect((await openStream(events(siteId), { token: others[0].token })).status).toBe(200);
    expect((await openSocket(ws(siteId), { token: others[0].token })).status).toBe(101);
    const refused = await openSocket(ws(siteId), { token: others[1].token });
    expect(refused.status).toBe(429);
    expect(refused.body!.detail).toMatch(/site/);
    expect(refused.headers.get("Retry-After")).toMatch(/^\d+$/);
    // another site is not affected
    expect((await openSocket(ws(await createSite(owner.token)), { token: owner.token })).status).toBe(101);
  });
});

describe("live channel limits: replay requests", () => {
  it("answers replays past the socket's allowance with stream.error instead, and again once it has refilled", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const clock = await installClock(siteId);
    const marker = (await hub(siteId).publish(siteId, "test.marker", {})) as unknown as { seq: number };
    const s = await openSocket(ws(siteId), { token: owner.token });
    const replays = () => s.messages!.filter((m) => m.seq === marker.seq).length;
    const errors = () => s.messages!.filter((m) => m.type === "stream.error");
    const replay = () => s.ws!.send(JSON.stringify({ type: "replay", since: marker.seq - 1 }));

    for (let i = 0; i < 8; i++) replay();
    await s.until!(() => replays() + errors().length === 8, "eight answers");
    expect(replays()).toBe(5);
    expect(errors()).toHaveLength(3);
    expect(errors()[0]).toEqual({
      type: "stream.error", site_id: siteId, ts: expect.stringMatching(/Z$/),
      data: { detail: expect.any(String), code: "replay_rate_limited", retry_after_s: 10 },
    });

    clock.advance(10_000);
    replay();
    replay();
    await s.until!(() => replays() + errors().length === 10, "two more answers");
    expect(replays()).toBe(6);
    expect(errors()).toHaveLength(4);
  });
});

describe("live channel: cookie authentication and Origin", () => {
  it("accepts the cookie on a WebSocket only from the service's own origin, an allowed origin, or no Origin at all", async () => {
    const owner = await signup();
    const [siteId, otherSite] = [await createSite(owner.token), await createSite(owner.token)];
    const cookie = `access_token=${owner.token}`;
    const foreign: Record<string, string>[] = [{ Origin: "https://evil.example" }, { Origin: "null" }, { "Sec-Fetch-Site": "cross-site" }, { Origin: "http://fleet.test.evil.example" }];
    for (const headers of foreign) {
      const refused = await openSocket(ws(siteId), { cookie, headers });
      expect(refused.status, JSON.stringify(headers)).toBe(403);
      expect(refused.body).toEqual({ detail: expect.stringMatching(/origin/i) });
    }
    const allowed: Record<string, string>[] = [{ Origin: "http://fleet.test" }, { Origin: "https://console.example.com" }, {}];
    for (const headers of allowed) {
      expect((await openSocket(ws(siteId), { cookie, headers })).status, JSON.stringify(headers)).toBe(101);
    }
    // A bearer token or a ticket cannot be sent by another site's page: no Origin check.
    expect((await openSocket(ws(otherSite), { token: owner.token, headers: { Origin: "https://evil.example" } })).status).toBe(101);
    const { ticket } = (await call(`/api/v1/sites/${otherSite}/ws-ticket`, { method: "POST", token: owner.token })).json;
    expect((await openSocket(`${ws(otherSite)}?ticket=${ticket}`, { headers: { Origin: "https://evil.example" } })).status).toBe(101);
    // Without credentials it is still 401, whatever the Origin.
    expect((await openSocket(ws(siteId), { headers: { Origin: "https://evil.example" } })).status).toBe(401);
  });

  it("applies the same rule to event streams", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const cookie = `access_token=${owner.token}`;
    const refused = await openStream(events(siteId), { cookie, headers: { Origin: "https://evil.example" } });
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ detail: expect.stringMatching(/origin/i) });
    expect((await openStream(events(siteId), { cookie, headers: { Origin: "http://fleet.test" } })).status).toBe(200);
    expect((await openStream(events(siteId), { cookie, headers: { "Sec-Fetch-Site": "same-origin" } })).status).toBe(200);
  });
});
