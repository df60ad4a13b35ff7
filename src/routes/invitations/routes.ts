import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { acceptInvitationByCode } from "../../services/invitations";
import { RoleSchema } from "../sites/schema";

const AcceptInvitationBody = z
  .object({
    invitation_code: z.string().min(1).max(200).openapi({ description: "The code the inviter was given when inviting your address" }),
  })
  .openapi("AcceptInvitationRequest");

const AcceptedInvitation = z
  .object({
    invitation_id: z.string(),
    scope: z.enum(["site", "tenant"]),
    site_id: z.string().nullable().openapi({ description: "The site joined (scope `site`)" }),
    tenant_id: z.string().nullable().openapi({ description: "The tenant joined (scope `tenant`): the role applies to each of its sites" }),
    role: RoleSchema.openapi({ description: "The role the invitation grants; a higher role the account already had is kept" }),
  })
  .openapi("AcceptedInvitation");

/** `/api/v1/invitations`: the invitee's side of membership by e-mail (docs/security.md). */
export const invitationRoutes = newRouter();

invitationRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/accept",
    auth: "user",
    tags: ["Site members"],
    summary: "Accept an invitation with its code",
    description: "Joins the site or tenant the code was issued for, from the signed-in account, which must have the invited e-mail address (compared case-insensitively; another address is 403 and changes nothing). An unknown, expired, revoked or already used code is 404. The code works once; the membership and its `site_member_added` / `tenant_member_added` audit row are written together.",
    request: jsonBody(AcceptInvitationBody),
    responses: { 200: jsonResponse(AcceptedInvitation, "Accepted: the account is now a member") },
    errors: [403, 404],
  }),
  async (c) => {
    const { invitation_code } = c.req.valid("json");
    const invitation = await acceptInvitationByCode(c.var.db, c.var.user!, invitation_code, c.req.raw);
    return c.json({
      invitation_id: invitation.invitationId,
      scope: invitation.scope,
      site_id: invitation.scope === "site" ? invitation.targetId : null,
      tenant_id: invitation.scope === "tenant" ? invitation.targetId : null,
      role: invitation.role,
    }, 200);
  },
);
