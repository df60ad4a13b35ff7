import WebSocket from "ws";

/**
 * A real WebSocket client for the end-to-end tests: collects every JSON message, resolves `opened`
 * with 101 or the HTTP status the upgrade was refused with, and `until` waits for a condition over
 * the messages received so far. `label` says how a message is shown when a wait times out.
 */
export function openJsonSocket<M>(url: string, headers: Record<string, string>, label: (m: M) => unknown) {
  const ws = new WebSocket(url, { headers });
  const messages: M[] = [];
  const waiters = new Set<() => void>();
  let closed: { code: number; reason: string } | undefined;
  ws.on("message", (data) => {
    messages.push(JSON.parse(data.toString()) as M);
    for (const w of waiters) w();
  });
  ws.on("close", (code, reason) => {
    closed = { code, reason: reason.toString() };
    for (const w of waiters) w();
  });
  const opened = new Promise<number>((resolve, reject) => {
    ws.once("open", () => resolve(101));
    ws.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.once("error", reject);
  });
  /** Waits until `predicate` holds over the messages received so far. */
  const until = <T>(predicate: (m: M[]) => T | undefined | false, timeoutMs = 10_000) =>
    new Promise<T>((resolve, reject) => {
      const check = () => {
        const value = predicate(messages);
        if (value) {
          waiters.delete(check);
          clearTimeout(timer);
          resolve(value);
        }
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`timed out; received: ${JSON.stringify(messages.map(label))}`));
      }, timeoutMs);
      waiters.add(check);
      check();
    });
  const close = () => new Promise<void>((resolve) => {
    if (ws.readyState === WebSocket.CLOSED) return resolve();
    // A refused or half-open socket may never say it closed: give up waiting after a while.
    const timer = setTimeout(() => { ws.terminate(); resolve(); }, 2_000);
    ws.once("close", () => { clearTimeout(timer); resolve(); });
    ws.close(1000, "done");
  });
  return { ws, messages, opened, until, close, closed: () => closed };
}
