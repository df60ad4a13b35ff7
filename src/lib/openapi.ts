import { OpenAPIHono, createRoute, z, type RouteConfig } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler, TypedResponse } from "hono";
import type { AppEnv } from "../env";
import { identifyDeviceForHub, requireAdmin, requireDevice, requireUser } from "../middleware/auth";
import { requireAccess, requireUserWithAccess, type AccessRule } from "../middleware/access";
import { strictJsonBody } from "../middleware/json-body";
import { requireUserOrDevice } from "../middleware/user-or-device";
import { ApiError, type ValidationIssue } from "./errors";
import { FAILURES_PER_CLIENT, FAILURES_PER_CREDENTIAL, GUARD_WINDOW_MS } from "../shared/guard-contract";

export const ErrorSchema = z
  .object({
    detail: z.union([
      z.string(),
      z.array(z.object({ loc: z.array(z.union([z.string(), z.number()])), msg: z.string(), type: z.string() })),
    ]),
  })
  .openapi("Error");

/**
 * `device-in-hub`: device credentials admitted by the hub call the handler makes (see identifyDeviceForHub).
 * `user-or-device`: either; device headers, when present, decide (see requireUserOrDevice).
 */
export type AuthMode = "none" | "user" | "admin" | "device" | "device-in-hub" | "user-or-device";

const SECURITY: Record<AuthMode, RouteConfig["security"]> = {
  none: [],
  user: [{ bearerAuth: [] }, { cookieAuth: [] }],
  admin: [{ bearerAuth: [] }, { cookieAuth: [] }],
  device: [{ deviceId: [], deviceApiKey: [] }],
  "device-in-hub": [{ deviceId: [], deviceApiKey: [] }],
  "user-or-device": [{ bearerAuth: [] }, { cookieAuth: [] }, { deviceId: [], deviceApiKey: [] }],
};

const AUTH_MIDDLEWARE: Record<AuthMode, MiddlewareHandler<AppEnv>[]> = {
  none: [],
  user: [requireUser],
  admin: [requireUser, requireAdmin],
  device: [requireDevice],
  "device-in-hub": [identifyDeviceForHub],
  "user-or-device": [requireUserOrDevice],
};

const errorResponse = (description: string) => ({
  description,
  content: { "application/json": { schema: ErrorSchema } },
});

const STANDARD_ERRORS = {
  400: "Malformed request body (not UTF-8, not JSON, or an object with a duplicate key) or a request the current state does not allow",
  401: "Missing or invalid credentials",
  403: "Authenticated but not allowed: a role too low for this action on an object the caller can see, not an administrator, a suspended device, or a change authenticated by the session cookie from a page whose origin may not use it",
  404: "Not found, or not visible to the caller: an object on a site the caller has no role on answers exactly like an unknown id",
  409: "Conflicts with the current state",
  412: "Precondition failed: the object changed since the version If-Match names; read it again and retry",
  413: "Request body too large",
  422: "Validation failed: detail lists each problem with its location",
  428: "Precondition required: this change needs If-Match with the version it was based on",
  429: "Rate limited: Retry-After says how many seconds to wait",
  502: "An upstream service (the identity provider) could not be reached or gave an unusable answer",
  503: "Temporarily unavailable",
} as const;

type ErrorCode = keyof typeof STANDARD_ERRORS;

/** How failed credential checks are throttled, for the descriptions of the routes that check one. */
export const THROTTLING_DESCRIPTION =
  `after ${FAILURES_PER_CLIENT} failures from one client address within ${GUARD_WINDOW_MS / 60_000} minutes, or once ` +
  `${FAILURES_PER_CREDENTIAL} failures from all addresses have piled up while the caller's address is one of the ` +
  "failing ones, that address gets 429 with Retry-After and nothing is checked. An address with no failure of its own " +
  "still gets through, so nobody can lock the rightful holder out by failing on purpose; an address that fails often " +
  "on any credential is refused for a few minutes.";

type ApiRouteConfig = Omit<RouteConfig, "security" | "middleware"> & {
  auth: AuthMode;
  /** Replaces the middleware `auth` brings, for a route that accepts another proof of the same identity (a live-channel ticket). */
  authenticate?: MiddlewareHandler<AppEnv>;
  /** The role needed on the site of the object the path names; checked before the handler runs. */
  access?: AccessRule;
  /** Error statuses this route can answer besides the ones implied by its auth and body. */
  errors?: ErrorCode[];
  /** Marks unversioned compatibility paths. */
  deprecated?: boolean;
  /** The detail of this route's 401, where something other than the standard one is promised. */
  unauthenticatedDetail?: string;
};

/**
 * Declares a route with its auth middleware, security requirement and error responses in one place,
 * so the OpenAPI document cannot drift from what the route enforces.
 */
