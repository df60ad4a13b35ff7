import bcrypt from "bcryptjs";

const COST = 10;

export const hashSecret = (secret: string) => bcrypt.hash(secret, COST);

export const verifySecret = (secret: string, hash: string) => bcrypt.compare(secret, hash);

// A real hash of a random string: comparing against it costs the same as a real check, so an
// unknown e-mail and a wrong password take the same time.
let decoyHash: Promise<string> | undefined;
export function decoyVerify(secret: string): Promise<boolean> {
  decoyHash ??= bcrypt.hash(crypto.randomUUID(), COST);
  return decoyHash.then((hash) => bcrypt.compare(secret, hash)).then(() => false);
}

export const utf8Length = (text: string) => new TextEncoder().encode(text).byteLength;
