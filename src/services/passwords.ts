import bcrypt from "bcryptjs";

const COST = 10;

/**
 * One bcrypt at a time per isolate, with a turn of the event loop before the next. bcryptjs yields
 * when 100 ms have passed by the clock, but the Workers runtime holds the clock still while code
 * runs, so each hash or check keeps the isolate to itself for its whole duration (tens of ms at cost
 * 10), and several started together ran back to back: twelve wrong keys at once stalled every other
 * request for half a second. Queued here, others' requests are served between two checks.
 *
 * Waiters poll on a timer of their own rather than awaiting a promise another request would
 * resolve: a Worker request may not rely on another request's promise. The turn is a lease, not a
 * lock: a request cancelled mid-hash never runs its `finally`, and its turn then lapses after
 * BCRYPT_TURN_LEASE_MS instead of holding every later sign-in and enrolment of the isolate forever.
 */
export const BCRYPT_TURN_LEASE_MS = 1_000;
let turnHolder = 0;
let turnLapsesAt = 0;
export async function oneBcryptAtATime<T>(work: () => Promise<T>): Promise<T> {
  // performance.now, not the service clock: the lease is about real time, which tests may not fake.
  while (performance.now() < turnLapsesAt) await new Promise((resolve) => setTimeout(resolve, 1));
  const turn = ++turnHolder;
  turnLapsesAt = performance.now() + BCRYPT_TURN_LEASE_MS;
  try {
    return await work();
  } finally {
    if (turnHolder === turn) turnLapsesAt = 0;
  }
}

export const hashSecret = (secret: string) => oneBcryptAtATime(() => bcrypt.hash(secret, COST));

export const verifySecret = (secret: string, hash: string) => oneBcryptAtATime(() => bcrypt.compare(secret, hash));

// A real hash of a random string: comparing against it costs the same as a real check, so an
// unknown e-mail and a wrong password take the same time. The isolate keeps the finished hash, never
// the promise of it: a Worker request may not await a promise another request started (workerd
// refuses, or the waiter hangs when the first request ends), so concurrent first calls each hash.
let decoyHash: string | undefined;
export async function decoyVerify(secret: string): Promise<boolean> {
  decoyHash ??= await hashSecret(crypto.randomUUID());
  await verifySecret(secret, decoyHash);
  return false;
}

export const utf8Length = (text: string) => new TextEncoder().encode(text).byteLength;