export function apiRoute<const R extends ApiRouteConfig>(config: R) {
  const { auth, authenticate, access, errors = [], unauthenticatedDetail, ...route } = config;
  const codes = new Set<ErrorCode>(errors);
  if (auth !== "none") codes.add(401);
  if (auth === "admin" || auth === "device" || auth === "device-in-hub" || auth === "user-or-device") codes.add(403);
  // A change made with the session cookie is refused from a page of an origin that may not use it.
  if ((auth === "user" || auth === "admin") && !["get", "head"].includes(route.method)) codes.add(403);
  if (access) {
    // No role on the object's site reads as "not found"; 403 only for a role too low for the action.
    codes.add(404);
    if (accessCanForbid(access)) codes.add(403);
  }
  // A device key that would cost a bcrypt is throttled (src/services/credential-throttle.ts).
  if (auth === "device" || auth === "device-in-hub") codes.add(429);
  if (route.request?.body || route.request?.query || route.request?.params) codes.add(422);
  if (route.request?.body) {
    codes.add(400);
    codes.add(413);
  }
  const errorResponses = Object.fromEntries(
    [...codes].sort().map((code) => [code, errorResponse(STANDARD_ERRORS[code])]),
  );
  const authMiddleware = authenticate
    ? [authenticate]
    : unauthenticatedDetail ? AUTH_MIDDLEWARE[auth].map((m) => withUnauthenticatedDetail(m, unauthenticatedDetail)) : AUTH_MIDDLEWARE[auth];
  // Credentials, then access, are checked before the body is read; the body is read strictly before it is validated.
  return createRoute({
    ...(route as Omit<R, "auth" | "authenticate" | "access" | "errors" | "unauthenticatedDetail">),
    security: SECURITY[auth],
    middleware: [
      ...(ruleOnPath(access) && auth === "user" && !authenticate && !unauthenticatedDetail
        // The commonest operator route: one D1 statement for the user, the object, its site and the role together.
        ? [requireUserWithAccess(access, paramsSchema(route.request))]
        : [...authMiddleware, ...(access ? [accessCheck(access, route.request)] : [])]),
      ...(route.request?.body ? [strictJsonBody] : []),
    ],
    responses: { ...errorResponses, ...route.responses },
  } as Omit<R, "auth" | "authenticate" | "access" | "errors" | "unauthenticatedDetail"> & { middleware: MiddlewareHandler<AppEnv>[] });
}

function accessCanForbid(rule: AccessRule): boolean {
  if ("site" in rule) return rule.site !== "viewer" || rule.outsider === "forbidden";
  const minimum = "device" in rule ? rule.device : "job" in rule ? rule.job : rule.command;
  return minimum !== "viewer";
}

/** The same authentication, answering its 401 with the given detail. */
function withUnauthenticatedDetail(middleware: MiddlewareHandler<AppEnv>, detail: string): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    let passed = false;
    try {
      await middleware(c, async () => { passed = true; });
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) throw new ApiError(401, detail, error.headers);
      throw error;
    }
    if (passed) await next();
  };
}

function ruleOnPath(rule: AccessRule | undefined): rule is AccessRule {
  return !!rule && !("site" in rule && rule.from === "query");
}

function paramsSchema(request: RouteConfig["request"]) {
  return request?.params instanceof z.ZodType ? request.params : undefined;
}

function accessCheck(rule: AccessRule, request: RouteConfig["request"]) {
  const schema = "from" in rule && rule.from === "query" ? request?.query : request?.params;
  return requireAccess(rule, schema instanceof z.ZodType ? schema : undefined);
}

export function toValidationIssues(error: z.ZodError, target: string): ValidationIssue[] {
  return error.issues.map((issue) => ({
    loc: [target === "json" ? "body" : target, ...issue.path.map((p) => (typeof p === "symbol" ? String(p) : p))],
    msg: issue.message,
    type: issue.code,
  }));
}

export function newRouter() {
  return new OpenAPIHono<AppEnv>({
    defaultHook: (result, _c: Context) => {
      if (!result.success) throw new ApiError(422, toValidationIssues(result.error as z.ZodError, result.target));
    },
  });
}

/** JSON body helper for route declarations. */
export const jsonBody = <T extends z.ZodType>(schema: T, description?: string) => ({
  body: { required: true, description, content: { "application/json": { schema } } },
});

export const jsonResponse = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

/**
 * A 200 JSON answer whose body is already serialised, typed as the route's documented response `T`,
 * so the route keeps declaring that schema. Only for a body serialised from a value that passed the
 * same schema: the compiler cannot follow a string, so the overload is where that promise is made.
 * The site's device list uses it: checked at the hub boundary once per change, then kept between reads.
 */
export function serialisedJson<T>(c: Context, body: string): Response & TypedResponse<T, 200, "json">;
export function serialisedJson(c: Context, body: string): Response {
  return c.body(body, 200, { "Content-Type": "application/json" });
}

export const MessageSchema = z.object({ message: z.string() }).openapi("Message");
