import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedSite } from "../../middleware/access";
import { pendingInvitations, revokeInvitation, toInvitation, toIssuedInvitation } from "../../services/invitations";
import { addSiteMember, listMembers, removeMemberFromSite } from "../../services/sites";
import { LIVE_REVOKED_CLOSE_CODE } from "../../shared/hub-contract";
import * as s from "./schema";

const TAGS = ["Site members"];

/**
 * Site membership management: viewers read, owners change (roles rank viewer < operator < owner;
 * see src/services/access.ts). Adding by e-mail is an invitation (src/services/invitations.ts).
 */
export const siteMemberRoutes = newRouter();

siteMemberRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/{site_id}/members",
    auth: "user", access: { site: "viewer" },
    tags: TAGS,
    summary: "List a site's members",
    description: "Viewer role. E-mail addresses are listed for the site's owners (including owners through the tenant) and administrators only; everyone else sees user ids and usernames.",
    request: { params: s.SiteParams },
    responses: { 200: jsonResponse(s.MemberList, "Members") },
    errors: [404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const { role } = grantedSite(c);
    return c.json({ members: await listMembers(c.var.db, site_id, { withEmails: role === "owner" }) }, 200);
  },
);

siteMemberRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/{site_id}/members",
    auth: "user", access: { site: "owner" },
    tags: TAGS,
    summary: "Invite someone by e-mail, or set a member's role (owner)",
    description: [
      "By `email`: an invitation (202). The answer is the same whether or not an account has that address, and nothing changes until the invitee accepts: the answer carries an `invitation_code`, shown this once, to give to the invitee, who accepts with `POST /api/v1/invitations/accept` from an account with that address (compared case-insensitively) within 7 days. The service does not verify the addresses of password accounts, so the address alone collects nothing; an address an OpenID Connect provider verified collects its invitations at sign-in. It grants at least `role` and never lowers a role the user already has. Inviting the same address again replaces the role, restarts the 7 days and voids the earlier code. Pending invitations are listed and revoked under `…/invitations`.",
      "By `user_id` (201): administrators add any user; an owner may only change the role of a user who is already a member of the site (anything else is 403, whether or not the user exists). Demoting the site's last owner is refused (400).",
      "A lowered role takes effect on the member's open live connections at once.",
    ].join("\n\n"),
    request: { params: s.SiteParams, ...jsonBody(s.AddMemberBody) },
    responses: {
      201: jsonResponse(s.Member, "Membership (by user_id)"),
      202: jsonResponse(s.InvitationIssued, "Invitation stored, with its code (by email)"),
    },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const added = await addSiteMember(c.var.db, c.env, c.var.user!, site_id, c.req.valid("json"), c.req.raw);
    if (added.invitation) return c.json(toIssuedInvitation(added.invitation), 202);
    return c.json(added.member, 201);
  },
);

siteMemberRoutes.openapi(
  apiRoute({
    method: "delete",
    path: "/{site_id}/members/{user_id}",
    auth: "user", access: { site: "owner" },
    tags: TAGS,
    summary: "Remove a member (owner)",
    description: `The last owner of a site cannot be removed (400). The member's open WebSocket and event-stream subscriptions to the site are closed at once (close code ${LIVE_REVOKED_CLOSE_CODE}), unless a tenant role still lets them read it.`,
    request: { params: s.MemberParams },
    responses: { 200: jsonResponse(s.Member.pick({ user_id: true, role: true }), "Removed membership") },
    errors: [400, 403, 404],
  }),
  async (c) => {
    const { site_id, user_id } = c.req.valid("param");
    const removed = await removeMemberFromSite(c.var.db, c.env, c.var.user!, site_id, user_id, c.req.raw);
    return c.json({ user_id, role: removed.role }, 200);
  },
);

siteMemberRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/{site_id}/invitations",
    auth: "user", access: { site: "owner" },
    tags: TAGS,
    summary: "List pending invitations (owner)",
    description: "Invitations not yet applied and not expired, newest first. An applied invitation is gone from here and its user is in the member list.",
    request: { params: s.SiteParams },
    responses: { 200: jsonResponse(s.InvitationList, "Pending invitations") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    return c.json({ invitations: (await pendingInvitations(c.var.db, "site", site_id)).map(toInvitation) }, 200);
  },
);

siteMemberRoutes.openapi(
  apiRoute({
    method: "delete",
    path: "/{site_id}/invitations/{invitation_id}",
    auth: "user", access: { site: "owner" },
    tags: TAGS,
    summary: "Revoke a pending invitation (owner)",
    description: "The invitation is deleted and will not be applied. Unknown (or already applied) → 404.",
    request: { params: s.InvitationParams },
    responses: { 200: jsonResponse(s.Invitation, "The revoked invitation") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id, invitation_id } = c.req.valid("param");
    return c.json(toInvitation(await revokeInvitation(c.var.db, "site", site_id, invitation_id, c.var.user!, c.req.raw)), 200);
  },
);
