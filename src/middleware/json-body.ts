import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { badRequest } from "../lib/errors";
import { findDuplicateKey, formatJsonPath } from "../lib/json-keys";

// The media types Hono's JSON validator reads (application/json, application/*+json).
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/**
 * Reads a JSON request body strictly before the route's schema sees it: bytes that are not UTF-8 are
 * refused rather than turned into U+FFFD, and so is an object with the same key twice (JSON.parse
 * would keep the last one silently). Both answer 400 and nothing runs. The bytes stay in Hono's
 * body cache, where the validator reads them, so the body is read from the network once, through
 * whatever body limit applies.
 */
export const strictJsonBody = createMiddleware<AppEnv>(async (c, next) => {
  const mediaType = (c.req.header("Content-Type") ?? "").split(";")[0].trim();
  if (!JSON_MEDIA_TYPE.test(mediaType)) return next();
  const bytes = await c.req.arrayBuffer();
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw badRequest("Request body is not valid UTF-8");
  }
  try {
    JSON.parse(text);
  } catch {
    throw badRequest("Malformed JSON in request body");
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate) throw badRequest(`Duplicate key '${duplicate[duplicate.length - 1]}' in the JSON body at ${formatJsonPath(duplicate)}`);
  await next();
});
