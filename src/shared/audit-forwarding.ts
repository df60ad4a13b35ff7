import { connect } from "cloudflare:sockets";
import { DELIVERY_TIMEOUT_MS, webhookSignature } from "./alert-contract";
import { tcpDestinationProblem, webhookUrlProblem, type OutboundPolicy } from "./outbound-address";
import type { AuditEventView } from "./audit-view";

/**
 * Sending audit data out: signed webhook POSTs (alerts and webhook integrations) and syslog over
 * TCP (integrations). Used by the AuditStream object for deliveries and by the Worker for
 * `POST /audit/test`. docs/audit.md, "Integrations".
 */

export interface SendResult {
  delivered: boolean;
  /** No later try can succeed (a refused destination, an unreadable secret, e-mail not configured). */
  permanent?: boolean;
  status?: number;
  error?: string;
}

const errorText = (error: unknown) => (error instanceof Error ? `${error.name}: ${error.message}` : String(error)).slice(0, 300);

export async function sendWebhook(
  url: string, secret: string, body: string, headers: Record<string, string>, policy: OutboundPolicy, nowMs: number,
): Promise<SendResult> {
  const problem = webhookUrlProblem(url, policy);
  if (problem) return { delivered: false, permanent: true, error: `destination refused: ${problem}` };
  try {
    const response = await fetch(url, {
      method: "POST",
      redirect: "manual",
      signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
      headers: {
        "Content-Type": "application/json",
        "User-Agent": "FleetEdge-Audit/1",
        "X-Fleet-Signature": await webhookSignature(secret, Math.floor(nowMs / 1000), body),
        ...headers,
      },
      body,
    });
    await response.body?.cancel();
    if (response.status >= 200 && response.status < 300) return { delivered: true, status: response.status };
    const redirected = response.status >= 300 && response.status < 400;
    return { delivered: false, status: response.status, error: redirected ? "redirects are not followed" : `answered ${response.status}` };
  } catch (error) {
    return { delivered: false, error: errorText(error) };
  }
}

/** `tcp://host:port` (plain) or `tls://host:port` (TLS, as syslog over TLS on 6514 expects). */
export function parseSyslogDestination(destination: string): { host: string; port: number; tls: boolean } | undefined {
  const match = /^(tcp|tls):\/\/(\[[0-9a-fA-F:.]+\]|[^:/\s[\]]+):(\d{1,5})$/.exec(destination.trim());
  if (!match) return undefined;
  return { tls: match[1] === "tls", host: match[2].replace(/^\[|\]$/g, ""), port: Number(match[3]) };
}

export function syslogDestinationProblem(destination: string, policy: OutboundPolicy): string | undefined {
  const parsed = parseSyslogDestination(destination);
  if (!parsed) return "use tcp://host:port or tls://host:port";
  return tcpDestinationProblem(parsed.host, parsed.port, policy);
}

const SYSLOG_SEVERITY: Record<string, number> = { critical: 2, error: 3, warning: 4, info: 6 };
/** Facility 13, "log audit" (RFC 5424, table 1). */
const FACILITY_LOG_AUDIT = 13;
/** Structured-data id: "audit" at the private enterprise number reserved for documentation (RFC 5612). */
const SD_ID = "audit@32473";

const sdValue = (value: unknown) => String(value).replace(/[\\"\]]/g, (c) => `\\${c}`);
const printable = (text: string, max: number) => text.replace(/[^\x21-\x7e]/g, "_").slice(0, max) || "-";

/** One event as an RFC 5424 message: header, structured data with the ids, the description as MSG. */
export function rfc5424Message(event: AuditEventView): string {
  const pri = FACILITY_LOG_AUDIT * 8 + (SYSLOG_SEVERITY[event.severity] ?? 6);
  const params: [string, unknown][] = [
    ["id", event.id], ["category", event.category], ["severity", event.severity], ["site", event.site_id], ["device", event.device_id],
    ["user", event.user_id], ["job", event.job_id], ["ip", event.ip_address], ["hash", event.hash],
  ];
  const sd = `[${SD_ID}${params.filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => ` ${k}="${sdValue(v)}"`).join("")}]`;
  const msg = `${event.description ?? event.event_type} ${JSON.stringify(event.event_metadata)}`;
  return `<${pri}>1 ${event.created_at} fleet-edge fleet-edge - ${printable(event.event_type, 32)} ${sd} \uFEFF${msg}`;
}

/**
 * The bytes sent for a batch of events: `rfc5424` as octet-counted frames (RFC 6587, 3.4.1:
 * "<length> <message>", the length in bytes of the UTF-8 message), `json` as one JSON event per line.
 */
export function syslogPayload(events: AuditEventView[], format: "rfc5424" | "json"): string {
  if (format === "json") return events.map((e) => `${JSON.stringify(e)}\n`).join("");
  const encoder = new TextEncoder();
  return events.map((e) => {
    const message = rfc5424Message(e);
    return `${encoder.encode(message).byteLength} ${message}`;
  }).join("");
}

/** Opens a TCP (or TLS) connection, writes `payload`, closes. */
export async function sendSyslog(destination: string, payload: string, policy: OutboundPolicy): Promise<SendResult> {
  const problem = syslogDestinationProblem(destination, policy);
  if (problem) return { delivered: false, permanent: true, error: `destination refused: ${problem}` };
  const { host, port, tls } = parseSyslogDestination(destination)!;
  let socket: ReturnType<typeof connect> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error("timed out")), DELIVERY_TIMEOUT_MS); });
  try {
    socket = connect({ hostname: host, port }, { secureTransport: tls ? "on" : "off", allowHalfOpen: false });
    // A failed connection rejects these too; the write below reports it.
    socket.closed.catch(() => undefined);
    socket.opened.catch(() => undefined);
    const written = (async () => {
      await socket.opened;
      const writer = socket.writable.getWriter();
      await writer.write(new TextEncoder().encode(payload));
      await writer.close();
    })();
    written.catch(() => undefined);
    await Promise.race([written, timeout]);
    return { delivered: true };
  } catch (error) {
    return { delivered: false, error: errorText(error) };
  } finally {
    clearTimeout(timer);
    await socket?.close().catch(() => undefined);
  }
}
