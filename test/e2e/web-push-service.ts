// A Web Push service stand-in's side of the protocol, written from the RFCs independently of the
// service's own code: it checks the VAPID authorization (RFC 8292) and decrypts an aes128gcm
// message (RFC 8291 / RFC 8188) with the subscriber's private key, as a browser's push service and
// the browser would. Runs on WebCrypto, so both the Node e2e tests and the workers pool use it.
import { decodeProtectedHeader, importJWK, jwtVerify } from "jose";

const b64url = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const unb64url = (text: string) => {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  return Uint8Array.from(atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4)), (c) => c.charCodeAt(0));
};

/** A browser's subscription keys: its ECDH key pair and auth secret, and their base64url forms to register. */
export interface Subscriber {
  privateKey: CryptoKey;
  publicKeyRaw: Uint8Array;
  auth: Uint8Array;
  keys: { p256dh: string; auth: string };
}

export async function newSubscriber(): Promise<Subscriber> {
  const pair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]) as CryptoKeyPair;
  const publicKeyRaw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey) as ArrayBuffer);
  const auth = crypto.getRandomValues(new Uint8Array(16));
  return { privateKey: pair.privateKey, publicKeyRaw, auth, keys: { p256dh: b64url(publicKeyRaw), auth: b64url(auth) } };
}

/** A VAPID key pair as an operator configures it: public key uncompressed and private scalar, base64url. */
export async function newVapidKeys() {
  const pair = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]) as CryptoKeyPair;
  const jwk = await crypto.subtle.exportKey("jwk", pair.privateKey) as JsonWebKey;
  const publicRaw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey) as ArrayBuffer);
  return { publicKey: b64url(publicRaw), privateKey: jwk.d! };
}

const concat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
};

async function hmac(key: Uint8Array, data: Uint8Array) {
  const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, data));
}

/** HKDF spelled out with HMAC (RFC 5869), one output block: all RFC 8291 needs. */
async function hkdf(salt: Uint8Array, ikm: Uint8Array, info: Uint8Array, length: number) {
  const prk = await hmac(salt, ikm);
  return (await hmac(prk, concat(info, new Uint8Array([1])))).slice(0, length);
}

const text = (s: string) => new TextEncoder().encode(s);

/** Decrypts one aes128gcm Web Push message body for the subscriber; throws when it does not decrypt. */
export async function decryptMessage(body: Uint8Array, subscriber: Subscriber): Promise<string> {
  const salt = body.slice(0, 16);
  const recordSize = new DataView(body.buffer, body.byteOffset).getUint32(16);
  const idLength = body[20]!;
  const senderPublic = body.slice(21, 21 + idLength);
  const ciphertext = body.slice(21 + idLength);
  if (recordSize < 18 || ciphertext.length > recordSize) throw new Error(`record size ${recordSize} does not fit a ${ciphertext.length}-byte record`);
  const sender = await crypto.subtle.importKey("raw", senderPublic, { name: "ECDH", namedCurve: "P-256" }, false, []);
  const ecdh = { name: "ECDH", public: sender };
  const shared = new Uint8Array(await crypto.subtle.deriveBits(ecdh, subscriber.privateKey, 256));
  const ikm = await hkdf(subscriber.auth, shared, concat(text("WebPush: info\0"), subscriber.publicKeyRaw, senderPublic), 32);
  const cek = await hkdf(salt, ikm, text("Content-Encoding: aes128gcm\0"), 16);
  const nonce = await hkdf(salt, ikm, text("Content-Encoding: nonce\0"), 12);
  const key = await crypto.subtle.importKey("raw", cek, "AES-GCM", false, ["decrypt"]);
  const padded = new Uint8Array(await crypto.subtle.decrypt({ name: "AES-GCM", iv: nonce }, key, ciphertext));
  let end = padded.length - 1;
  while (end >= 0 && padded[end] === 0) end--;
  if (padded[end] !== 2) throw new Error("the record does not end with the last-record delimiter");
  return new TextDecoder().decode(padded.slice(0, end));
}

/**
 * Checks `Authorization: vapid t=<jwt>, k=<key>` for a push to `endpoint`: an ES256 JWT signed with
 * the key named, for the endpoint's origin, expiring within 24 hours, with a contact subject.
 * Returns the claims and the key, or throws.
 */
export async function verifyVapid(authorization: string | null, endpoint: string) {
  const match = /^vapid t=([^,\s]+),\s*k=([A-Za-z0-9_-]+)$/.exec(authorization ?? "");
  if (!match) throw new Error(`not a VAPID authorization: ${authorization}`);
  const token = match[1]!;
  const publicKey = match[2]!;
  const raw = unb64url(publicKey);
  if (raw.length !== 65 || raw[0] !== 4) throw new Error("k is not an uncompressed P-256 key");
  if (decodeProtectedHeader(token).alg !== "ES256") throw new Error("the JWT is not ES256");
  const key = await importJWK({ kty: "EC", crv: "P-256", x: b64url(raw.slice(1, 33)), y: b64url(raw.slice(33)) }, "ES256");
  const { payload } = await jwtVerify(token, key, { audience: new URL(endpoint).origin, algorithms: ["ES256"] });
  const now = Math.floor(Date.now() / 1000);
  if (typeof payload.exp !== "number" || payload.exp > now + 24 * 3600) throw new Error("exp is missing or more than 24 hours ahead");
  if (typeof payload.sub !== "string" || !/^(mailto:|https:)/.test(payload.sub)) throw new Error("sub is not a contact");
  return { claims: payload, publicKey };
}

/** What the stand-in received for one push. */
export interface ReceivedPush {
  endpoint: string;
  headers: Headers;
  message: Record<string, unknown>;
  vapidKey: string;
}
