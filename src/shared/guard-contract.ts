/**
 * The contract between the Worker and the CredentialGuard Durable Object (durable-objects/
 * credential-guard.ts): the policy both sides apply and the replies that cross the boundary. One
 * guard object exists per credential a caller can name (an e-mail address, a device id, an intent
 * id, a site's bootstrap key), so its counts are exact and a reservation is atomic.
 * docs/security.md ("Credential throttling") explains the policy.
 */
import { z } from "@hono/zod-openapi";

/** What a guarded credential is: the part of its object name before the colon. */
export const GUARDED_KINDS = ["email", "device", "intent", "bootstrap"] as const;
export type GuardedKind = (typeof GUARDED_KINDS)[number];

/** The name of the guard object of one credential, e.g. `email:ops@example.com`. */
export const guardName = (kind: GuardedKind, id: string) => `${kind}:${kind === "email" ? id.toLowerCase() : id}`;

/** Failures are remembered this long. */
export const GUARD_WINDOW_MS = 15 * 60_000;
/** One client address may fail this often on one credential in a window; then it waits. */
export const FAILURES_PER_CLIENT = 5;
/**
 * All clients together may fail this often on one credential in a window; beyond it, only clients
 * with no failure of their own on it may still try (the owner from their usual address), so an
 * attacker cannot lock the owner out.
 */
export const FAILURES_PER_CREDENTIAL = 10;
/** A reservation whose result never came back (the Worker died mid-check) stops counting after this. */
export const RESERVATION_TTL_MS = 30_000;

/** The key of a request without a client address (only when nothing in front of the Worker set one). */
export const UNKNOWN_CLIENT = "unknown";

export const GuardReservationSchema = z.discriminatedUnion("allowed", [
  /** Go ahead and verify; report the result with this ticket. */
  z.object({ allowed: z.literal(true), ticket: z.string() }),
  /** Do not verify: answer 429 with this Retry-After. */
  z.object({ allowed: z.literal(false), retryAfterS: z.number().int().positive() }),
]);
export type GuardReservation = z.infer<typeof GuardReservationSchema>;
