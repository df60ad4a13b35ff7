// A reporter that stays silent while the run moves, and names what is still running once nothing
// has finished for a while. A test file stuck inside workerd, or a child process a test never
// stopped, would otherwise show up only as a run that ends at CI's time limit with no clue where.
import type { Reporter, TestCase, TestModule } from "vitest/node";

const QUIET_LIMIT_MS = Number(process.env.STALL_REPORT_AFTER_MS ?? 180_000);

export default class StallReporter implements Reporter {
  private readonly runningModules = new Map<string, number>();
  private readonly runningTests = new Map<string, { name: string; module: string; since: number }>();
  private lastProgressAt = Date.now();
  private timer: ReturnType<typeof setInterval> | undefined;

  onTestRunStart() {
    this.lastProgressAt = Date.now();
    this.timer = setInterval(() => this.reportIfStalled(), Math.min(QUIET_LIMIT_MS, 30_000));
    this.timer.unref();
  }

  onTestModuleStart(testModule: TestModule) {
    this.runningModules.set(testModule.moduleId, Date.now());
  }

  onTestModuleEnd(testModule: TestModule) {
    this.runningModules.delete(testModule.moduleId);
    this.lastProgressAt = Date.now();
  }

  onTestCaseReady(testCase: TestCase) {
    this.runningTests.set(testCase.id, { name: testCase.fullName, module: testCase.module.moduleId, since: Date.now() });
  }

  onTestCaseResult(testCase: TestCase) {
    this.runningTests.delete(testCase.id);
    this.lastProgressAt = Date.now();
  }

  onTestRunEnd() {
    clearInterval(this.timer);
  }

  private reportIfStalled() {
    const now = Date.now();
    if (now - this.lastProgressAt < QUIET_LIMIT_MS) return;
    const seconds = (since: number) => Math.round((now - since) / 1000);
    const lines = [`[stall] no test has finished for ${seconds(this.lastProgressAt)} s; still running:`];
    for (const [moduleId, since] of this.runningModules) {
      lines.push(`  ${moduleId} (started ${seconds(since)} s ago)`);
      for (const test of this.runningTests.values()) {
        if (test.module === moduleId) lines.push(`    - ${test.name} (${seconds(test.since)} s)`);
      }
    }
    if (this.runningModules.size === 0) lines.push("  no test file: the run is waiting on something after its tests");
    process.stderr.write(`${lines.join("\n")}\n`);
    this.lastProgressAt = now;
  }
}
