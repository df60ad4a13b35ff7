import { afterEach } from "vitest";
import { fetchChecked } from "./helpers";

export type LiveMessage = { seq?: number; type: string; site_id: string; ts: string; data: any };

/** Every socket and stream a test opened, closed after it whether it passed or not. */
const opened: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of opened.splice(0)) {
    try { await o.close(); } catch { /* already closed */ }
  }
});

export interface SubscribeOptions {
  token?: string;
  cookie?: string;
  headers?: Record<string, string>;
}

/** Waits until `check` holds, re-checking whenever `wake` is called; fails after `timeoutMs`. */
function waiter() {
  let wake: (() => void) | undefined;
  return {
    notify: () => wake?.(),
    async until<T>(check: () => T | undefined | false, what: string, timeoutMs = 5000): Promise<T> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const value = check();
        if (value) return value;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`timed out waiting for ${what}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake = () => { clearTimeout(timer); resolve(); };
        });
        wake = undefined;
      }
    },
  };
}

/** Opens the site's WebSocket through the Worker (the pool's real WebSocket), like a client would. */
export async function openSocket(path: string, { token, cookie, headers = {} }: SubscribeOptions = {}) {
  const h = new Headers({ Upgrade: "websocket", ...headers });
  if (token) h.set("Authorization", `Bearer ${token}`);
  if (cookie) h.set("Cookie", cookie);
  const res = await fetchChecked(new Request(`http://fleet.test${path}`, { headers: h }));
  const ws = res.webSocket;
  if (!ws) {
    return { status: res.status, headers: res.headers, body: await res.json<{ detail: string }>(), ws: undefined } as const;
  }
  ws.accept();
  opened.push({ close: () => ws.close(1000, "test over") });
  const messages: LiveMessage[] = [];
  const raw: string[] = [];
  let closed: { code: number; reason: string } | undefined;
  const wait = waiter();
  ws.addEventListener("message", (e) => {
    raw.push(e.data as string);
    try { messages.push(JSON.parse(e.data as string)); } catch { /* pong */ }
    wait.notify();
  });
  ws.addEventListener("close", (e) => {
    closed = { code: e.code, reason: e.reason };
    wait.notify();
  });
  return {
    status: res.status,
    headers: res.headers,
    body: undefined,
    ws,
    messages,
    raw,
    closed: () => closed,
    until: wait.until,
    waitForClose: (timeoutMs?: number) => wait.until(() => closed, "the socket to close", timeoutMs),
  } as const;
}

/**
 * Opens the site's event stream. One reader drains it into a buffer for the whole test, so no read
 * is ever abandoned (an abandoned read would swallow the chunk it later receives).
 */
export async function openStream(path: string, { token, cookie, headers = {} }: SubscribeOptions = {}) {
  const h = new Headers(headers);
  if (token) h.set("Authorization", `Bearer ${token}`);
  if (cookie) h.set("Cookie", cookie);
  const res = await fetchChecked(new Request(`http://fleet.test${path}`, { headers: h }));
  if (res.status !== 200) {
    return { status: res.status, headers: res.headers, body: await res.json<{ detail: string }>(), stream: undefined } as const;
  }
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let ended = false;
  const wait = waiter();
  const pump = (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        wait.notify();
      }
    } catch { /* cancelled */ }
    ended = true;
    wait.notify();
  })();
  const close = async () => {
    await reader.cancel().catch(() => undefined);
    await pump;
  };
  opened.push({ close });
  const stream = {
    text: () => text,
    ended: () => ended,
    /** Every `data:` payload so far, parsed. */
    messages: () => text.split("\n\n").flatMap((frame) => frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as LiveMessage)),
    until: wait.until,
    waitForEnd: (timeoutMs?: number) => wait.until(() => ended, "the stream to end", timeoutMs),
    close,
  };
  return { status: res.status, headers: res.headers, body: undefined, stream } as const;
}
