import { z } from "@hono/zod-openapi";
import { lineText } from "./text";
import type { JsonPath } from "./json-keys";

export const CONFIG_URL_RULE =
  "an absolute https: URL with a host and no user name or password (a device fetches it, so no file:, javascript:, plain http: or relative URL)";

/**
 * Whether a device may be told to fetch its configuration from `value`. Only https: with a host:
 * the device trusts what it downloads, so the transport must be authenticated; credentials in the
 * URL would be copied into job records, audit rows and the live channel. There is no exception for
 * plain http: in development, because a deployment that forgot ENVIRONMENT=production would then
 * accept it too. The job's default config_url, a path on this service, is set by the service itself.
 */
export function isAllowedConfigUrl(value: string): boolean {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  return url.protocol === "https:" && url.hostname !== "" && url.username === "" && url.password === "";
}

export const ConfigUrlSchema = lineText().max(2048).refine(isAllowedConfigUrl, `config_url must be ${CONFIG_URL_RULE}`);

/** Deeper structures are refused: nothing a device reads needs them, and the check stays bounded. */
export const MAX_NESTING = 32;

/**
 * Every place in a JSON value where a `config_url` key holds anything but an allowed URL, and the
 * places where the value nests deeper than MAX_NESTING (not looked into, so refused as well).
 */
export function disallowedConfigUrls(value: unknown, path: JsonPath = [], depth = 0): { badUrls: JsonPath[]; tooDeep: JsonPath[] } {
  const result = { badUrls: [] as JsonPath[], tooDeep: [] as JsonPath[] };
  if (value === null || typeof value !== "object") return result;
  if (depth >= MAX_NESTING) {
    result.tooDeep.push(path);
    return result;
  }
  const entries: [string | number, unknown][] = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  for (const [key, inner] of entries) {
    if (key === "config_url" && !(typeof inner === "string" && isAllowedConfigUrl(inner))) {
      result.badUrls.push([...path, key]);
      continue;
    }
    const nested = disallowedConfigUrls(inner, [...path, key], depth + 1);
    result.badUrls.push(...nested.badUrls);
    result.tooDeep.push(...nested.tooDeep);
  }
  return result;
}

/** A zod check for objects that may carry `config_url` anywhere inside (command payloads, push data). */
export function checkConfigUrls(value: unknown, ctx: z.RefinementCtx, path: JsonPath) {
  const { badUrls, tooDeep } = disallowedConfigUrls(value, path);
  for (const at of badUrls) ctx.addIssue({ code: "custom", path: at, message: `config_url must be ${CONFIG_URL_RULE}` });
  for (const at of tooDeep.slice(0, 1)) ctx.addIssue({ code: "custom", path: at, message: `Nested more than ${MAX_NESTING} levels deep` });
}
