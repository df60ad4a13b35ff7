import { describe, expect, it } from "vitest";
import { decide, type StoredState } from "../../durable-objects/metrics";
import { readConfig } from "../../src/shared/config";

const DEFAULT_POLICY = readConfig({}).metrics;

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

  it("stores a change of more than 5 % in cpu, memory, disk or latency", () => {
    expect(decide(state(), { ...sample, cpu_usage: 42 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), { ...sample, cpu_usage: 42.1 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, memory_usage: 47 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, disk_usage: 63.1 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, network_latency_ms: 21.5 }, t, DEFAULT_POLICY)).toBe("changed");
  });

  it("uses an absolute 1.0 when the stored value is 0, and 0.01 for the error rate", () => {
    expect(decide(state({ cpu: 0 }), { ...sample, cpu_usage: 1 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state({ cpu: 0 }), { ...sample, cpu_usage: 1.5 }, t, DEFAULT_POLICY)).toBe("changed");
    expect(decide(state(), { ...sample, error_rate: 0.019 }, t, DEFAULT_POLICY)).toBe("unchanged");
    expect(decide(state(), { ...sample, error_rate: 0.021 }, t, DEFAULT_POLICY)).toBe("changed");
  });

  it("reads thresholds from configuration", () => {
    const policy = readConfig({ METRICS_SNAPSHOT_INTERVAL_S: "60", METRICS_CHANGE_THRESHOLD_PERCENT: "10" }).metrics;
    expect(policy.snapshotIntervalMs).toBe(60_000);
    expect(decide(state(), { ...sample, cpu_usage: 43 }, 1, policy)).toBe("unchanged");
    expect(decide(state(), { ...sample, cpu_usage: 44.5 }, 1, policy)).toBe("changed");
    expect(decide(state(), sample, 60_000, policy)).toBe("snapshot_interval");
  });
});
