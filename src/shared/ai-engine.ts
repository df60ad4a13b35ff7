/**
 * The assistant's scoring engine: pure, deterministic functions of a device's stored metrics
 * history (and its site's peers), shared by the Worker and the site hub. No model, no download, no
 * outside service: every number an answer gives can be traced back to samples and to the rules
 * below. docs/ai.md explains the choices and the thresholds.
 */

export const AI_METRICS = ["cpu", "memory", "disk", "temperature", "latency", "error_rate"] as const;
export type AiMetric = (typeof AI_METRICS)[number];
export type MetricValues = Partial<Record<AiMetric, number | null>>;

/** One stored sample, as the hub keeps it (epoch ms). */
export type MetricPoint = { t: number } & MetricValues;

const METRIC_LABELS: Record<AiMetric, string> = {
  cpu: "CPU usage", memory: "memory usage", disk: "disk usage", temperature: "temperature", latency: "network latency", error_rate: "error rate",
};
const METRIC_UNITS: Record<AiMetric, string> = { cpu: " %", memory: " %", disk: " %", temperature: " °C", latency: " ms", error_rate: "" };

/**
 * The smallest spread a baseline is given, per metric: a device that never moves would otherwise
 * make any wobble look like an outlier.
 */
const SPREAD_FLOOR: Record<AiMetric, number> = { cpu: 4, memory: 2, disk: 1, temperature: 1.5, latency: 8, error_rate: 0.005 };

/** Only a rise of these counts as anomalous: a drop in errors or latency is good news. */
const RISE_ONLY = new Set<AiMetric>(["latency", "error_rate"]);

/** Samples of its own a device needs before its baseline is trusted. */
export const MIN_BASELINE_SAMPLES = 12;
/** Peers (other devices of the site with a latest sample) needed for a peer baseline. */
export const MIN_PEERS = 3;
/** Deviations (in robust standard deviations) below this are normal variation and give no reason. */
const REASON_Z = 2;
/** Score at and above which a device is reported as anomalous. */
export const ANOMALY_THRESHOLD = 0.5;

/** What a fleet-wide default baseline assumes when there is no device to compare with. */
export const FLEET_DEFAULT_BASELINE: Record<AiMetric, { centre: number; spread: number }> = {
  cpu: { centre: 35, spread: 15 },
  memory: { centre: 50, spread: 12 },
  disk: { centre: 50, spread: 15 },
  temperature: { centre: 42, spread: 5 },
  latency: { centre: 40, spread: 20 },
  error_rate: { centre: 0.005, spread: 0.01 },
};

export type BaselineBasis = "device" | "peers" | "fleet_defaults";
export type MetricBaseline = { centre: number; spread: number; samples: number };
export type Baseline = { basis: BaselineBasis; samples: number; metrics: Partial<Record<AiMetric, MetricBaseline>> };

const round = (v: number, digits = 2) => {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
};
const clamp01 = (v: number) => Math.min(1, Math.max(0, v));

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Median absolute deviation scaled to a normal distribution's standard deviation. */
export function robustSpread(values: readonly number[]): number {
  const m = median(values);
  return 1.4826 * median(values.map((v) => Math.abs(v - m)));
}

const finite = (v: number | null | undefined): v is number => typeof v === "number" && Number.isFinite(v);

/** Median and robust spread of each metric over the given samples. */
export function baselineOf(points: readonly MetricValues[], basis: BaselineBasis): Baseline {
  const metrics: Baseline["metrics"] = {};
  for (const metric of AI_METRICS) {
    const values = points.map((p) => p[metric]).filter(finite);
    if (!values.length) continue;
    metrics[metric] = { centre: median(values), spread: Math.max(SPREAD_FLOOR[metric], robustSpread(values)), samples: values.length };
  }
  return { basis, samples: points.length, metrics };
}

export function fleetDefaultBaseline(): Baseline {
  const metrics: Baseline["metrics"] = {};
  for (const metric of AI_METRICS) metrics[metric] = { ...FLEET_DEFAULT_BASELINE[metric], samples: 0 };
  return { basis: "fleet_defaults", samples: 0, metrics };
}

