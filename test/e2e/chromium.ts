// Which Chromium the browser tests drive (through playwright-core, which downloads no browser):
//
//   1. CHROME_PATH, when set: that executable, and nothing else.
//   2. A system Chromium: /usr/bin/chromium (Debian), /usr/bin/chromium-browser (Ubuntu, Alpine), or
//      either name on PATH.
//   3. Otherwise the headless Chromium inside the @sparticuz/chromium devDependency: it ships
//      brotli-compressed in the npm package and is unpacked to the temporary directory on first use,
//      so `npm ci && npm test` needs nothing but Node. Its only system libraries beyond glibc are NSS;
//      when it does not start for want of them, the NSS build packed beside it is unpacked and put on
//      the browser's library path.
//
// FLEET_EDGE_CHROMIUM=bundled skips 1 and 2 (to prove the bundled browser works on a machine that has
// a system one); FLEET_EDGE_CHROMIUM=system refuses to fall back to the bundled one.
import { spawnSync } from "node:child_process";
import { accessSync, constants, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";
import { brotliDecompressSync } from "node:zlib";

export interface Browser {
  executablePath: string;
  source: "CHROME_PATH" | "system" | "bundled";
  /** Extra environment for the browser process (the bundled one's fonts and, if needed, NSS). */
  env: Record<string, string>;
}

const SYSTEM_PATHS = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
const SYSTEM_NAMES = ["chromium", "chromium-browser"];

const isExecutable = (path: string) => {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

function systemChromium(): string | undefined {
  const onPath = (process.env.PATH ?? "").split(delimiter).filter(Boolean).flatMap((dir) => SYSTEM_NAMES.map((name) => join(dir, name)));
  return [...SYSTEM_PATHS, ...onPath].find(isExecutable);
}

/** Regular files of an uncompressed tar archive, written under `target` (enough for the NSS bundle). */
function untar(archive: Buffer, target: string) {
  for (let offset = 0; offset + 512 <= archive.length; ) {
    const header = archive.subarray(offset, offset + 512);
    if (header.every((byte) => byte === 0)) break;
    const field = (start: number, length: number) => header.subarray(start, start + length).toString("utf8").replace(/\0.*$/s, "");
    const prefix = field(257, 5) === "ustar" ? field(345, 155) : "";
    const name = prefix ? `${prefix}/${field(0, 100)}` : field(0, 100);
    const size = parseInt(field(124, 12).trim() || "0", 8);
    const type = field(156, 1);
    offset += 512;
    if ((type === "0" || type === "") && !name.split("/").includes("..")) {
      const path = join(target, name);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, archive.subarray(offset, offset + size), { mode: 0o755 });
    }
    offset += Math.ceil(size / 512) * 512;
  }
}

/** Whether the executable starts at all: the dynamic loader refuses it at once when a library is missing. */
function starts(executablePath: string, env: Record<string, string> = {}) {
  const probe = spawnSync(executablePath, ["--version"], { env: { ...process.env, ...env }, encoding: "utf8", timeout: 30_000 });
  return { ok: probe.status === 0, output: `${probe.stderr ?? ""}${probe.stdout ?? ""}`.trim() };
}

/** The directory of the NSS build packed beside the bundled Chromium, unpacked once. */
function bundledNss(packageDir: string): string {
  const target = join(tmpdir(), "fleet-edge-chromium-nss");
  if (!existsSync(join(target, "lib", "libnss3.so"))) untar(brotliDecompressSync(readFileSync(join(packageDir, "bin", "al2023.tar.br"))), target);
  return join(target, "lib");
}

async function bundledChromium(): Promise<Browser> {
  const { default: chromium } = await import("@sparticuz/chromium");
  const executablePath = await chromium.executablePath();
  // The package exports only its entry point; its bin/ directory sits above that.
  let packageDir = dirname(createRequire(import.meta.url).resolve("@sparticuz/chromium"));
  while (!existsSync(join(packageDir, "bin", "al2023.tar.br")) && dirname(packageDir) !== packageDir) packageDir = dirname(packageDir);
  const env: Record<string, string> = { FONTCONFIG_PATH: join(tmpdir(), "fonts") };
  const first = starts(executablePath, env);
  if (!first.ok) {
    if (!/error while loading shared libraries/.test(first.output)) throw new Error(`The bundled Chromium ${executablePath} does not start: ${first.output}`);
    env.LD_LIBRARY_PATH = [bundledNss(packageDir), process.env.LD_LIBRARY_PATH].filter(Boolean).join(delimiter);
    const again = starts(executablePath, env);
    if (!again.ok) throw new Error(`The bundled Chromium ${executablePath} does not start, even with the bundled NSS libraries: ${again.output}`);
  }
  return { executablePath, source: "bundled", env };
}

export async function findChromium(): Promise<Browser> {
  const choice = process.env.FLEET_EDGE_CHROMIUM;
  if (choice !== "bundled") {
    const explicit = process.env.CHROME_PATH;
    if (explicit) {
      if (!isExecutable(explicit)) throw new Error(`CHROME_PATH=${explicit} is not an executable file.`);
      return { executablePath: explicit, source: "CHROME_PATH", env: {} };
    }
    const system = systemChromium();
    if (system) return { executablePath: system, source: "system", env: {} };
    if (choice === "system") throw new Error(`FLEET_EDGE_CHROMIUM=system, but no Chromium at ${SYSTEM_PATHS.join(" or ")} nor on PATH.`);
  }
  return bundledChromium();
}
