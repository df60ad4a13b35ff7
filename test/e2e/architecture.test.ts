import { describe, expect, it } from "vitest";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    return statSync(join(root, path)).isDirectory() ? sources(path) : path.endsWith(".ts") ? [path] : [];
  });
}

const code = (file: string) => readFileSync(join(root, file), "utf8");
/** The code of a file without its comments and string contents, so prose cannot trip the checks. */
const withoutProse = (text: string) =>
  text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "").replace(/`(?:\\.|[^`\\])*`|"(?:\\.|[^"\\])*"/g, '""');
const importsOf = (text: string) => [...text.matchAll(/^import[^;]*?from\s+"([^"]+)"/gms)].map((m) => m[1]);

describe("architecture: the dependency rule and the type checker stay on", () => {
  const worker = sources("src");
  const hub = sources("durable-objects");

  it("has no casts that switch the type checker off in src/ or durable-objects/", () => {
    const offending = [...worker, ...hub].flatMap((file) =>
      withoutProse(code(file)).split("\n").flatMap((line, i) =>
        /\bas never\b|\bas unknown as\b|:\s*any\b|<any>/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : []));
    expect(offending).toEqual([]);
  });

  it("durable-objects/ imports only the shared layer, the schema and its own modules", () => {
    const offending = hub.flatMap((file) => importsOf(code(file))
      .filter((spec) => spec.startsWith("../src/") && !spec.startsWith("../src/shared/") && spec !== "../src/db/schema")
      .map((spec) => `${file} imports ${spec}`));
    expect(offending).toEqual([]);
  });

  it("src/shared/ imports neither the Worker's services, routes, hub client nor the hubs", () => {
    const offending = sources("src/shared").flatMap((file) => importsOf(code(file))
      .filter((spec) => spec.startsWith(".") && !spec.startsWith("./") && spec !== "../db/schema")
      .map((spec) => `${file} imports ${spec}`));
    expect(offending).toEqual([]);
  });

  it("only src/hub/ talks to the SiteHub, CredentialGuard and AuditStream namespaces", () => {
    const offending = worker.filter((file) => !file.startsWith(join("src", "hub")) && /(SITE_HUB|CREDENTIAL_GUARD|AUDIT_STREAM)\.(get|idFromName)/.test(withoutProse(code(file))));
    expect(offending.map((f) => relative(root, join(root, f)))).toEqual([]);
  });

  it("the Worker reads the time from its clock (src/lib/clock.ts), never from Date directly", () => {
    const allowed = new Set([join("src", "lib", "clock.ts"), join("src", "shared", "time.ts")]);
    const offending = worker.filter((file) => !allowed.has(file)).flatMap((file) =>
      withoutProse(code(file)).split("\n").flatMap((line, i) => (/\bDate\.now\(\)|new Date\(\)/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])));
    expect(offending).toEqual([]);
  });

  it("no comment cites a document outside the repository or an issue number", () => {
    const offending = [...worker, ...hub, ...sources("test")].flatMap((file) =>
      code(file).split("\n").flatMap((line, i) => (/DESIGN\.md|\b[Ii]ssue #?\d+/.test(line) ? [`${file}:${i + 1}`] : [])));
    expect(offending).toEqual([]);
  });
});
