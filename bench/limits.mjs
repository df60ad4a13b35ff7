// How hard a benchmark may drive one device, and how many failed answers a scenario may have.
// test/e2e/bench-limits.test.ts checks DEVICE_LIMIT against the hub's limiter, so the two cannot drift.

/**
 * The limit every device call passes through in its site's hub (durable-objects/rate-limit.ts): a
 * token bucket of `burst` calls, refilled at `perSecond` calls a second, per device. A scenario that
 * crosses it measures the 429 path instead of the one it names, so every scenario rotates over
 * enough devices (devicesFor) and fails when its answers are not what it expects (assertScenarios).
 */
export const DEVICE_LIMIT = { burst: 60, perSecond: 2 };

/** A scenario whose share of answers other than its success status is above this fails the run. */
export const MAX_NOT_OK_SHARE = 0.01;

/**
 * How many devices a scenario must rotate over so that none is rate limited: at `rate` calls/s in
 * all for `durationS`, each device may make `burst + perSecond × durationS` calls when its bucket is
 * full at the start, less the `spent` calls it made just before (the warm-up), with `headroom` to spare.
 * `rate` should be an upper bound: the measured rate of the app doing no I/O at all, which no route
 * of the app can beat.
 */
export function devicesFor(rate, durationS, { headroom = 1.5, spent = 1 } = {}) {
  const callsPerDevice = DEVICE_LIMIT.burst - spent + DEVICE_LIMIT.perSecond * durationS;
  return Math.max(1, Math.ceil((rate * durationS * headroom) / callsPerDevice));
}
