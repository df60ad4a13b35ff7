/**
 * Web Push with WebCrypto and jose only: the VAPID authorization a push service checks (RFC 8292)
 * and the aes128gcm payload encryption only the subscribed browser can undo (RFC 8291, RFC 8188).
 */
import { SignJWT, importJWK } from "jose";

const encoder = new TextEncoder();

export function fromBase64url(text: string): Uint8Array {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (ch) => ch.charCodeAt(0));
}

export function toBase64url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Decodes base64url, or undefined for text that is not (padding is tolerated, as browsers differ). */
export function decodeBase64url(text: string): Uint8Array | undefined {
  const trimmed = text.replace(/=+$/, "");
  if (!/^[A-Za-z0-9_-]*$/.test(trimmed)) return undefined;
  try {
    return fromBase64url(trimmed);
  } catch {
    return undefined;
  }
}

const concat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};

/** An uncompressed P-256 public key: 0x04, then 32 bytes of x and 32 of y. */
export const isP256PublicKey = (bytes: Uint8Array | undefined) => bytes?.length === 65 && bytes[0] === 0x04;

export interface VapidKeys {
  /** The application server's public key, uncompressed, base64url (what browsers subscribe with). */
  publicKey: string;
  /** Its private scalar d, 32 bytes, base64url. */
  privateKey: string;
  /** A mailto: or https: contact the push service can reach the operator at. */
  subject: string;
}

/** Why these VAPID settings cannot sign, or undefined when they can. */
export function vapidKeyProblem(keys: VapidKeys): string | undefined {
  if (!isP256PublicKey(decodeBase64url(keys.publicKey))) return "VAPID_PUBLIC_KEY is not an uncompressed P-256 public key (65 bytes, base64url)";
  if (decodeBase64url(keys.privateKey)?.length !== 32) return "VAPID_PRIVATE_KEY is not a P-256 private key (32 bytes, base64url)";
  if (!/^(mailto:\S+@\S+|https:\/\/\S+)$/.test(keys.subject)) return "VAPID_SUBJECT is not a mailto: or https: contact";
  return undefined;
}

/**
 * The Authorization header for a push to `endpoint`: an ES256 JWT for the push service's origin,
 * valid 12 hours (the longest RFC 8292 allows is 24), and the public key it verifies with.
 */
export async function vapidAuthorization(endpoint: string, keys: VapidKeys, now: Date): Promise<string> {
  const publicKey = fromBase64url(keys.publicKey);
  const jwk = {
    kty: "EC", crv: "P-256", x: toBase64url(publicKey.slice(1, 33)), y: toBase64url(publicKey.slice(33, 65)),
    d: keys.privateKey.replace(/=+$/, ""),
  };
  const signingKey = await importJWK(jwk, "ES256");
  const issuedAt = Math.floor(now.getTime() / 1000);
  const jwt = await new SignJWT({ sub: keys.subject })
    .setProtectedHeader({ alg: "ES256", typ: "JWT" })
    .setAudience(new URL(endpoint).origin)
    .setExpirationTime(issuedAt + 12 * 3600)
    .sign(signingKey);
  return `vapid t=${jwt}, k=${keys.publicKey.replace(/=+$/, "")}`;
}

async function hkdf(salt: Uint8Array, ikm: Uint8Array, info: Uint8Array, bytes: number): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", ikm, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await crypto.subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt, info }, key, bytes * 8));
}

/** The record size announced in the header; the whole message is one record, far below it. */
const RECORD_SIZE = 4096;

/**
 * Encrypts `plaintext` for a subscription (its `p256dh` public key and `auth` secret) as one
 * aes128gcm record: header (salt, record size, this message's ephemeral public key), then the
 * ciphertext of the plaintext followed by the last-record delimiter 0x02.
 */
export async function encryptPayload(plaintext: Uint8Array, subscriberPublicKey: Uint8Array, authSecret: Uint8Array): Promise<Uint8Array> {
  const ephemeral = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]) as CryptoKeyPair;
  const ephemeralPublic = new Uint8Array(await crypto.subtle.exportKey("raw", ephemeral.publicKey) as ArrayBuffer);
  const subscriber = await crypto.subtle.importKey("raw", subscriberPublicKey, { name: "ECDH", namedCurve: "P-256" }, false, []);
  // The runtime reads the standard `public` member; the generated Workers types spell it `$public`,
  // so the algorithm is passed as a variable rather than a literal the type would refuse.
  const ecdh = { name: "ECDH", public: subscriber };
  const sharedSecret = new Uint8Array(await crypto.subtle.deriveBits(ecdh, ephemeral.privateKey, 256));

  const keyInfo = concat(encoder.encode("WebPush: info\0"), subscriberPublicKey, ephemeralPublic);
  const ikm = await hkdf(authSecret, sharedSecret, keyInfo, 32);
  const salt = crypto.getRandomValues(new Uint8Array(16));
  const contentKey = await hkdf(salt, ikm, encoder.encode("Content-Encoding: aes128gcm\0"), 16);
  const nonce = await hkdf(salt, ikm, encoder.encode("Content-Encoding: nonce\0"), 12);

  const aesKey = await crypto.subtle.importKey("raw", contentKey, "AES-GCM", false, ["encrypt"]);
  const ciphertext = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv: nonce }, aesKey, concat(plaintext, new Uint8Array([2]))));

  const header = new Uint8Array(16 + 4 + 1 + ephemeralPublic.length);
  header.set(salt, 0);
  new DataView(header.buffer).setUint32(16, RECORD_SIZE);
  header[20] = ephemeralPublic.length;
  header.set(ephemeralPublic, 21);
  return concat(header, ciphertext);
}
