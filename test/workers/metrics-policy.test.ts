import { describe, expect, it } from "vitest";
import { decide, type StoredState } from "../../durable-objects/metrics";
import { readConfig } from "../../src/shared/config";

const DEFAULT_POLICY = readConfig({}).metrics;
/** The relative rule alone, as before absolute deadbands existed (every deadband set to 0). */
const RELATIVE_ONLY = readConfig({
  METRICS_DEADBAND_CPU_POINTS: "0", METRICS_DEADBAND_MEMORY_POINTS: "0", METRICS_DEADBAND_DISK_POINTS: "0", METRICS_DEADBAND_LATENCY_MS: "0",
}).metrics;

const state = (over: Partial<StoredState> = {}): StoredState => ({
  stored_at_ms: 0, cpu: 40, memory: 50, disk: 60, latency: 20, error_rate: 0.01, boot_id: "b1", uptime_s: 1000, restart_seen: 0, ...over,
});
const sample = { cpu_usage: 40, memory_usage: 50, disk_usage: 60, network_latency_ms: 20, error_rate: 0.01, uptime_seconds: 1010, boot_id: "b1" };
const t = 60_000;

describe("metrics delta rules", () => {
  it("stores the first sample of a device", () => {
    expect(decide(undefined, sample, t, DEFAULT_POLICY)).toBe("first_sample");
  });

  it("stores the first sample after a restart: new boot_id, uptime going down, or a restart seen by a heartbeat", () => {
    expect(decide(state(), { ...sample, boot_id: "b2" }, t, DEFAULT_POLICY)).toBe("first_sample");
    expect(decide(state(), { ...sample, uptime_seconds: 3 }, t, DEFAULT_POLICY)).toBe("first_sample");
    expect(decide(state({ restart_seen: 1 }), sample, t, DEFAULT_POLICY)).toBe("first_sample");
  });

  it("stores a snapshot once the interval has passed", () => {
    expect(decide(state(), sample, DEFAULT_POLICY.snapshotIntervalMs - 1, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), sample, DEFAULT_POLICY.snapshotIntervalMs, DEFAULT_POLICY)).toBe("snapshot_interval");
  });

  it("with deadbands off, stores a change of more than 5 % in cpu, memory, disk or latency", () => {
    expect(decide(state(), { ...sample, cpu_usage: 42 }, t, RELATIVE_ONLY)).toBe("unchanged");
    expect(decide(state(), { ...sample, cpu_usage: 42.1 }, t, RELATIVE_ONLY)).toBe("changed");
    expect(decide(state(), { ...sample, memory_usage: 47 }, t, RELATIVE_ONLY)).toBe("changed");
    expect(decide(state(), { ...sample, disk_usage: 63.1 }, t, RELATIVE_ONLY)).toBe("changed");
    expect(decide(state(), { ...sample, network_latency_ms: 21.5 }, t, RELATIVE_ONLY)).toBe("changed");
  });

  it("uses an absolute 1.0 when the stored value is 0, and 0.01 for the error rate", () => {
    expect(decide(state({ cpu: 0 }), { ...sample, cpu_usage: 1 }, t, RELATIVE_ONLY)).toBe("unchanged");
    expect(decide(state({ cpu: 0 }), { ...sample, cpu_usage: 1.5 }, t, RELATIVE_ONLY)).toBe("changed");
    expect(decide(state(), { ...sample, error_rate: 0.019 }, t, RELATIVE_ONLY)).toBe("unchanged");
    expect(decide(state(), { ...sample, error_rate: 0.021 }, t, RELATIVE_ONLY)).toBe("changed");
  });

  it("reads thresholds from configuration", () => {
    const policy = readConfig({ METRICS_SNAPSHOT_INTERVAL_S: "60", METRICS_CHANGE_THRESHOLD_PERCENT: "10", METRICS_DEADBAND_CPU_POINTS: "0" }).metrics;
    expect(policy.snapshotIntervalMs).toBe(60_000);
    expect(decide(state(), { ...sample, cpu_usage: 43 }, 1, policy)).toBe("unchanged");
    expect(decide(state(), { ...sample, cpu_usage: 44.5 }, 1, policy)).toBe("changed");
    expect(decide(state(), sample, 60_000, policy)).toBe("snapshot_interval");
  });

  it("by default, stores only a move past each metric's absolute deadband: 15 points of cpu, 5 of memory and disk, 20 ms of latency", () => {
    expect(decide(state(), { ...sample, cpu_usage: 55 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), { ...sample, cpu_usage: 55.1 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, cpu_usage: 24.9 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, memory_usage: 55 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), { ...sample, memory_usage: 55.1 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, disk_usage: 65 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), { ...sample, disk_usage: 65.1 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, network_latency_ms: 40 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), { ...sample, network_latency_ms: 40.1 }, t, DEFAULT_POLICY)).toBe("changed");
    // The relative threshold still applies on top: 30 ms on a 1 s latency is 3 %, noise.
    expect(decide(state({ latency: 1000 }), { ...sample, network_latency_ms: 1030 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state({ latency: 1000 }), { ...sample, network_latency_ms: 1060 }, t, DEFAULT_POLICY)).toBe("changed");
    // The keyframe still comes, however quiet the device.
    expect(decide(state(), sample, DEFAULT_POLICY.snapshotIntervalMs, DEFAULT_POLICY)).toBe("snapshot_interval");
  });

  it("reads the deadbands from configuration, and keeps the default for a value out of range", () => {
    const policy = readConfig({ METRICS_DEADBAND_CPU_POINTS: "2", METRICS_DEADBAND_LATENCY_MS: "-1", METRICS_DEADBAND_DISK_POINTS: "lots" }).metrics;
    expect(policy.deadband).toEqual({ cpu: 2, memory: 5, disk: 5, latencyMs: 20 });
    expect(decide(state(), { ...sample, cpu_usage: 42.1 }, t, policy)).toBe("changed");
  });

  it("keeps an emulated terminal's noise out of the history: under a fifth of its samples stored, each spike kept", () => {
    const deadbands = emulatedTerminal(DEFAULT_POLICY);
    expect(deadbands.share).toBeLessThan(0.2);
    expect(deadbands.spikesKept).toBe(deadbands.spikes);
    // The same noise under the relative rule alone stores nearly everything.
    expect(emulatedTerminal(RELATIVE_ONLY).share).toBeGreaterThan(0.9);
  });
});