export type AnomalyReason = {
  metric: AiMetric;
  value: number;
  baseline: number;
  spread: number;
  /** How many robust standard deviations the value sits from the baseline (signed). */
  deviation: number;
  message: string;
};

export type AnomalyAssessment =
  | { score: number; is_anomaly: boolean; basis: BaselineBasis; baseline_samples: number; reasons: AnomalyReason[]; explanation: string }
  | { score: null; is_anomaly: false; basis: null; baseline_samples: number; reasons: []; explanation: string; samples_needed: number };

/** 0 within two robust deviations, then rising smoothly towards 1 (about 0.5 at four, 0.86 at eight). */
const scoreOfDeviation = (z: number) => 1 - Math.exp(-Math.max(0, z - REASON_Z) / 3);

const describe = (metric: AiMetric, v: number) => (metric === "error_rate" ? `${round(v * 100, 2)} %` : `${round(v, 1)}${METRIC_UNITS[metric]}`);

/** How far the values sit from the baseline, with a reason for every metric that stands out, largest first. */
export function scoreAgainst(values: MetricValues, baseline: Baseline): AnomalyAssessment {
  const reasons: AnomalyReason[] = [];
  let worst = 0;
  for (const metric of AI_METRICS) {
    const value = values[metric];
    const b = baseline.metrics[metric];
    if (!finite(value) || !b) continue;
    const z = (value - b.centre) / b.spread;
    const counted = RISE_ONLY.has(metric) ? Math.max(0, z) : Math.abs(z);
    worst = Math.max(worst, counted);
    if (counted < REASON_Z) continue;
    const direction = z > 0 ? "above" : "below";
    reasons.push({
      metric, value, baseline: round(b.centre, 4), spread: round(b.spread, 4), deviation: round(z, 2),
      message: `${METRIC_LABELS[metric]} ${describe(metric, value)} is ${round(Math.abs(z), 1)} deviations ${direction} its ${basisLabel(baseline.basis)} of ${describe(metric, b.centre)}`,
    });
  }
  reasons.sort((a, b) => Math.abs(b.deviation) - Math.abs(a.deviation));
  const score = round(scoreOfDeviation(worst), 3);
  const isAnomaly = score >= ANOMALY_THRESHOLD;
  const explanation = reasons.length
    ? `${isAnomaly ? "Anomalous" : "Slightly unusual"}: ${reasons.map((r) => r.message).join("; ")}.`
    : `Every metric is within the normal range of its ${basisLabel(baseline.basis)}.`;
  return { score, is_anomaly: isAnomaly, basis: baseline.basis, baseline_samples: baseline.samples, reasons, explanation };
}

function basisLabel(basis: BaselineBasis): string {
  return basis === "device" ? "own baseline" : basis === "peers" ? "site peers' baseline" : "fleet-wide default";
}

/**
 * A device's anomaly score: its latest values against its own history (without the latest), else
 * against its site's peers when it has too little history, else null with how many samples are
 * missing — never an invented number.
 */
export function assessAnomaly(latest: MetricValues | null, history: readonly MetricValues[], peers: readonly MetricValues[]): AnomalyAssessment {
  if (!latest) {
    return { score: null, is_anomaly: false, basis: null, baseline_samples: 0, reasons: [], samples_needed: MIN_BASELINE_SAMPLES, explanation: "Insufficient data: the device has reported no metrics yet." };
  }
  if (history.length >= MIN_BASELINE_SAMPLES) return scoreAgainst(latest, baselineOf(history, "device"));
  if (peers.length >= MIN_PEERS) return scoreAgainst(latest, baselineOf(peers, "peers"));
  const needed = MIN_BASELINE_SAMPLES - history.length;
  return {
    score: null, is_anomaly: false, basis: null, baseline_samples: history.length, reasons: [], samples_needed: needed,
    explanation: `Insufficient data: ${history.length} stored samples of the ${MIN_BASELINE_SAMPLES} a baseline needs (${needed} more), and ${peers.length} peers on the site with metrics (at least ${MIN_PEERS} are needed to compare with them).`,
  };
}

// ---- failure risk -----------------------------------------------------------------------------

