// The minute cron under `npm start`. `wrangler dev` never fires cron triggers by itself, so intent
// expiry, command sweeps and job re-drive would never run locally. Started with `--test-scheduled`,
// wrangler serves GET /__scheduled?cron=…, which runs the Worker's scheduled handler; this module
// calls it once at start and then at the start of every minute, as the deployed trigger does.
// (GET /cdn-cgi/handler/scheduled, which wrangler's own start-up banner suggests, answers 500 for a
// Worker with static assets in wrangler 4.86.)
//
//   const cron = startLocalCron({ baseUrl: "http://127.0.0.1:8787", onError: console.error });
//   await cron.first;   // the run at start has finished
//   cron.stop();

/** The expression wrangler.toml's [triggers] crons names; the handler does the same work for any. */
export const LOCAL_CRON = "* * * * *";

const MINUTE_MS = 60_000;

/** The `wrangler dev` arguments `npm start` uses: the address, and /__scheduled switched on. */
export const devServerArgs = ({ host, port, extra = [] }) => ["dev", "--ip", host, "--port", String(port), "--test-scheduled", ...extra];

/**
 * Runs the Worker's scheduled handler once through wrangler dev's /__scheduled. Resolves when the
 * handler has finished (it awaits its steps); rejects when the server does not answer 200.
 */
export async function triggerScheduled(baseUrl, { cron = LOCAL_CRON, timeoutMs = 55_000 } = {}) {
  const response = await fetch(`${baseUrl}/__scheduled?cron=${encodeURIComponent(cron)}`, { signal: AbortSignal.timeout(timeoutMs) });
  const text = await response.text();
  if (!response.ok) {
    throw new Error(`GET /__scheduled answered ${response.status}: ${text.slice(0, 200)} (is wrangler dev running with --test-scheduled?)`);
  }
  return text;
}

/**
 * Calls triggerScheduled now and then at the start of every minute until stop(). A failed run is
 * handed to onError and the next minute tries again, as the deployed cron would. Runs never
 * overlap: a minute whose predecessor is still running is skipped.
 */
export function startLocalCron({ baseUrl, cron = LOCAL_CRON, onRun = () => {}, onError = () => {}, now = () => Date.now() }) {
  let stopped = false;
  let running = false;
  let timer;

  const run = async () => {
    if (running || stopped) return;
    running = true;
    try {
      onRun(await triggerScheduled(baseUrl, { cron }));
    } catch (error) {
      if (!stopped) onError(error);
    } finally {
      running = false;
    }
  };

  const scheduleNext = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      run();
      scheduleNext();
    }, MINUTE_MS - (now() % MINUTE_MS));
  };

  const first = run();
  scheduleNext();
  return {
    first,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
