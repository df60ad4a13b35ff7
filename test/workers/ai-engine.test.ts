import { describe, expect, it } from "vitest";
import {
  MIN_BASELINE_SAMPLES, MIN_TREND_POINTS, assessAnomaly, assessRisk, fleetDefaultBaseline, scoreAgainst, theilSen,
  type MetricPoint, type MetricValues,
} from "../../src/shared/ai-engine";

const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 0, 5, 8);

/** A deterministic wobble in [-1, 1] (no randomness: every run sees the same trace). */
const wobble = (i: number, k = 1) => Math.sin(i * 1.7 * k) * 0.6 + Math.sin(i * 0.37 * k) * 0.4;

/** A healthy device: 5-minute samples around fixed levels with small deterministic noise. */
function steadyTrace(n: number): MetricPoint[] {
  return Array.from({ length: n }, (_, i) => ({
    t: T0 + i * 5 * 60_000,
    cpu: 30 + 3 * wobble(i), memory: 55 + 1.5 * wobble(i, 2), disk: 60 + 0.2 * wobble(i, 3),
    temperature: 40 + wobble(i, 4), latency: 25 + 4 * wobble(i, 5), error_rate: 0.002 + 0.001 * Math.abs(wobble(i, 6)),
  }));
}

describe("anomaly score", () => {
  it("is low for a steady device's next ordinary sample", () => {
    const history = steadyTrace(100);
    const latest: MetricValues = { cpu: 31, memory: 55.5, disk: 60.1, temperature: 40.3, latency: 26, error_rate: 0.0025 };
    const a = assessAnomaly(latest, history, []);
    expect(a.basis).toBe("device");
    expect(a.score).not.toBeNull();
    expect(a.score!).toBeLessThan(0.1);
    expect(a.is_anomaly).toBe(false);
    expect(a.reasons).toEqual([]);
  });

  it("is high for a spike, naming the spiking metric first with its value, baseline and deviation", () => {
    const history = steadyTrace(100);
    const latest: MetricValues = { cpu: 34, memory: 56, disk: 60, temperature: 41, latency: 900, error_rate: 0.003 };
    const a = assessAnomaly(latest, history, []);
    expect(a.score!).toBeGreaterThan(0.9);
    expect(a.is_anomaly).toBe(true);
    expect(a.reasons[0].metric).toBe("latency");
    expect(a.reasons[0].value).toBe(900);
    expect(a.reasons[0].baseline).toBeCloseTo(25, 0);
    expect(a.reasons[0].deviation).toBeGreaterThan(50);
    expect(a.explanation).toContain("network latency 900 ms");
  });

  it("grows with the size of the deviation", () => {
    const history = steadyTrace(100);
    const scores = [40, 50, 70, 95].map((cpu) => assessAnomaly({ cpu }, history, []).score!);
    for (let i = 1; i < scores.length; i++) expect(scores[i]).toBeGreaterThan(scores[i - 1]);
  });

  it("does not call a drop in errors or latency an anomaly", () => {
    const a = assessAnomaly({ latency: 1, error_rate: 0 }, steadyTrace(100), []);
    expect(a.score).toBe(0);
  });

  it("falls back on the site's peers when the device has little history", () => {
    const peers = [{ cpu: 20 }, { cpu: 22 }, { cpu: 25 }, { cpu: 21 }];
    const a = assessAnomaly({ cpu: 90 }, steadyTrace(3), peers);
    expect(a.basis).toBe("peers");
    expect(a.reasons[0]).toMatchObject({ metric: "cpu", value: 90 });
    expect(a.is_anomaly).toBe(true);
  });

  it("says honestly when there is not enough data, and how many samples are missing", () => {
    const a = assessAnomaly({ cpu: 90 }, steadyTrace(4), [{ cpu: 20 }]);
    expect(a.score).toBeNull();
    expect(a.is_anomaly).toBe(false);
    expect(a).toMatchObject({ basis: null, samples_needed: MIN_BASELINE_SAMPLES - 4 });
    expect(a.explanation).toMatch(/^Insufficient data: 4 stored samples/);
    const none = assessAnomaly(null, [], []);
    expect(none).toMatchObject({ score: null, samples_needed: MIN_BASELINE_SAMPLES });
  });

  it("scores against fleet-wide defaults when no device is named", () => {
    const calm = scoreAgainst({ cpu: 35, memory: 50 }, fleetDefaultBaseline());
    const hot = scoreAgainst({ cpu: 99, error_rate: 0.3 }, fleetDefaultBaseline());
    expect(calm.score).toBe(0);
    expect(hot.basis).toBe("fleet_defaults");
    expect(hot.is_anomaly).toBe(true);
    expect(hot.reasons[0].metric).toBe("error_rate");
  });
});

