import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import type { AppEnv } from "../../env";
import type { Context } from "hono";
import { recordAudit } from "../../services/audit";
import { pendingInvitations, revokeInvitation, toInvitation, toIssuedInvitation } from "../../services/invitations";
import {
  addTenantMember, createTenant, listTenantMembers, listTenants, removeMemberFromTenant,
} from "../../services/tenants";
import { LIVE_REVOKED_CLOSE_CODE } from "../../shared/hub-contract";
import { AddMemberBody, Invitation, InvitationIssued, InvitationList, Member, MemberList } from "../sites/schema";
import { authorizeTenant } from "../../services/access";

const TAGS = ["Tenants"];

const Tenant = z.object({ tenant_id: z.string(), name: z.string(), created_at: z.string() }).openapi("Tenant");
const TenantParams = z.object({ tenant_id: lineText().min(1).max(64).openapi({ param: { name: "tenant_id", in: "path" } }) });
const TenantMemberParams = TenantParams.extend({
  user_id: z.coerce.number().int().positive().openapi({ param: { name: "user_id", in: "path" } }),
});
const TenantInvitationParams = TenantParams.extend({
  invitation_id: z.uuid().openapi({ param: { name: "invitation_id", in: "path" } }),
});
const CreateTenantBody = z
  .object({
    tenant_id: z.string().min(1).max(64).regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/).optional(),
    name: lineText().trim().min(1).max(200),
  })
  .openapi("CreateTenantRequest");

const toTenant = (t: { tenantId: string; name: string; createdAt: string }) => ({ tenant_id: t.tenantId, name: t.name, created_at: t.createdAt });

/** Tenants group sites; a tenant role applies to every site of the tenant. Administrators create tenants. */
export const tenantRoutes = newRouter();

tenantRoutes.openapi(
  apiRoute({
    method: "get", path: "/", auth: "admin", tags: TAGS, summary: "List tenants (administrators)",
    responses: { 200: jsonResponse(z.object({ tenants: z.array(Tenant) }), "Tenants") },
  }),
  async (c) => c.json({ tenants: (await listTenants(c.var.db)).map(toTenant) }, 200),
);

tenantRoutes.openapi(
  apiRoute({
    method: "post", path: "/", auth: "admin", tags: TAGS, summary: "Create a tenant (administrators)",
    request: jsonBody(CreateTenantBody),
    responses: { 201: jsonResponse(Tenant, "Tenant created") },
    errors: [409],
  }),
  async (c) => {
    const tenant = await createTenant(c.var.db, c.req.valid("json"));
    await recordAudit(c.var.db, { eventType: "tenant_created", description: `Tenant ${tenant.tenantId} created`, userId: c.var.user!.id, metadata: { tenant_id: tenant.tenantId }, request: c.req.raw });
    return c.json(toTenant(tenant), 201);
  },
);

/** The tenant exists and the caller owns it (administrators own every tenant). */
async function requireTenantOwner(c: Context<AppEnv>, tenantId: string) {
  await authorizeTenant(c.var.db, c.var.user!, tenantId, "owner");
}

tenantRoutes.openapi(
  apiRoute({
    method: "get", path: "/{tenant_id}/members", auth: "user", tags: TAGS, summary: "List a tenant's members (tenant members and administrators)",
    description: "E-mail addresses are listed for the tenant's owners and administrators only; other members see user ids and usernames.",
    request: { params: TenantParams },
    responses: { 200: jsonResponse(MemberList, "Members") },
    errors: [404],
  }),
  async (c) => {
    const { tenant_id } = c.req.valid("param");
    const { role } = await authorizeTenant(c.var.db, c.var.user!, tenant_id, "viewer");
    return c.json({ members: await listTenantMembers(c.var.db, tenant_id, { withEmails: role === "owner" }) }, 200);
  },
);

