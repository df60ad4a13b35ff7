import bcrypt from "bcryptjs";

const COST = 10;

export const hashSecret = (secret: string) => bcrypt.hash(secret, COST);

export const verifySecret = (secret: string, hash: string) => bcrypt.compare(secret, hash);

// A real hash of a random string: comparing against it costs the same as a real check, so an
// unknown e-mail and a wrong password take the same time. The isolate keeps the finished hash, never
// the promise of it: a Worker request may not await a promise another request started (workerd
// refuses, or the waiter hangs when the first request ends), so concurrent first calls each hash.
let decoyHash: string | undefined;
export async function decoyVerify(secret: string): Promise<boolean> {
  decoyHash ??= await bcrypt.hash(crypto.randomUUID(), COST);
  await bcrypt.compare(secret, decoyHash);
  return false;
}

export const utf8Length = (text: string) => new TextEncoder().encode(text).byteLength;
