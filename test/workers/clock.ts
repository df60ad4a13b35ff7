import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { SiteHub } from "../../durable-objects/site-hub";
import { setWorkerClock } from "../../src/lib/clock";
import type { CredentialGuard } from "../../durable-objects/credential-guard";
import { guardName, type GuardedKind } from "../../src/shared/guard-contract";

export const siteHubStub = (siteId: string) => env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId));

/**
 * A clock a test moves by hand. Install it in a site's hub and the hub reads its time from it, so
 * "a minute later" is `clock.advance(60_000)` and a `runDurableObjectAlarm`, not a sleep. It starts
 * at real time, so an alarm the hub sets for "now" is due at once and the runtime may run it by
 * itself; a test that must run every alarm by hand first advances the clock well past the wall clock.
 */
export class ManualClock {
  private at = Date.now();
  now = () => this.at;
  advance(ms: number) {
    this.at += ms;
  }
}

export async function installClock(siteId: string, clock = new ManualClock()) {
  await runInDurableObject(siteHubStub(siteId), (hub: SiteHub) => { hub.clock = clock; });
  return clock;
}

/**
 * Wraps the hub's D1 binding so its batches (the outbox's only way in) fail while `outage.down`
 * is set; reads pass through. Models D1 being unavailable for a while.
 */
export async function wrapHubDatabase(siteId: string) {
  const outage = { down: false, failedBatches: 0 };
  await runInDurableObject(siteHubStub(siteId), (hub: SiteHub) => {
    const real = hub.database;
    const wrapped: D1Database = {
      prepare: (query) => real.prepare(query),
      exec: (query) => real.exec(query),
      dump: () => real.dump(),
      withSession: (constraint) => real.withSession(constraint),
      batch: async (statements) => {
        if (outage.down) {
          outage.failedBatches++;
          throw new Error("D1_ERROR: simulated outage");
        }
        return real.batch(statements);
      },
    };
    hub.database = wrapped;
  });
  return outage;
}

/** Rows waiting in the hub's outbox. */
export const outboxDepth = (siteId: string) =>
  runInDurableObject(siteHubStub(siteId), (_hub, state) => state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM d1_outbox").one().n);

/** The CredentialGuard of one credential (see src/shared/guard-contract.ts). */
export const guardStub = (kind: GuardedKind, id: string) => env.CREDENTIAL_GUARD.get(env.CREDENTIAL_GUARD.idFromName(guardName(kind, id)));

/** Installs a manual clock in a credential's guard, so a test moves through its window instead of waiting. */
export async function installGuardClock(kind: GuardedKind, id: string, clock = new ManualClock()) {
  // The guard has no fetch handler, so the pool's typing does not see it as a Durable Object class.
  await runInDurableObject(guardStub(kind, id), (instance) => { (instance as unknown as CredentialGuard).clock = clock; });
  return clock;
}

/**
 * The Worker's clock for one test: the Worker reads its time from it (expiries, windows, timestamps)
 * until `restore()` (call it in a finally or afterEach). The pool runs the Worker in the test's own
 * isolate, so this is the same clock the requests of `call()` see.
 */
export function installWorkerClock(clock = new ManualClock()) {
  const restore = setWorkerClock(clock);
  return Object.assign(clock, { restore });
}