export const TREND_METRICS = ["cpu", "memory", "disk"] as const;
export type TrendMetric = (typeof TREND_METRICS)[number];
/** The level at which each resource is taken to fail. */
export const FAILURE_THRESHOLDS: Record<TrendMetric, number> = { cpu: 95, memory: 95, disk: 98 };
/** Where a level alone starts to count (before any trend). */
const WARNING_LEVELS: Record<TrendMetric, number> = { cpu: 80, memory: 85, disk: 90 };
/** A projected crossing this far ahead counts for e^-1 (about 0.37) of full urgency. */
const URGENCY_SCALE_H = 12;
/** Points a trend needs, and the most it reads (Theil–Sen is quadratic in them). */
export const MIN_TREND_POINTS = 6;
const MAX_TREND_POINTS = 120;
/** The risk at and above which a device is called at risk ("high" or "critical"). */
export const RISK_ALERT_THRESHOLD = 0.6;
/** The recent part of the window whose climb counts once a resource is past its warning level. */
export const RECENT_TREND_MS = 3_600_000;
/** The end of the window that must still be climbing for the recent slope to count. */
const CONFIRM_MS = 15 * 60_000;
/** Recent error rate is the median over this much of the end of the window. */
export const RECENT_MS = 15 * 60_000;

export type RiskLevel = "low" | "medium" | "high" | "critical";
export const riskLevelOf = (score: number): RiskLevel => (score >= 0.8 ? "critical" : score >= RISK_ALERT_THRESHOLD ? "high" : score >= 0.3 ? "medium" : "low");

/** Theil–Sen: the median of the pairwise slopes (per ms), and the matching intercept. Robust to a third of outliers. */
export function theilSen(points: readonly { t: number; v: number }[]): { slope: number; intercept: number } | null {
  if (points.length < 2) return null;
  const step = Math.max(1, Math.ceil(points.length / MAX_TREND_POINTS));
  const sample = points.filter((_, i) => i % step === 0 || i === points.length - 1);
  const slopes: number[] = [];
  for (let i = 0; i < sample.length; i++) {
    for (let j = i + 1; j < sample.length; j++) {
      const dt = sample[j].t - sample[i].t;
      if (dt > 0) slopes.push((sample[j].v - sample[i].v) / dt);
    }
  }
  if (!slopes.length) return null;
  const slope = median(slopes);
  const intercept = median(sample.map((p) => p.v - slope * p.t));
  return { slope, intercept };
}

export type TrendFactor = {
  metric: TrendMetric;
  current: number;
  threshold: number;
  /** Change per hour (robust regression slope). */
  slope_per_hour: number;
  /** The hours of history the slope was fitted over: the window, or its recent part (see trendOf). */
  fit_hours: number;
  /** Hours until the trend reaches the threshold; 0 when it is there; null when not rising. */
  hours_to_threshold: number | null;
  risk: number;
};

export type RiskFactor = { name: string; value: number; risk: number; detail: string };

export type RiskEvents = { restarts: number; offline_transitions: number };

export type RiskAssessment = {
  risk_score: number | null;
  risk_level: RiskLevel | "unknown";
  factors: RiskFactor[];
  trends: TrendFactor[];
  time_to_threshold: { metric: TrendMetric; hours: number; at: string } | null;
  recommendations: string[];
  data_points: number;
  window: { from: string | null; to: string | null; hours: number };
  explanation: string;
  samples_needed?: number;
};

const RECOMMENDATIONS: Record<TrendMetric, (current: number, slopePerDay: number, eta: string) => string> = {
  disk: (c, s, eta) => `Disk at ${round(c, 1)} %, rising ${round(s, 1)} %/day: clear logs and old transaction journals ${eta}.`,
  memory: (c, s, eta) => `Memory at ${round(c, 1)} %, rising ${round(s, 1)} %/day (a leak?): schedule a restart of the POS application ${eta}.`,
  cpu: (c, s, eta) => `CPU at ${round(c, 1)} %, rising ${round(s, 1)} %/day: find the runaway process and restart it ${eta}.`,
};

