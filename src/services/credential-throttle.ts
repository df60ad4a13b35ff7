/**
 * Credential throttling: every check that costs a bcrypt on behalf of a caller who has not proven
 * anything yet (a device key the hub has not seen pass, a login, an enrolment claim, a bootstrap key)
 * goes through `verifyThrottled`, which refuses with 429 + Retry-After *before* the bcrypt when
 *
 * - the caller's address failed too often lately, on any credential (a Workers Rate Limiting binding
 *   counts the failures; once it says "over", this isolate refuses that address for a while), or
 * - the credential's CredentialGuard refuses: too many failures of this address on this credential,
 *   or too many failures on it overall while this address is one of the failing ones.
 *
 * A refusal is answered after a short pause (`throttled`), so a client that waits for its answers
 * cannot keep the Worker busy. Signups, which cost a bcrypt hash each, are limited per address as
 * well (`limitSignups`). docs/security.md ("Credential throttling") has the policy and the reasoning.
 */
import type { Env } from "../env";
import { tooManyRequests, type ApiError } from "../lib/errors";
import { ExpiringMap } from "../lib/expiring-map";
import { credentialGuard } from "../hub/credential-guard";
import { UNKNOWN_CLIENT, type GuardedKind } from "../shared/guard-contract";
import { workerClock } from "../lib/clock";

/** How long this isolate refuses an address once the failure limiter says it failed too often. */
export const CLIENT_BLOCK_MS = 5 * 60_000;
/** The Rate Limiting bindings count per minute, so a refusal from one is good for about that long. */
const SIGNUP_RETRY_AFTER_S = 60;

/** Per isolate: addresses refused until the moment they map to. */
const blockedClients = new ExpiringMap<number>(10_000);

/**
 * Per isolate: checks in progress per address. The address limit counts failures once they are
 * known, so without this an address could fire a thousand checks at a thousand credentials at once
 * and have them all run before the first one failed.
 */
export const CHECKS_IN_FLIGHT_PER_ADDRESS = 4;
const checksInFlight = new Map<string, number>();

/**
 * The address an unauthenticated caller is throttled by, from `CF-Connecting-IP` (which Cloudflare
 * sets on every request and a client cannot forge). IPv4 as is; IPv6 by its /64, since one
 * subscriber usually holds a whole /64 and could otherwise rotate addresses for free. Undefined when
 * the header is absent, which happens only when nothing in front of the Worker sets it (tests, a
 * local `workerd` reached directly).
 */
export function clientAddressOf(header: string | null | undefined): string | undefined {
  const raw = header?.trim().toLowerCase().replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  if (!raw) return undefined;
  if (!raw.includes(":")) return raw.slice(0, 64);
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(raw);
  if (mapped) return mapped[1];
  return ipv6Prefix64(raw) ?? raw.slice(0, 64);
}

/** `2001:db8:a:b:…` → `2001:db8:a:b::/64`; undefined when `address` is not IPv6. */
function ipv6Prefix64(address: string): string | undefined {
  const halves = address.split("::");
  if (halves.length > 2) return undefined;
  const groupsOf = (part: string) => {
    if (!part) return [];
    const groups = part.split(":");
    // A trailing dotted IPv4 (::ffff:…, 64:ff9b::…) stands for two groups.
    if (groups[groups.length - 1].includes(".")) groups.splice(-1, 1, "0", "0");
    return groups;
  };
  const head = groupsOf(halves[0]);
  const tail = halves.length === 2 ? groupsOf(halves[1]) : [];
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const groups = [...head, ...Array<string>(missing).fill("0"), ...tail];
  if (!groups.every((g) => /^[0-9a-f]{1,4}$/.test(g))) return undefined;
  return `${groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(":")}::/64`;
}

/** The address of a request, keyed as the throttles key it. */
export const clientOfRequest = (request: Request | undefined) => clientAddressOf(request?.headers.get("CF-Connecting-IP"));

