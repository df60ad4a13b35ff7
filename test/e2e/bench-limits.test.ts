// The benchmarks size their device rotations from bench/limits.mjs: these checks keep its copy of the
// hubs' per-device limit true, and show that a rotation so sized is never refused by the real limiter.
import { describe, expect, it } from "vitest";
import { DeviceRateLimiter } from "../../durable-objects/rate-limit";
import { DEVICE_LIMIT, devicesFor } from "../../bench/limits.mjs";

/** Drives the hub's limiter with `calls` per second for `durationS`, round robin over `devices`; returns the refusals. */
function refusals(devices: number, callsPerSecond: number, durationS: number) {
  const limiter = new DeviceRateLimiter();
  for (let d = 0; d < devices; d++) limiter.take(`device-${d}`, 0); // the warm-up call each device makes first
  let refused = 0;
  const calls = Math.round(callsPerSecond * durationS);
  for (let n = 0; n < calls; n++) if (limiter.take(`device-${n % devices}`, (n * 1000) / callsPerSecond) > 0) refused++;
  return refused;
}

describe("benchmark device rotation", () => {
  it("knows the hubs' per-device limit: a bucket of `burst` calls, refilled at `perSecond` a second", () => {
    const limiter = new DeviceRateLimiter();
    for (let i = 0; i < DEVICE_LIMIT.burst; i++) expect(limiter.take("till", 0), `call ${i + 1}`).toBe(0);
    expect(limiter.take("till", 0)).toBeGreaterThan(0);
    const oneToken = 1000 / DEVICE_LIMIT.perSecond;
    expect(limiter.take("till", oneToken)).toBe(0);
    expect(limiter.take("till", oneToken)).toBeGreaterThan(0);
  });

  it("sizes a rotation that the real limiter never refuses, at any rate and duration", () => {
    for (const rate of [50, 1_000, 3_000, 6_000]) {
      for (const durationS of [3, 10, 60]) {
        const devices = devicesFor(rate, durationS);
        expect(refusals(devices, rate, durationS), `${rate}/s for ${durationS} s over ${devices} devices`).toBe(0);
      }
    }
  });

  it("would have caught the old command-poll rotation: 300 devices at ~2,900 calls/s for 10 s", () => {
    expect(refusals(300, 2_900, 10) / 29_000).toBeGreaterThan(0.01);
    expect(devicesFor(2_900, 10)).toBeGreaterThan(300);
  });
});
