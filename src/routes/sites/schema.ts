import { z } from "@hono/zod-openapi";
import { lineText, proseText } from "../../lib/text";
import { ROLES } from "../../services/access";

export const SiteIdSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, "Letters, digits, '.', '_' and '-' only");

export const SiteParams = z.object({ site_id: SiteIdSchema.openapi({ param: { name: "site_id", in: "path" }, example: "STORE-001" }) });

export const SiteListItem = z
  .object({
    site_id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    location: z.string().nullable(),
    created_at: z.string(),
  })
  .openapi("SiteListItem");

export const SiteDetail = SiteListItem.extend({
  is_active: z.boolean(),
  tenant_id: z.string().nullable(),
  updated_at: z.string(),
}).openapi("Site");

export const SiteList = z.object({ sites: z.array(SiteListItem) }).openapi("SiteList");

export const CreateSiteBody = z
  .object({
    site_id: SiteIdSchema.optional().openapi({ description: "Business id; generated as SITE-XXXX-XXXX when absent", example: "STORE-001" }),
    name: lineText().trim().min(1).max(200),
    description: proseText().max(2000).nullish(),
    location: lineText().max(500).nullish(),
    tenant_id: lineText().min(1).max(64).nullish().openapi({ description: "Tenant the site belongs to; the caller must own the tenant" }),
  })
  .openapi("CreateSiteRequest");

export const CreateSiteResponse = z
  .object({ message: z.string(), site_id: z.string(), name: z.string() })
  .openapi("CreateSiteResponse");

export const SiteHealthDevice = z.object({
  device_id: z.string(),
  name: z.string(),
  type: z.string(),
  status: z.string(),
  ip_address: z.string().nullable(),
  last_seen: z.string().nullable(),
});

export const SiteHealth = z
  .object({
    site_id: z.string(),
    total_devices: z.number().int(),
    healthy_devices: z.number().int(),
    offline_devices: z.number().int(),
    error_devices: z.number().int(),
    health_percentage: z.number(),
    status_summary: z.string(),
    devices: z.array(SiteHealthDevice),
    last_updated: z.string(),
  })
  .openapi("SiteHealth");

export const RoleSchema = z.enum(ROLES);

export const Member = z
  .object({ user_id: z.number().int(), email: z.string(), username: z.string(), role: RoleSchema, created_at: z.string() })
  .openapi("Member");

export const MemberList = z.object({ members: z.array(Member) }).openapi("MemberList");

export const AddMemberBody = z
  .object({
    email: z.email().optional(),
    user_id: z.number().int().positive().optional(),
    role: RoleSchema,
  })
  .refine((b) => (b.email === undefined) !== (b.user_id === undefined), { message: "Give exactly one of email or user_id" })
  .openapi("AddMemberRequest");

export const MemberParams = SiteParams.extend({
  user_id: z.coerce.number().int().positive().openapi({ param: { name: "user_id", in: "path" } }),
});

export const toSiteListItem = (s: { siteId: string; name: string; description: string | null; location: string | null; createdAt: string }) => ({
  site_id: s.siteId,
  name: s.name,
  description: s.description,
  location: s.location,
  created_at: s.createdAt,
});

export const toSiteDetail = (s: Parameters<typeof toSiteListItem>[0] & { isActive: boolean; tenantId: string | null; updatedAt: string }) => ({
  ...toSiteListItem(s),
  is_active: s.isActive,
  tenant_id: s.tenantId,
  updated_at: s.updatedAt,
});