function etaText(hours: number): string {
  if (hours <= 0) return "now";
  if (hours < 1) return `within ~${Math.max(1, Math.round(hours * 60))} minutes`;
  if (hours < 48) return `within ~${Math.round(hours)} hours`;
  return `within ~${Math.round(hours / 24)} days`;
}

/**
 * Whether the samples past the warning level in the last few minutes keep climbing at half the
 * recent slope or more: a jump to a plateau (a backup's burst of CPU) is not a climb towards the
 * threshold.
 */
function stillClimbing(series: readonly { t: number; v: number }[], lastT: number, recentSlope: number, warning: number): boolean {
  const tail = series.filter((p) => p.t >= lastT - CONFIRM_MS && p.v >= warning);
  if (tail.length < 2) return false;
  const fit = theilSen(tail);
  return fit !== null && fit.slope >= recentSlope / 2;
}

/** One resource's trend: its robust level now, its slope, when it would cross its threshold, and the risk that means. */
export function trendOf(metric: TrendMetric, points: readonly MetricPoint[]): TrendFactor | null {
  const series = points.filter((p) => finite(p[metric])).map((p) => ({ t: p.t, v: p[metric] as number }));
  if (series.length < MIN_TREND_POINTS) return null;
  const windowFit = theilSen(series);
  if (!windowFit) return null;
  const threshold = FAILURE_THRESHOLDS[metric];
  const lastT = series[series.length - 1].t;
  const fitted = windowFit.intercept + windowFit.slope * lastT;
  const recentSeries = series.filter((p) => p.t >= lastT - RECENT_TREND_MS);
  const recentFit = recentSeries.length >= MIN_TREND_POINTS ? theilSen(recentSeries) : null;
  // The level is the higher of the window's and the recent fit at the last sample, or the latest
  // samples when all of them are higher still: a jump is real, not noise.
  const latest = series.slice(-3).map((p) => p.v);
  const current = Math.max(fitted, recentFit ? recentFit.intercept + recentFit.slope * lastT : fitted, Math.min(...latest));
  // Past its warning level, a resource's recent climb counts if it is steeper than the window's:
  // a leak or a runaway shows there first. Below it, daily load swings would raise false alarms.
  let fit = windowFit;
  let fitHours = (lastT - series[0].t) / 3_600_000;
  if (current >= WARNING_LEVELS[metric] && recentFit && recentFit.slope > windowFit.slope && stillClimbing(series, lastT, recentFit.slope, WARNING_LEVELS[metric])) {
    fit = recentFit;
    fitHours = (lastT - recentSeries[0].t) / 3_600_000;
  }
  const slopePerHour = fit.slope * 3_600_000;
  const hours = current >= threshold ? 0 : slopePerHour > 0 ? (threshold - current) / slopePerHour : null;
  const urgency = hours === null ? 0 : Math.exp(-hours / URGENCY_SCALE_H);
  const warning = WARNING_LEVELS[metric];
  const level = clamp01((current - warning) / (threshold - warning)) * 0.7;
  return {
    metric, current: round(current, 2), threshold, slope_per_hour: round(slopePerHour, 4), fit_hours: round(fitHours, 2),
    hours_to_threshold: hours === null ? null : round(hours, 2), risk: round(Math.max(urgency, level), 3),
  };
}

/**
 * Failure risk from a device's history in the window: the trend of cpu, memory and disk projected to
 * their thresholds, combined with the recent error rate, restarts and offline transitions. Each
 * factor is a probability-like risk; they combine as independent causes (1 − Π(1 − risk)).
 */
