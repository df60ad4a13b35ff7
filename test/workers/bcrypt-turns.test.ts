// bcrypt in the Workers runtime does not yield by itself (the runtime holds the clock still while
// code runs, and bcryptjs yields by the clock), so the service runs one at a time per isolate with a
// turn of the event loop between: other work is served between two checks, not after all of them.
import { describe, expect, it } from "vitest";
import { BCRYPT_TURN_LEASE_MS, hashSecret, oneBcryptAtATime, verifySecret } from "../../src/services/passwords";

describe("bcrypt checks started together", () => {
  it("take turns, letting other work run between two of them", async () => {
    const hash = await hashSecret("the right key");
    const events: string[] = [];
    const checks = Array.from({ length: 4 }, (_, i) => verifySecret(`wrong key ${i}`, hash).then(() => events.push(`check ${i}`)));
    // Other work that needs only a turn of the event loop: a request's timer, say.
    const other = (async () => {
      for (let i = 0; i < 50 && events.length < 4; i++) {
        await new Promise((resolve) => setTimeout(resolve, 0));
        events.push("other");
      }
    })();
    await Promise.all([...checks, other]);
    const checksDone = events.filter((e) => e.startsWith("check"));
    expect(checksDone).toHaveLength(4);
    // Between the first and the last check, other work ran.
    const first = events.indexOf(checksDone[0]);
    const last = events.indexOf(checksDone[3]);
    expect(events.slice(first, last).filter((e) => e === "other").length).toBeGreaterThan(0);
  });

  it("still answers each check truly", async () => {
    const hash = await hashSecret("the right key");
    const answers = await Promise.all([verifySecret("the right key", hash), verifySecret("a wrong key", hash), verifySecret("the right key", hash)]);
    expect(answers).toEqual([true, false, true]);
  });

  it("do not wait for ever behind a turn its request never gave back (a request cancelled mid-hash)", async () => {
    const hash = await hashSecret("the right key");
    void oneBcryptAtATime(() => new Promise(() => {})); // never settles, as a cancelled request's hash
    const started = performance.now();
    expect(await verifySecret("the right key", hash)).toBe(true);
    const waited = performance.now() - started;
    expect(waited).toBeGreaterThanOrEqual(BCRYPT_TURN_LEASE_MS - 50);
    expect(waited).toBeLessThan(BCRYPT_TURN_LEASE_MS + 2_000);
  });
});