tenantRoutes.openapi(
  apiRoute({
    method: "post", path: "/{tenant_id}/members", auth: "user", tags: TAGS, summary: "Invite someone to a tenant role by e-mail, or set a member's tenant role (tenant owner or administrator)",
    description: [
      "The role applies to every site of the tenant.",
      "By `email`: an invitation (202), answered the same whether or not an account has that address, with an `invitation_code` shown this once: the invitee accepts it with `POST /api/v1/invitations/accept` from an account with that address within 7 days (an address an OpenID Connect provider verified collects it at sign-in). It grants at least `role`, never less than the user has. By `user_id` (201): administrators add any user; a tenant owner may only change the role of an existing tenant member (anything else is 403, whether or not the user exists).",
      "A lowered role takes effect on the member's open live connections to the tenant's sites at once.",
    ].join("\n\n"),
    request: { params: TenantParams, ...jsonBody(AddMemberBody) },
    responses: {
      201: jsonResponse(Member, "Membership (by user_id)"),
      202: jsonResponse(InvitationIssued, "Invitation stored, with its code (by email)"),
    },
    errors: [403, 404],
  }),
  async (c) => {
    const { tenant_id } = c.req.valid("param");
    await requireTenantOwner(c, tenant_id);
    const added = await addTenantMember(c.var.db, c.env, c.var.user!, tenant_id, c.req.valid("json"), c.req.raw);
    if (added.invitation) return c.json(toIssuedInvitation(added.invitation), 202);
    return c.json(added.member, 201);
  },
);

tenantRoutes.openapi(
  apiRoute({
    method: "delete", path: "/{tenant_id}/members/{user_id}", auth: "user", tags: TAGS, summary: "Remove a tenant member (tenant owner or administrator)",
    description: `The member's open WebSocket and event-stream subscriptions to the tenant's sites are closed at once (close code ${LIVE_REVOKED_CLOSE_CODE}), except on sites where a site role still lets them read.`,
    request: { params: TenantMemberParams },
    responses: { 200: jsonResponse(Member.pick({ user_id: true, role: true }), "Removed membership") },
    errors: [403, 404],
  }),
  async (c) => {
    const { tenant_id, user_id } = c.req.valid("param");
    await requireTenantOwner(c, tenant_id);
    const removed = await removeMemberFromTenant(c.var.db, c.env, c.var.user!, tenant_id, user_id, c.req.raw);
    return c.json({ user_id, role: removed.role }, 200);
  },
);

tenantRoutes.openapi(
  apiRoute({
    method: "get", path: "/{tenant_id}/invitations", auth: "user", tags: TAGS, summary: "List pending tenant invitations (tenant owner or administrator)",
    description: "Invitations not yet applied and not expired, newest first.",
    request: { params: TenantParams },
    responses: { 200: jsonResponse(InvitationList, "Pending invitations") },
    errors: [403, 404],
  }),
  async (c) => {
    const { tenant_id } = c.req.valid("param");
    await requireTenantOwner(c, tenant_id);
    return c.json({ invitations: (await pendingInvitations(c.var.db, "tenant", tenant_id)).map(toInvitation) }, 200);
  },
);

tenantRoutes.openapi(
  apiRoute({
    method: "delete", path: "/{tenant_id}/invitations/{invitation_id}", auth: "user", tags: TAGS, summary: "Revoke a pending tenant invitation (tenant owner or administrator)",
    description: "The invitation is deleted and will not be applied. Unknown (or already applied) → 404.",
    request: { params: TenantInvitationParams },
    responses: { 200: jsonResponse(Invitation, "The revoked invitation") },
    errors: [403, 404],
  }),
  async (c) => {
    const { tenant_id, invitation_id } = c.req.valid("param");
    await requireTenantOwner(c, tenant_id);
    return c.json(toInvitation(await revokeInvitation(c.var.db, "tenant", tenant_id, invitation_id, c.var.user!, c.req.raw)), 200);
  },
);
