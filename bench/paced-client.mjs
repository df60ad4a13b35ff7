// The open-loop client behind `paced` in bench/lib.mjs, in a process of its own so that nothing else
// pauses it. Reads {url, method, body, headers, rotate, ratePerS, durationS, success} as JSON on
// stdin; prints its figures as JSON on stdout. `rotate`, a list of header sets, is taken in turn, one
// per request, on top of `headers` (a device call rotating over devices). Request i is due at
// start + i / rate and sent then, whatever earlier requests are doing; its latency counts from when
// it was due.
//
// node:http over kept-alive sockets, not fetch: fetch allocates enough per request that the client's
// own garbage collection put 40–60 ms into the measured p99 of a bare Worker at 1,040 req/s, where
// node:http keeps a bare Node server's p99 under 5 ms.
import http from "node:http";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { url, method = "GET", body, headers = {}, rotate = [{}], ratePerS, durationS, success = 200 } = JSON.parse(input);

const target = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });
const total = Math.round(ratePerS * durationS);
const latencies = new Float64Array(total);
let measured = 0;
let errors = 0;
let settled = 0;
const byStatus = {};
let allSettled;
const done = new Promise((resolve) => { allSettled = resolve; });
const settle = () => { if (++settled === total) allSettled(); };

const requestHeaders = rotate.map((extra) => ({ ...headers, ...extra, ...(body === undefined ? {} : { "content-length": Buffer.byteLength(body) }) }));

function send(due, i) {
  const options = { host: target.hostname, port: target.port, path: target.pathname + target.search, method, agent, headers: requestHeaders[i % requestHeaders.length] };
  const request = http.request(options, (res) => {
    res.on("data", () => {});
    res.on("end", () => {
      byStatus[res.statusCode] = (byStatus[res.statusCode] ?? 0) + 1;
      if (res.statusCode === success) latencies[measured++] = performance.now() - due;
      settle();
    });
    res.on("error", () => { errors++; settle(); });
  });
  request.on("error", () => { errors++; settle(); });
  request.end(body);
}

const start = performance.now();
let sent = 0;
while (sent < total) {
  const now = performance.now();
  while (sent < total && start + (sent * 1000) / ratePerS <= now) {
    send(start + (sent * 1000) / ratePerS, sent);
    sent++;
  }
  await new Promise((resolve) => setTimeout(resolve, 1));
}
if (total) await done;
const seconds = (performance.now() - start) / 1000;
agent.destroy();

const sorted = latencies.subarray(0, measured).sort();
const at = (q) => (sorted.length ? Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]) : 0);
process.stdout.write(JSON.stringify({ total, by_status: byStatus, errors, seconds, p50_ms: at(0.5), p99_ms: at(0.99), p999_ms: at(0.999) }));