export interface CredentialCheck {
  kind: GuardedKind;
  /** The credential's id: e-mail address, device id, intent id or site id. */
  id: string;
  /** The caller's address (clientAddressOf), if known. */
  client: string | undefined;
  /** The 429's detail. */
  refusal: string;
  /** Extra headers on the 429. */
  headers?: Record<string, string>;
  /** Told when the throttles refuse, and until when (epoch ms). */
  onRefused?: (until: number) => void;
}

/**
 * Runs `verify` (the bcrypt, and any read it needs) only if the throttles let this attempt through,
 * and reports its result to them. A refusal is a 429 with Retry-After and nothing verified.
 */
export async function verifyThrottled(env: Env, check: CredentialCheck, verify: () => Promise<boolean>): Promise<boolean> {
  const { client } = check;
  const refuse = (retryAfterS: number) => {
    check.onRefused?.(workerClock.now() + retryAfterS * 1000);
    return throttled(check, retryAfterS);
  };
  if (client === undefined) return checkWithGuard(env, check, UNKNOWN_CLIENT, verify, refuse);
  const blockedUntil = blockedClients.get(client);
  if (blockedUntil !== undefined) throw await refuse(secondsUntil(blockedUntil));
  const inFlight = checksInFlight.get(client) ?? 0;
  if (inFlight >= CHECKS_IN_FLIGHT_PER_ADDRESS) throw await refuse(1);
  checksInFlight.set(client, inFlight + 1);
  try {
    const verified = await checkWithGuard(env, check, client, verify, refuse);
    if (!verified) await countClientFailure(env, client);
    return verified;
  } finally {
    const left = (checksInFlight.get(client) ?? 1) - 1;
    if (left > 0) checksInFlight.set(client, left);
    else checksInFlight.delete(client);
  }
}

async function checkWithGuard(
  env: Env, check: CredentialCheck, clientKey: string, verify: () => Promise<boolean>, refuse: (retryAfterS: number) => Promise<ApiError>,
): Promise<boolean> {
  const guard = credentialGuard(env, check.kind, check.id);
  const reservation = await guard.reserve(clientKey);
  if (!reservation.allowed) throw await refuse(reservation.retryAfterS);
  // Should `verify` throw (D1 unavailable), the reservation simply expires: that was no failure.
  const verified = await verify();
  await guard.settle(reservation.ticket, clientKey, verified);
  return verified;
}

async function countClientFailure(env: Env, client: string | undefined) {
  if (client === undefined) return;
  const { success } = await env.CREDENTIAL_FAILURE_LIMITER.limit({ key: client });
  if (success) return;
  const until = workerClock.now() + CLIENT_BLOCK_MS;
  blockedClients.set(client, until, until);
}

export const secondsUntil = (at: number) => Math.max(1, Math.ceil((at - workerClock.now()) / 1000));

/**
 * A refused attempt is answered only after this pause, which costs the Worker no CPU: a client that
 * waits for each answer, as scripts do, then makes at most one attempt per connection per second.
 */
export const REFUSAL_PAUSE_MS = 1_000;

/** The 429 of a throttled credential check (detail, Retry-After, extra headers), after the pause. */
export async function throttled(check: Pick<CredentialCheck, "refusal" | "headers">, retryAfterS: number) {
  await new Promise((resolve) => setTimeout(resolve, REFUSAL_PAUSE_MS));
  const error = tooManyRequests(check.refusal, retryAfterS);
  Object.assign(error.headers, check.headers);
  return error;
}

/** A new key or token replaced the credential: earlier failures against it stop counting. */
export async function credentialReplaced(env: Env, kind: GuardedKind, id: string) {
  await credentialGuard(env, kind, id).forget();
}

/** 429 once an address has signed up too often this minute (each signup costs a bcrypt hash). */
export async function limitSignups(env: Env, client: string | undefined) {
  if (client === undefined) return;
  const { success } = await env.SIGNUP_LIMITER.limit({ key: client });
  if (!success) throw await throttled({ refusal: "Too many signups from this address; try again later" }, SIGNUP_RETRY_AFTER_S);
}
