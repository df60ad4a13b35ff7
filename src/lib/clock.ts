import { systemClock, type Clock } from "../shared/time";

let current: Clock = systemClock;

/**
 * The Worker's time: every expiry, window and timestamp the Worker decides reads it, never
 * `Date.now()` directly. The hubs have their own (a field on each hub); the two are separate because
 * a hub runs in another isolate. Tests replace this one with `setWorkerClock` to move time forward
 * instead of editing stored timestamps.
 */
export const workerClock: Clock = { now: () => current.now() };

/** The current time as a Date, from the Worker's clock. */
export const currentDate = () => new Date(workerClock.now());

/** Installs a clock for the Worker; returns the function that puts the system clock back. */
export function setWorkerClock(clock: Clock): () => void {
  current = clock;
  return () => {
    current = systemClock;
  };
}