describe("failure risk", () => {
  /** Disk rising `perHour` from 70 %, hourly samples over `hours`, with deterministic noise and two outliers. */
  function diskTrace(perHour: number, hours = 24): MetricPoint[] {
    return Array.from({ length: hours + 1 }, (_, i) => ({
      t: T0 + i * HOUR,
      cpu: 30 + 2 * wobble(i), memory: 50 + wobble(i, 2),
      disk: 70 + perHour * i + 0.15 * wobble(i, 3) + (i === 5 ? 8 : i === 17 ? -6 : 0),
      error_rate: 0.002,
    }));
  }

  it("projects a rising disk to its threshold within 10 % of the true time, despite outliers", () => {
    const perHour = 0.5;
    const trace = diskTrace(perHour);
    const r = assessRisk(trace, { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    // The trace ends at 70 + 24 × 0.5 = 82 %; the threshold is 98 %: 32 h away.
    const truth = (98 - 82) / perHour;
    expect(r.time_to_threshold?.metric).toBe("disk");
    expect(Math.abs(r.time_to_threshold!.hours - truth) / truth).toBeLessThan(0.1);
    const disk = r.trends.find((t) => t.metric === "disk")!;
    expect(disk.slope_per_hour).toBeCloseTo(perHour, 1);
    expect(r.data_points).toBe(25);
    expect(r.window.hours).toBe(24);
  });

  it("grows with the slope, and recommends what to do before the disk fills", () => {
    const scores = [0, 0.3, 0.5, 0.8, 1].map((slope) => assessRisk(diskTrace(slope), { restarts: 0, offline_transitions: 0 }, 24 * HOUR).risk_score!);
    for (let i = 1; i < scores.length; i++) expect(scores[i]).toBeGreaterThan(scores[i - 1]);
    expect(scores[0]).toBeLessThan(0.3);
    const steep = assessRisk(diskTrace(1), { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    expect(steep.risk_level).toMatch(/high|critical/);
    expect(steep.factors[0].name).toBe("disk_trend");
    expect(steep.recommendations[0]).toMatch(/^Disk at 94(\.\d)? %, rising 24 %\/day: clear logs/);
  });

  it("adds the error rate, restarts and offline transitions as factors", () => {
    const calm = steadyTrace(30);
    const base = assessRisk(calm, { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    expect(base.risk_level).toBe("low");
    const failing = calm.map((p, i) => (i > 24 ? { ...p, error_rate: 0.12 } : p));
    const r = assessRisk(failing, { restarts: 2, offline_transitions: 3 }, 24 * HOUR);
    expect(r.factors.map((f) => f.name)).toEqual(expect.arrayContaining(["error_rate", "restarts", "offline_transitions"]));
    expect(r.risk_score!).toBeGreaterThan(0.8);
    expect(r.risk_level).toBe("critical");
  });

  it("reads a recent climb past the warning level (a leak), but not a daily load swing below it", () => {
    const calm = steadyTrace(12 * 24); // 24 h of 5-minute samples
    const end = calm.length - 1;
    // Memory leaking over the last 90 minutes: 60 % → 93 %, 22 %/h, 0.1 h from 95 %.
    const leak = calm.map((p, i) => (i > end - 18 ? { ...p, memory: 60 + (93 - 60) * (1 - (end - i) / 18) } : p));
    const r = assessRisk(leak, { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    const memory = r.trends.find((t) => t.metric === "memory")!;
    expect(memory.fit_hours).toBeLessThanOrEqual(2);
    expect(memory.slope_per_hour).toBeGreaterThan(15);
    expect(r.time_to_threshold?.metric).toBe("memory");
    expect(r.risk_level).toBe("critical");
    // CPU swinging 30 % → 60 % over the last two hours (the lunch rush) stays below its warning level.
    const rush = calm.map((p, i) => (i > end - 24 ? { ...p, cpu: 30 + 30 * (1 - (end - i) / 24) } : p));
    const calmRisk = assessRisk(rush, { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    expect(calmRisk.risk_score!).toBeLessThan(0.3);
  });

  it("does not read a jump to a plateau (a backup's CPU burst) as a climb towards the threshold", () => {
    const calm = steadyTrace(12 * 24);
    const end = calm.length - 1;
    // CPU drifting up through the last hour (the morning's first customers), then pinned at 92 %.
    const burst = calm.map((p, i) => (i > end - 12 ? { ...p, cpu: i >= end - 2 ? 92 : 25 + (12 - (end - i)) * 0.6 } : p));
    const r = assessRisk(burst, { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    const cpu = r.trends.find((t) => t.metric === "cpu")!;
    expect(cpu.current).toBe(92);
    expect(cpu.fit_hours).toBeGreaterThan(20);
    expect(r.risk_score!).toBeLessThan(0.6);
    expect(r.risk_level).toBe("medium");
  });

  it("reports insufficient data instead of a score", () => {
    const r = assessRisk(steadyTrace(MIN_TREND_POINTS - 2), { restarts: 0, offline_transitions: 0 }, 24 * HOUR);
    expect(r).toMatchObject({ risk_score: null, risk_level: "unknown", samples_needed: 2, data_points: MIN_TREND_POINTS - 2 });
    expect(r.explanation).toMatch(/^Insufficient data/);
  });

  it("Theil–Sen ignores a minority of wild points", () => {
    const points = Array.from({ length: 20 }, (_, i) => ({ t: i * 1000, v: 3 * i + (i % 5 === 0 ? 500 : 0) }));
    expect(theilSen(points)!.slope * 1000).toBeCloseTo(3, 5);
  });
});
