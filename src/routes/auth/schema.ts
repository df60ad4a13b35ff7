import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { utf8Length } from "../../services/passwords";

export const PasswordSchema = z
  .string()
  .min(6, "Password must be at least 6 characters")
  .refine((p) => utf8Length(p) <= 72, "Password must be at most 72 bytes (bcrypt limit); it is never truncated")
  .openapi({ description: "6 characters to 72 UTF-8 bytes", example: "s3cret-pass" });

export const SignupBody = z
  .object({
    email: z.email().max(254).openapi({ example: "ops@example.com" }),
    password: PasswordSchema,
    full_name: lineText().max(200).optional(),
    username: lineText().min(1).max(64).regex(/^[\w.@+-]+$/, "Letters, digits and . _ @ + - only").optional(),
    role: z.string().regex(/^(client|admin)$/i, "Must be client or admin (any letter case)").optional()
      .openapi({ description: "`client` or `admin`, in any letter case (the original's clients send `Client`, `Admin` or lower case). Accepted for compatibility; never grants administrator rights", example: "Client" }),
  })
  .openapi("SignupRequest");

export const LoginBody = z
  .object({
    email: z.email().max(254).openapi({ example: "ops@example.com" }),
    password: z.string().min(1).refine((p) => utf8Length(p) <= 72, "Password must be at most 72 bytes (bcrypt limit)"),
  })
  .openapi("LoginRequest");

export const SignupResponse = z
  .object({ success: z.boolean(), message: z.string(), data: z.object({ access_token: z.string() }) })
  .openapi("SignupResponse");

export const LoginResponse = z
  .object({
    success: z.boolean(),
    message: z.string(),
    data: z.object({ access_token: z.string(), token_type: z.literal("bearer"), username: z.string(), is_admin: z.boolean() }),
  })
  .openapi("LoginResponse");

export const MeResponse = z
  .object({
    success: z.boolean(),
    message: z.string(),
    data: z.object({ id: z.number().int(), email: z.string(), username: z.string(), full_name: z.string().nullable(), is_admin: z.boolean() }),
  })
  .openapi("CurrentUser");

export const DeleteUserResponse = z
  .object({ success: z.boolean(), message: z.string(), data: z.object({ email: z.string() }) })
  .openapi("DeleteUserResponse");

export const UserActiveBody = z
  .object({ is_active: z.boolean().openapi({ description: "false deactivates the user, true reactivates them" }) })
  .openapi("UserActiveRequest");

export const UserActiveResponse = z
  .object({ success: z.boolean(), message: z.string(), data: z.object({ email: z.string(), is_active: z.boolean() }) })
  .openapi("UserActiveResponse");

export const EmailParam = z.object({ email: lineText().min(3).max(254).openapi({ param: { name: "email", in: "path" } }) });
export const UserIdParam = z.object({ user_id: z.coerce.number().int().positive().openapi({ param: { name: "user_id", in: "path" } }) });
export const RoleQuery = z.object({ new_role: z.string().min(1).optional() });

export const OidcLoginQuery = z.object({
  redirect: z.enum(["0", "1", "true", "false"]).optional().openapi({
    description: "`1` or `true`: answer 302 to the identity provider instead of JSON (also the answer when the request accepts text/html, as a browser's navigation does)",
  }),
});

export const OidcLoginResponse = z
  .object({ auth_url: z.string().openapi({ description: "The identity provider's authorization URL, with state, nonce and a PKCE S256 challenge" }) })
  .openapi("OidcLoginResponse");

// The provider's parameters: all optional, so each absence answers its own clear 400; others it adds (iss, session_state…) are ignored.
export const OidcCallbackQuery = z.object({
  code: z.string().max(4096).optional().openapi({ description: "The authorization code" }),
  state: z.string().max(512).optional().openapi({ description: "Must equal the state of the login this browser started" }),
  error: z.string().max(256).optional().openapi({ description: "Set by the provider instead of `code` when it refused the login" }),
  error_description: z.string().max(1024).optional(),
});

export const SignInMethods = z
  .object({
    password: z.boolean(),
    oidc: z.boolean(),
    oidc_login_url: z.string().nullable().openapi({ description: "Where a browser starts OpenID Connect sign-in; null when it is not configured" }),
  })
  .openapi("SignInMethods");
