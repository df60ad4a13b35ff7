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
    role: z.enum(["Client", "Admin"]).optional().openapi({ description: "Accepted for compatibility; never grants administrator rights" }),
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
