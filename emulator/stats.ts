/** What the fleet did: requests by call and status, latencies, enrolment, presence and commands. */
/** `channel`: opening the device channel (101 when it opened); on the channel, messages count as the call they stand for. */
export type CallKind = "enrol" | "dna" | "heartbeat" | "telemetry" | "poll" | "ack" | "report" | "channel";

const WINDOW_MS = 10_000;

export interface CommandTally {
  received: number;
  completed: number;
  failed: number;
  /** Commands this fleet executed more than once (a redelivery it could not recognise). */
  executedTwice: number;
}

export class FleetStats {
  readonly startedAt = Date.now();
  enrolled = 0;
  requests = 0;
  /** Answers by status ("200", "429", …) and transport failures as "network". */
  readonly byStatus = new Map<string, number>();
  /** Transport failures by their cause (`ECONNRESET`, `UND_ERR_CONNECT_TIMEOUT`, …), to tell a refused connection from a slow one. */
  readonly networkCauses = new Map<string, number>();
  private readonly latencies = new Map<CallKind, number[]>();
  private recent: { at: number; ms: number }[] = [];
  readonly commands: CommandTally = { received: 0, completed: 0, failed: 0, executedTwice: 0 };
  /** Every command id this fleet executed, with how many times. */
  readonly executions = new Map<string, number>();

  record(kind: CallKind, status: number | "network", ms: number) {
    this.requests++;
    const key = String(status);
    this.byStatus.set(key, (this.byStatus.get(key) ?? 0) + 1);
    if (status === "network") return;
    let list = this.latencies.get(kind);
    if (!list) this.latencies.set(kind, (list = []));
    list.push(ms);
    const now = Date.now();
    this.recent.push({ at: now, ms });
    if (this.recent.length > 50_000 || this.recent[0].at < now - 2 * WINDOW_MS) this.recent = this.recent.filter((r) => r.at >= now - WINDOW_MS);
  }

  recordNetworkCause(error: unknown) {
    const cause = (error as { cause?: { code?: string; name?: string } }).cause;
    const name = cause?.code ?? cause?.name ?? (error as { name?: string }).name ?? "unknown";
    this.networkCauses.set(name, (this.networkCauses.get(name) ?? 0) + 1);
  }

  noteExecution(commandId: string) {
    const times = (this.executions.get(commandId) ?? 0) + 1;
    this.executions.set(commandId, times);
    if (times === 2) this.commands.executedTwice++;
  }

  /** Requests per second and p99 over the last 10 s. */
  window() {
    const since = Date.now() - WINDOW_MS;
    const recent = this.recent.filter((r) => r.at >= since);
    const seconds = Math.min(WINDOW_MS, Date.now() - this.startedAt) / 1000 || 1;
    return { perSecond: recent.length / seconds, p99: percentile(recent.map((r) => r.ms), 99) };
  }

  /** Answers that are neither 2xx nor transport-level successes (101: a channel opened), by status. */
  errors(): Record<string, number> {
    return Object.fromEntries([...this.byStatus].filter(([status]) => !status.startsWith("2") && status !== "101"));
  }

  latencySummary(): Record<string, { count: number; p50_ms: number; p99_ms: number; max_ms: number }> {
    return Object.fromEntries([...this.latencies].map(([kind, list]) => [kind, {
      count: list.length, p50_ms: percentile(list, 50), p99_ms: percentile(list, 99), max_ms: list.length ? Math.max(...list) : 0,
    }]));
  }
}

export function percentile(values: number[], p: number): number {
  if (!values.length) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] * 10) / 10;
}
