// Local mode: `npm start`'s minute cron against a real `wrangler dev`, started with the very arguments
// scripts/start.mjs uses (devServerArgs) on a free port, with its own throw-away state directory. A
// due enrolment intent is written into the local D1 before the server starts; the cron's first run
// must expire it (nothing else reads it, and a read would expire it on its own). Then the cron is
// driven through one minute with fake timers: exactly one more run, at the start of the minute.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { devServerArgs, startLocalCron } from "../../scripts/lib/local-cron.mjs";
import { generateSecret, ROOT } from "../../scripts/lib/serve-bundle.mjs";

const wranglerBin = join(createRequire(join(ROOT, "package.json")).resolve("wrangler/package.json"), "..", "bin", "wrangler.js");
const wranglerEnv = { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };
const INTENT_ID = "00000000-0000-4000-8000-00000000c404";
const SITE_ID = "SITE-LOCAL-CRON";

let stateDir: string;
let server: ChildProcess | undefined;
let serverLog = "";
let baseUrl: string;

function wrangler(...args: string[]) {
  const result = spawnSync(process.execPath, [wranglerBin, ...args], { cwd: ROOT, env: wranglerEnv, encoding: "utf8", timeout: 120_000 });
  if (result.status !== 0) throw new Error(`wrangler ${args.join(" ")} failed (${result.status}): ${result.stderr}${result.stdout}`.slice(0, 2000));
  return result.stdout;
}

const d1 = (sql: string) => JSON.parse(wrangler("d1", "execute", "DB", "--local", "--persist-to", stateDir, "--json", "--command", sql)) as { results: Record<string, unknown>[] }[];

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });

async function stopServer() {
  if (!server || server.exitCode !== null) return;
  const exited = new Promise((resolve) => server!.once("exit", resolve));
  process.kill(-server.pid!, "SIGTERM");
  await exited;
}

/** Waits for real I/O while timers are fake: yields to the event loop until `check` holds. */
async function until(check: () => boolean, what: string, timeoutMs = 30_000) {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

beforeAll(async () => {
  stateDir = mkdtempSync(join(tmpdir(), "fleet-edge-local-cron-"));
  wrangler("d1", "migrations", "apply", "DB", "--local", "--persist-to", stateDir);
  d1(
    `INSERT INTO sites (site_id, name) VALUES ('${SITE_ID}', 'Local cron');` +
      `INSERT INTO enrolment_intents (intent_id, site_id, status, claim_token_hash, expires_at) ` +
      `VALUES ('${INTENT_ID}', '${SITE_ID}', 'pending', 'not-a-real-hash', '2000-01-01T00:00:00.000Z');`,
  );

  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}`;
  const extra = ["--persist-to", stateDir, "--var", `JWT_SECRET:${generateSecret()}`, "--show-interactive-dev-session=false"];
  server = spawn(process.execPath, [wranglerBin, ...devServerArgs({ host: "127.0.0.1", port, extra })], {
    cwd: ROOT, env: wranglerEnv, detached: true, stdio: ["ignore", "pipe", "pipe"],
  });
  server.stdout!.on("data", (chunk) => (serverLog += chunk));
  server.stderr!.on("data", (chunk) => (serverLog += chunk));
  const deadline = Date.now() + 150_000;
  for (;;) {
    if (server.exitCode !== null) throw new Error(`wrangler dev exited (${server.exitCode}):\n${serverLog.slice(-2000)}`);
    const up = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false);
    if (up) break;
    if (Date.now() > deadline) throw new Error(`wrangler dev did not come up:\n${serverLog.slice(-2000)}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}, 240_000);

afterAll(async () => {
  vi.useRealTimers();
  await stopServer();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
}, 60_000);

describe("npm start's minute cron", () => {
  it("runs the Worker's scheduled handler through wrangler dev at start and then at the start of every minute", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const runs: string[] = [];
    const errors: unknown[] = [];
    // 30 s into a minute: the next run is due in 30 s.
    const cron = startLocalCron({ baseUrl, onRun: (answer) => runs.push(answer), onError: (error) => errors.push(error), now: () => 30_000 });
    await cron.first;
    expect(errors).toEqual([]);
    expect(runs).toEqual(["Ran scheduled event"]);

    await vi.advanceTimersByTimeAsync(29_999);
    expect(runs).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await until(() => runs.length === 2, "the run at the start of the minute");
    expect(errors).toEqual([]);

    cron.stop();
    await vi.advanceTimersByTimeAsync(5 * 60_000);
    expect(runs).toHaveLength(2);
    vi.useRealTimers();
  }, 120_000);

  it("expired the due intent and audited it (the state is read after the server stopped)", async () => {
    await stopServer();
    const [intent, audit] = d1(
      `SELECT status FROM enrolment_intents WHERE intent_id = '${INTENT_ID}';` +
        `SELECT event_type FROM audit_logs WHERE site_id = '${SITE_ID}';`,
    );
    expect(intent.results).toEqual([{ status: "expired" }]);
    expect(audit.results).toEqual([{ event_type: "enrolment_intent_expired" }]);
  }, 120_000);
});
