import type { ContentfulStatusCode } from "hono/utils/http-status";

export interface ValidationIssue {
  loc: (string | number)[];
  msg: string;
  type: string;
}

/** The one error shape of the service: `{"detail": ...}` with the given status. */
export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly detail: string | ValidationIssue[],
    readonly headers: Record<string, string> = {},
    /** Fields answered beside `detail`, where a route's contract names them (a consent refusal's permissions). */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(typeof detail === "string" ? detail : "Validation failed");
  }
}

export const badRequest = (detail: string) => new ApiError(400, detail);
export const unauthorized = (detail = "Not authenticated") =>
  new ApiError(401, detail, { "WWW-Authenticate": "Bearer" });
export const forbidden = (detail = "Forbidden") => new ApiError(403, detail);
export const notFound = (detail = "Not Found") => new ApiError(404, detail);
export const conflict = (detail: string) => new ApiError(409, detail);
export const unprocessable = (issues: ValidationIssue[] | string) =>
  new ApiError(422, typeof issues === "string" ? [{ loc: ["body"], msg: issues, type: "value_error" }] : issues);
export const tooManyRequests = (detail: string, retryAfterSeconds?: number) =>
  new ApiError(429, detail, retryAfterSeconds ? { "Retry-After": String(retryAfterSeconds) } : {});

/**
 * Whether a database error is a unique-constraint violation. Drizzle wraps D1's error in a
 * DrizzleQueryError whose own message is the failed query, so the causes are read too.
 */
export function isUniqueViolation(error: unknown, column?: string): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const message = String((e as Error)?.message ?? e);
    if (/UNIQUE constraint failed/i.test(message) && (!column || message.includes(column))) return true;
  }
  return false;
}
