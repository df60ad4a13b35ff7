// No 0/O/1/I/L: ids are read aloud over the phone and typed from printed labels.
const ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ";

function randomGroup(length: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  let out = "";
  for (const b of bytes) out += ALPHABET[b % ALPHABET.length];
  return out;
}

const groups = (prefix: string, count: number) =>
  [prefix, ...Array.from({ length: count }, () => randomGroup(4))].join("-");

export const newSiteId = () => groups("SITE", 2);
export const newDeviceId = () => groups("DEVICE", 3);
export const newTenantId = () => groups("TENANT", 2);
export const newUuid = () => crypto.randomUUID();

export function newJobId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return "job-" + [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

export function randomToken(byteLength = 32): string {
  return base64url(crypto.getRandomValues(new Uint8Array(byteLength)));
}

export function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Compares two digests in constant time. */
export function sameDigest(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  return x.byteLength === y.byteLength && crypto.subtle.timingSafeEqual(x, y);
}

/** FNV-1a of a string: a stable 32-bit seed (simulated agents and commands derive their randomness from it). */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h >>> 0;
}

/** JSON with sorted keys, so equal values compare equal whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : v);
}
