import { z } from "@hono/zod-openapi";
import { lineText, proseText } from "../../lib/text";
import { isTimeZone } from "../../shared/rollout-plan";
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
  time_zone: z.string().openapi({ description: "IANA time zone of the site (rollout start windows are in its local time)", example: "Europe/Paris" }),
}).openapi("Site");

/** An IANA time zone name the runtime knows (e.g. Europe/Paris); checked with Intl. */
export const TimeZoneSchema = lineText().min(1).max(64).refine(isTimeZone, "An IANA time zone name, e.g. Europe/Paris or UTC");

export const SiteList = z.object({ sites: z.array(SiteListItem) }).openapi("SiteList");

export const CreateSiteBody = z
  .object({
    site_id: SiteIdSchema.optional().openapi({ description: "Business id; generated as SITE-XXXX-XXXX when absent", example: "STORE-001" }),
    name: lineText().trim().min(1).max(200),
    description: proseText().max(2000).nullish(),
    location: lineText().max(500).nullish(),
    tenant_id: lineText().min(1).max(64).nullish().openapi({ description: "Tenant the site belongs to; the caller must own the tenant" }),
    time_zone: TimeZoneSchema.optional().openapi({ description: "IANA time zone of the site (default UTC); rollout start windows are in its local time", example: "Europe/Paris" }),
  })
  .openapi("CreateSiteRequest");

export const CreateSiteResponse = z
  .object({ message: z.string(), site_id: z.string(), name: z.string() })
  .openapi("CreateSiteResponse");

export { SiteHealthSchema as SiteHealth } from "../../shared/hub-contract";

export const RoleSchema = z.enum(ROLES);

export const Member = z
  .object({
    user_id: z.number().int(),
    email: z.string().optional().openapi({ description: "Shown to owners (of the site or tenant) and administrators only" }),
    username: z.string(),
    role: RoleSchema,
    created_at: z.string(),
  })
  .openapi("Member");

export const MemberList = z.object({ members: z.array(Member) }).openapi("MemberList");

export const AddMemberBody = z
  .object({
    email: z.email().max(254).optional().openapi({ description: "Invite this address: the answer carries a one-time code the invitee accepts from an account with this address" }),
    user_id: z.number().int().positive().optional().openapi({ description: "Administrators: add this user now. Owners: change the role of an existing member" }),
    role: RoleSchema,
  })
  .refine((b) => (b.email === undefined) !== (b.user_id === undefined), { message: "Give exactly one of email or user_id" })
  .openapi("AddMemberRequest");

export const Invitation = z
  .object({
    invitation_id: z.string(),
    email: z.string().openapi({ description: "As invited, in lower case" }),
    role: RoleSchema.openapi({ description: "Granted at least this role when accepted (an invitation never lowers a role)" }),
    invited_by: z.number().int().nullable(),
    created_at: z.string(),
    expires_at: z.string().openapi({ description: "Not accepted after this (7 days after the last invitation of this address)" }),
  })
  .openapi("Invitation");

export const InvitationIssued = Invitation
  .extend({
    invitation_code: z.string().openapi({
      description: "Shown this once and stored only as a digest: give it to the invitee, who accepts with `POST /api/v1/invitations/accept` from an account with the invited address. Inviting the address again issues a new code and voids this one.",
    }),
  })
  .openapi("InvitationIssued");

export const InvitationList = z.object({ invitations: z.array(Invitation) }).openapi("InvitationList");

export const InvitationParams = SiteParams.extend({
  invitation_id: z.uuid().openapi({ param: { name: "invitation_id", in: "path" } }),
});

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

export const toSiteDetail = (s: Parameters<typeof toSiteListItem>[0] & { isActive: boolean; tenantId: string | null; updatedAt: string; timeZone: string }) => ({
  ...toSiteListItem(s),
  is_active: s.isActive,
  tenant_id: s.tenantId,
  updated_at: s.updatedAt,
  time_zone: s.timeZone,
});
