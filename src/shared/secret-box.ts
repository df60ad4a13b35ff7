/**
 * Secrets the service must read back (a webhook rule's signing secret) are stored sealed with
 * AES-256-GCM under a key derived (HKDF-SHA-256) from JWT_SECRET with a purpose label, so a copy of
 * the database alone does not reveal them. Rotating JWT_SECRET makes sealed secrets unreadable:
 * such rules must be recreated (docs/audit.md, "Signing secrets").
 */
const PURPOSE = "fleet-edge audit alert secrets v1";

const toBase64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
const fromBase64 = (text: string) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

async function keyFrom(rootSecret: string): Promise<CryptoKey> {
  const root = await crypto.subtle.importKey("raw", new TextEncoder().encode(rootSecret), "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: new Uint8Array(32), info: new TextEncoder().encode(PURPOSE) },
    root, { name: "AES-GCM", length: 256 }, false, ["encrypt", "decrypt"],
  );
}

/** `v1.<base64 iv>.<base64 ciphertext+tag>` */
export async function sealSecret(rootSecret: string, plaintext: string): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt({ name: "AES-GCM", iv }, await keyFrom(rootSecret), new TextEncoder().encode(plaintext));
  return `v1.${toBase64(iv)}.${toBase64(new Uint8Array(sealed))}`;
}

/** The plaintext, or undefined when the box is malformed or was sealed under another root secret. */
export async function openSecret(rootSecret: string, box: string): Promise<string | undefined> {
  const [version, iv, data] = box.split(".");
  if (version !== "v1" || !iv || !data) return undefined;
  try {
    const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: fromBase64(iv) }, await keyFrom(rootSecret), fromBase64(data));
    return new TextDecoder().decode(plain);
  } catch {
    return undefined;
  }
}
