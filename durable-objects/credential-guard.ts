/**
 * One per guarded credential (named `email:<address>`, `device:<id>`, `intent:<id>` or
 * `bootstrap:<site>`, see src/shared/guard-contract.ts): counts the failed verifications of that
 * credential per client address, so the Worker can refuse an attempt with 429 before it spends a
 * bcrypt on it. A Durable Object runs one call at a time and nothing here awaits between reading and
 * writing the counts, so `reserve` is atomic: forty parallel attempts cannot all slip under the limit.
 *
 * An attempt is counted while it is in flight (between `reserve` and `settle`), then as a failure
 * until the window passes, or it clears its client's failures when it succeeded. Failures live in
 * the object's storage, so they outlast an eviction; the alarm deletes everything once they are old.
 */
import { DurableObject } from "cloudflare:workers";
import type { HubBindings } from "../src/shared/config";
import { systemClock, type Clock } from "../src/shared/time";
import {
  FAILURES_PER_CLIENT, FAILURES_PER_CREDENTIAL, GUARD_WINDOW_MS, RESERVATION_TTL_MS, type GuardReservation,
} from "../src/shared/guard-contract";

interface Failure {
  client: string;
  at: number;
}

const FAILURES_KEY = "failures";
/** Beyond this many failures in a window, the oldest are forgotten (every limit is far lower). */
const MAX_REMEMBERED = 256;

const secondsUntil = (at: number, now: number) => Math.max(1, Math.ceil((at - now) / 1000));

export class CredentialGuard extends DurableObject<HubBindings> {
  /** Where the guard reads the time; tests replace it inside the object to move time. */
  clock: Clock = systemClock;

  private failures: Failure[] | undefined;
  private readonly inFlight = new Map<string, { client: string; at: number }>();

  /** Counts an attempt by `client` before it is verified, or refuses it with the seconds to wait. */
  async reserve(client: string): Promise<GuardReservation> {
    const now = this.clock.now();
    const failures = this.recent(now);
    for (const [ticket, attempt] of this.inFlight) if (now - attempt.at >= RESERVATION_TTL_MS) this.inFlight.delete(ticket);
    const own = failures.filter((f) => f.client === client);
    const ownInFlight = [...this.inFlight.values()].filter((a) => a.client === client).length;

    if (own.length + ownInFlight >= FAILURES_PER_CLIENT) {
      // Its own failures must age out; attempts still in flight settle within a second or so.
      const freeing = own[own.length + ownInFlight - FAILURES_PER_CLIENT];
      return { allowed: false, retryAfterS: freeing ? secondsUntil(freeing.at + GUARD_WINDOW_MS, now) : 1 };
    }
    // The credential as a whole is under attack: a client that has failed on it waits, one that has
    // not (its owner, from wherever they usually are) may still try.
    const attempts = failures.length + this.inFlight.size;
    if (own.length > 0 && attempts >= FAILURES_PER_CREDENTIAL) {
      const belowLimit = failures[attempts - FAILURES_PER_CREDENTIAL];
      const ownCleared = own[own.length - 1].at + GUARD_WINDOW_MS;
      // When attempts still in flight make up the excess, they settle within a second or so.
      const at = belowLimit ? Math.min(belowLimit.at + GUARD_WINDOW_MS, ownCleared) : now + 1000;
      return { allowed: false, retryAfterS: secondsUntil(at, now) };
    }
    const ticket = crypto.randomUUID();
    this.inFlight.set(ticket, { client, at: now });
    return { allowed: true, ticket };
  }

  /** The verification `ticket` reserved is over: a failure counts against `client`, a success clears it. */
  async settle(ticket: string, client: string, verified: boolean): Promise<void> {
    const now = this.clock.now();
    this.inFlight.delete(ticket);
    const failures = this.recent(now);
    if (!verified) await this.store([...failures, { client, at: now }].slice(-MAX_REMEMBERED));
    else if (failures.some((f) => f.client === client)) await this.store(failures.filter((f) => f.client !== client));
  }

  /** The credential was replaced (a new key or token): failures against the old one no longer matter. */
  async forget(): Promise<void> {
    if (this.recent(this.clock.now()).length) await this.store([]);
  }

  /** How many failures are remembered now (for tests and operators' debugging). */
  async failureCount(): Promise<number> {
    return this.recent(this.clock.now()).length;
  }

  async alarm(): Promise<void> {
    await this.store(this.recent(this.clock.now()));
  }

  private recent(now: number): Failure[] {
    this.failures ??= this.ctx.storage.kv.get<Failure[]>(FAILURES_KEY) ?? [];
    const since = now - GUARD_WINDOW_MS;
    if (this.failures.length && this.failures[0].at <= since) this.failures = this.failures.filter((f) => f.at > since);
    return this.failures;
  }

  private async store(failures: Failure[]) {
    this.failures = failures;
    if (failures.length === 0) {
      // Nothing left to remember: the object keeps no storage at all (and so costs none).
      await this.ctx.storage.deleteAll();
      return;
    }
    this.ctx.storage.kv.put(FAILURES_KEY, failures);
    await this.ctx.storage.setAlarm(failures[failures.length - 1].at + GUARD_WINDOW_MS);
  }
}
