import { svg } from "./dom";

/** A small line of the last values (0–100), e.g. CPU per telemetry sample; empty until there are two. */
export function sparkline(values: number[], label: string, width = 80, height = 20): SVGElement {
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label, class: "sparkline" });
  if (values.length < 2) return chart;
  const step = width / (values.length - 1);
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 1 - (Math.min(100, Math.max(0, v)) / 100) * (height - 2)).toFixed(1)}`);
  chart.appendChild(svg("polyline", { points: points.join(" "), fill: "none", class: "spark-line" }));
  return chart;
}

export interface Band { at: number; online: number; offline: number; error: number }

/** Stacked area of online / error / offline device counts over time (what the page saw since it opened). */
export function healthChart(bands: Band[], width = 480, height = 80): SVGElement {
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "health-chart",
    "aria-label": bands.length ? `Site health over the last ${Math.round((bands[bands.length - 1].at - bands[0].at) / 1000)} s` : "Site health: no data yet" });
  if (bands.length < 2) return chart;
  const t0 = bands[0].at;
  const span = Math.max(1, bands[bands.length - 1].at - t0);
  const max = Math.max(1, ...bands.map((b) => b.online + b.offline + b.error));
  const x = (b: Band) => ((b.at - t0) / span) * width;
  const y = (v: number) => height - (v / max) * height;
  const area = (lower: (b: Band) => number, upper: (b: Band) => number, cls: string) => {
    const top = bands.map((b) => `${x(b).toFixed(1)},${y(upper(b)).toFixed(1)}`);
    const bottom = [...bands].reverse().map((b) => `${x(b).toFixed(1)},${y(lower(b)).toFixed(1)}`);
    chart.appendChild(svg("polygon", { points: [...top, ...bottom].join(" "), class: cls }));
  };
  area(() => 0, (b) => b.online, "band-online");
  area((b) => b.online, (b) => b.online + b.error, "band-error");
  area((b) => b.online + b.error, (b) => b.online + b.error + b.offline, "band-offline");
  return chart;
}

export interface Line { label: string; cls: string; values: (number | null)[] }

/** Lines of percentages (0–100) over the buckets of a series; gaps (null) break a line. */
export function percentChart(lines: Line[], from: string, to: string, width = 560, height = 120): SVGElement {
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "health-chart",
    "aria-label": `${lines.map((l) => l.label).join(", ")} from ${new Date(from).toLocaleString()} to ${new Date(to).toLocaleString()}` });
  for (const v of [0, 50, 100]) chart.appendChild(svg("line", { x1: 0, x2: width, y1: height - (v / 100) * (height - 4) - 2, y2: height - (v / 100) * (height - 4) - 2, class: "gridline" }));
  for (const line of lines) {
    const step = width / Math.max(1, line.values.length - 1);
    let run: string[] = [];
    const flush = () => {
      if (run.length > 1) chart.appendChild(svg("polyline", { points: run.join(" "), fill: "none", class: line.cls }));
      else if (run.length === 1) { const [x, y] = run[0].split(","); chart.appendChild(svg("circle", { cx: x, cy: y, r: 2, class: line.cls })); }
      run = [];
    };
    line.values.forEach((v, i) => {
      if (v === null) return flush();
      run.push(`${(i * step).toFixed(1)},${(height - (Math.min(100, Math.max(0, v)) / 100) * (height - 4) - 2).toFixed(1)}`);
    });
    flush();
  }
  return chart;
}