export function assessRisk(points: readonly MetricPoint[], events: RiskEvents, windowMs: number): RiskAssessment {
  const sorted = [...points].sort((a, b) => a.t - b.t);
  const window = {
    from: sorted.length ? new Date(sorted[0].t).toISOString() : null,
    to: sorted.length ? new Date(sorted[sorted.length - 1].t).toISOString() : null,
    hours: round(windowMs / 3_600_000, 2),
  };
  if (sorted.length < MIN_TREND_POINTS) {
    const needed = MIN_TREND_POINTS - sorted.length;
    return {
      risk_score: null, risk_level: "unknown", factors: [], trends: [], time_to_threshold: null, recommendations: [],
      data_points: sorted.length, window, samples_needed: needed,
      explanation: `Insufficient data: ${sorted.length} stored samples in the last ${window.hours} hours; a trend needs at least ${MIN_TREND_POINTS} (${needed} more).`,
    };
  }
  const trends = TREND_METRICS.map((m) => trendOf(m, sorted)).filter((t): t is TrendFactor => t !== null);
  const factors: RiskFactor[] = [];
  const recommendations: string[] = [];
  for (const trend of trends) {
    if (trend.risk <= 0) continue;
    const hours = trend.hours_to_threshold;
    const detail = hours === 0
      ? `${METRIC_LABELS[trend.metric]} at ${trend.current} % has reached its failure threshold of ${trend.threshold} %`
      : hours !== null
        ? `${METRIC_LABELS[trend.metric]} at ${trend.current} %, ${trend.slope_per_hour > 0 ? "rising" : "changing"} ${round(trend.slope_per_hour, 2)} %/h, reaches ${trend.threshold} % in ~${round(hours, 1)} h`
        : `${METRIC_LABELS[trend.metric]} at ${trend.current} %, close to its failure threshold of ${trend.threshold} %`;
    factors.push({ name: `${trend.metric}_trend`, value: trend.current, risk: trend.risk, detail });
    if (trend.risk >= 0.3) recommendations.push(RECOMMENDATIONS[trend.metric](trend.current, trend.slope_per_hour * 24, etaText(hours ?? 0)));
  }
  const last = sorted[sorted.length - 1].t;
  const recentErrors = sorted.filter((p) => p.t >= last - RECENT_MS).map((p) => p.error_rate).filter(finite);
  if (recentErrors.length) {
    const errorRate = median(recentErrors);
    // Healthy terminals fail well under 0.5 % of operations; 5 % is a failing device.
    const risk = round(clamp01((errorRate - 0.005) / 0.045), 3);
    if (risk > 0) {
      factors.push({ name: "error_rate", value: round(errorRate, 4), risk, detail: `Recent error rate ${round(errorRate * 100, 2)} % (median of the last ${RECENT_MS / 60_000} minutes)` });
      if (risk >= 0.3) recommendations.push(`Error rate at ${round(errorRate * 100, 1)} %: check the payment gateway, the network and the POS application's log now.`);
    }
  }
  if (events.restarts > 0) {
    const risk = round(Math.min(0.6, 0.2 * events.restarts), 3);
    factors.push({ name: "restarts", value: events.restarts, risk, detail: `${events.restarts} restart(s) in the window` });
    if (events.restarts >= 2) recommendations.push(`${events.restarts} restarts in ${window.hours} hours: look for a crash loop in the device's log.`);
  }
  if (events.offline_transitions > 0) {
    const risk = round(Math.min(0.8, 0.35 * events.offline_transitions), 3);
    factors.push({ name: "offline_transitions", value: events.offline_transitions, risk, detail: `${events.offline_transitions} time(s) offline in the window` });
    if (events.offline_transitions >= 2) recommendations.push(`Went offline ${events.offline_transitions} times: check its power and network connection.`);
  }
  factors.sort((a, b) => b.risk - a.risk);
  const score = round(1 - factors.reduce((keep, f) => keep * (1 - f.risk), 1), 3);
  const soonest = trends
    .filter((t): t is TrendFactor & { hours_to_threshold: number } => t.hours_to_threshold !== null)
    .sort((a, b) => a.hours_to_threshold - b.hours_to_threshold)[0];
  const level = riskLevelOf(score);
  const explanation = factors.length
    ? `Failure risk ${level} (${score}): ${factors.slice(0, 3).map((f) => f.detail).join("; ")}.`
    : `Failure risk low (${score}): no resource is rising towards its threshold, and no errors, restarts or outages stand out.`;
  return {
    risk_score: score, risk_level: level, factors, trends,
    time_to_threshold: soonest ? { metric: soonest.metric, hours: soonest.hours_to_threshold, at: new Date(last + soonest.hours_to_threshold * 3_600_000).toISOString() } : null,
    recommendations, data_points: sorted.length, window, explanation,
  };
}
