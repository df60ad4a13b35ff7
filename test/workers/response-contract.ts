import type { z } from "@hono/zod-openapi";
import { createApp } from "../../src/app";
import { ErrorSchema } from "../../src/lib/openapi";

/**
 * Checks answers against what the OpenAPI registry declares for the route that served them: the
 * status must be one the operation lists, and a JSON body must parse with the schema declared for
 * that status and carry no field the schema does not name. The registry holds the very zod schemas
 * the document is generated from, so a handler drifting from its documentation fails here.
 */

type Content = Record<string, { schema?: unknown }>;
interface Operation {
  method: string;
  /** The OpenAPI path, e.g. `/api/v1/devices/{device_id}` */
  path: string;
  pattern: RegExp;
  responses: Record<string, { content?: Content }>;
}

let operations: Operation[] | undefined;

const trimSlash = (p: string) => (p.length > 1 ? p.replace(/\/+$/, "") : p);

function load(): Operation[] {
  if (operations) return operations;
  const app = createApp();
  operations = [];
  // Registration order is the order the router tries routes in, so the first match is the route that answered.
  for (const def of app.openAPIRegistry.definitions) {
    if (def.type !== "route") continue;
    const route = def.route as { method: string; path: string; responses: Operation["responses"] };
    const source = trimSlash(route.path)
      .split(/(\{[^}]+\})/)
      .map((part) => (part.startsWith("{") ? "[^/]+" : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
      .join("");
    operations.push({ method: route.method.toUpperCase(), path: route.path, pattern: new RegExp(`^${source}/*$`), responses: route.responses });
  }
  if (operations.length === 0) throw new Error("the OpenAPI registry holds no routes");
  return operations;
}

export function findOperation(method: string, path: string): Operation | undefined {
  const pathname = new URL(path, "http://fleet.test").pathname;
  return load().find((op) => op.method === method.toUpperCase() && op.pattern.test(pathname));
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * zod drops keys an object schema does not declare; whatever the input has and the parsed output lacks
 * is a field the documentation does not describe.
 */
function undeclaredFields(input: unknown, output: unknown, at: string, found: string[]) {
  if (Array.isArray(input) && Array.isArray(output)) {
    input.forEach((item, i) => undeclaredFields(item, output[i], `${at}[${i}]`, found));
  } else if (isObject(input) && isObject(output)) {
    for (const key of Object.keys(input)) {
      if (!(key in output)) found.push(`${at}.${key}`);
      else undeclaredFields(input[key], output[key], `${at}.${key}`, found);
    }
  }
}

export interface Answer {
  status: number;
  contentType: string | null;
  /** The parsed JSON body; only looked at when the content type is JSON. */
  json?: unknown;
}

/** What is wrong with an answer to `method path`, or an empty list. */
export function contractProblems(method: string, path: string, answer: Answer): string[] {
  const op = findOperation(method, path);
  const isJson = /^application\/json\b/i.test(answer.contentType ?? "");
  const where = op ? `${method.toUpperCase()} ${op.path}` : `${method.toUpperCase()} ${path} (no declared route)`;
  let schema: unknown;
  if (op) {
    const declared = op.responses[String(answer.status)];
    if (!declared) return [`${where}: status ${answer.status} is not declared (declared: ${Object.keys(op.responses).join(", ")})`];
    if (!isJson) return [];
    schema = declared.content?.["application/json"]?.schema;
    if (!schema) return [`${where}: status ${answer.status} declares no JSON body, but one came back`];
  } else {
    // The router's own 404/405 for paths no route declares: still the one error shape.
    if (!isJson) return [];
    if (answer.status < 400) return [`${where}: answered ${answer.status} with JSON although no route is declared`];
    schema = ErrorSchema;
  }
  const result = (schema as z.ZodType).safeParse(answer.json);
  if (!result.success) {
    return result.error.issues.map((i) => `${where} ${answer.status}: body.${i.path.join(".")}: ${i.message}`);
  }
  const extra: string[] = [];
  undeclaredFields(answer.json, result.data, "body", extra);
  return extra.map((field) => `${where} ${answer.status}: ${field} is not declared in the response schema`);
}

export function assertContract(method: string, path: string, answer: Answer) {
  const problems = contractProblems(method, path, answer);
  if (problems.length) {
    throw new Error(`response does not match its OpenAPI declaration:\n  ${problems.join("\n  ")}\nbody: ${JSON.stringify(answer.json)?.slice(0, 2000)}`);
  }
}

/**
 * Checks a Response without consuming it: the JSON body is read from a clone. Streams (server-sent
 * events) and WebSocket upgrades are checked for their status only.
 */
export async function checkResponse(request: Request, response: Response) {
  const contentType = response.headers.get("Content-Type");
  let json: unknown;
  if (/^application\/json\b/i.test(contentType ?? "")) {
    const text = await response.clone().text();
    try { json = text ? JSON.parse(text) : undefined; } catch { throw new Error(`${request.method} ${request.url}: Content-Type is JSON but the body is not: ${text.slice(0, 200)}`); }
  }
  assertContract(request.method, new URL(request.url).pathname, { status: response.status, contentType, json });
}
