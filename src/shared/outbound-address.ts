/**
 * Where the service may send alert webhooks and integration traffic: only to public destinations,
 * so an administrator's rule (or a stolen administrator token) cannot turn the service into a probe
 * of the network it runs in. A pure check of the URL or host as written; what a public name
 * resolves to cannot be checked here (docs/audit.md, "Destinations").
 */

export interface OutboundPolicy {
  /** Test-only: allow plain http:// and tcp to 127.0.0.1 / localhost (AUDIT_ALLOW_LOOPBACK_RECEIVERS). */
  allowLoopback: boolean;
}

const INTERNAL_SUFFIXES = [".localhost", ".local", ".internal", ".intranet", ".lan", ".home.arpa", ".corp", ".private", ".localdomain"];
const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

function ipv4Octets(host: string): number[] | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!match) return undefined;
  const octets = match.slice(1).map(Number);
  return octets.every((o) => o <= 255) ? octets : undefined;
}

/** Why an IPv4 address is not a public destination, or undefined when it is. */
function ipv4Problem([a, b, c]: number[]): string | undefined {
  if (a === 0) return "a 'this network' address (0.0.0.0/8)";
  if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) return "a private address";
  if (a === 127) return "a loopback address";
  if (a === 169 && b === 254) return "a link-local address (cloud metadata lives there)";
  if (a === 100 && b >= 64 && b <= 127) return "a carrier-grade NAT address (100.64.0.0/10)";
  if (a === 192 && b === 0 && (c === 0 || c === 2)) return "a reserved address";
  if (a === 198 && (b === 18 || b === 19)) return "a benchmarking address (198.18.0.0/15)";
  if ((a === 198 && b === 51 && c === 100) || (a === 203 && b === 0 && c === 113)) return "a documentation address";
  if (a >= 224 && a <= 239) return "a multicast address";
  if (a >= 240) return "a reserved or broadcast address";
  return undefined;
}

/** Expands an IPv6 literal (without brackets) to 8 groups, or undefined when it is not one. */
function ipv6Groups(text: string): number[] | undefined {
  let host = text.toLowerCase();
  const v4 = /(\d{1,3}(?:\.\d{1,3}){3})$/.exec(host);
  if (v4) {
    const octets = ipv4Octets(v4[1]);
    if (!octets) return undefined;
    host = `${host.slice(0, -v4[1].length)}${((octets[0] << 8) | octets[1]).toString(16)}:${((octets[2] << 8) | octets[3]).toString(16)}`;
  }
  const halves = host.split("::");
  if (halves.length > 2) return undefined;
  const parse = (part: string) => (part ? part.split(":") : []);
  const head = parse(halves[0]);
  const tail = halves.length === 2 ? parse(halves[1]) : [];
  const missing = 8 - head.length - tail.length;
  if ((halves.length === 1 && missing !== 0) || missing < 0) return undefined;
  const groups = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  if (groups.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return undefined;
  return groups.map((g) => parseInt(g, 16));
}

function ipv6Problem(groups: number[]): string | undefined {
  const [g0, g1, , , , g5, g6, g7] = groups;
  if (groups.every((g) => g === 0)) return "the unspecified address";
  if (groups.slice(0, 7).every((g) => g === 0) && g7 === 1) return "a loopback address";
  // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d): judged by the IPv4 address inside.
  const embedded = [g6 >> 8, g6 & 0xff, g7 >> 8, g7 & 0xff];
  if (groups.slice(0, 5).every((g) => g === 0) && g5 === 0xffff) return ipv4Problem(embedded);
  if (g0 === 0x64 && g1 === 0xff9b) return ipv4Problem(embedded);
  if ((g0 & 0xfe00) === 0xfc00) return "a unique local address (fc00::/7)";
  if ((g0 & 0xffc0) === 0xfe80) return "a link-local address";
  if ((g0 & 0xff00) === 0xff00) return "a multicast address";
  if (g0 === 0x2001 && g1 === 0x0db8) return "a documentation address";
  return undefined;
}

/** Why `hostname` (as a URL gives it: IPv6 in brackets) is not a public destination, or undefined. */
export function hostProblem(hostname: string): string | undefined {
  const host = hostname.toLowerCase().replace(/\.$/, "");
  if (!host) return "no host";
  const v4 = ipv4Octets(host);
  if (v4) return ipv4Problem(v4);
  if (host.startsWith("[") && host.endsWith("]")) {
    const groups = ipv6Groups(host.slice(1, -1));
    return groups ? ipv6Problem(groups) : "an unreadable IPv6 address";
  }
  if (/^[\d.]+$/.test(host) || /^0x/i.test(host)) return "an unreadable IPv4 address";
  if (host === "localhost" || INTERNAL_SUFFIXES.some((suffix) => host.endsWith(suffix))) return "an internal host name";
  if (!host.includes(".")) return "a single-label host name (resolved on the internal network)";
  return undefined;
}

/** Why `raw` may not receive webhooks, or undefined when it may: HTTPS to a public host, no credentials in the URL. */
export function webhookUrlProblem(raw: string, policy: OutboundPolicy): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "not a URL";
  }
  if (url.username || url.password) return "credentials in the URL are not allowed";
  if (policy.allowLoopback && url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  if (url.protocol !== "https:") return "only https:// URLs are allowed";
  const problem = hostProblem(url.hostname);
  return problem ? `${url.hostname} is ${problem}` : undefined;
}

/** Why `host:port` may not receive syslog traffic, or undefined when it may. */
export function tcpDestinationProblem(host: string, port: number, policy: OutboundPolicy): string | undefined {
  if (!Number.isInteger(port) || port < 1 || port > 65535) return "the port must be 1–65535";
  if (policy.allowLoopback && LOOPBACK_HOSTS.has(host.toLowerCase())) return undefined;
  const problem = hostProblem(host.includes(":") && !host.startsWith("[") ? `[${host}]` : host);
  return problem ? `${host} is ${problem}` : undefined;
}