/**
 * The cost bench's device, through the delta rules: CPU ±8 points around its base with a spike every
 * 20th sample, memory ±3, disk ±1.5, latency 3–12 ms, a sample every 15 s. What share was kept?
 */
function emulatedTerminal(policy: typeof DEFAULT_POLICY, n = 2000) {
  let seed = 7;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  let stored: StoredState | undefined;
  let kept = 0;
  let spikesKept = 0;
  for (let i = 1; i <= n; i++) {
    const spike = i % 20 === 0 ? 30 + random() * 25 : 0;
    const s = {
      cpu_usage: 25 + (random() - 0.5) * 16 + spike, memory_usage: 45 + (random() - 0.5) * 6, disk_usage: 35 + (random() - 0.5) * 3,
      network_latency_ms: 3 + random() * 9, uptime_seconds: i * 15,
    };
    const now = i * 15_000;
    if (decide(stored, s, now, policy) === "unchanged") continue;
    kept++;
    if (spike) spikesKept++;
    stored = { stored_at_ms: now, cpu: s.cpu_usage, memory: s.memory_usage, disk: s.disk_usage, latency: s.network_latency_ms, error_rate: null, boot_id: null, uptime_s: s.uptime_seconds, restart_seen: 0 };
  }
  return { share: kept / n, spikesKept, spikes: Math.floor(n / 20) };
}
