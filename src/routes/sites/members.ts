import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { authorizeSite } from "../../services/access";
import { recordAudit } from "../../services/audit";
import { listMembers, removeSiteMember, resolveMemberUser, upsertSiteMember } from "../../services/sites";
import * as s from "./schema";

const TAGS = ["Site members"];

/** Site membership management: viewers read, owners change (roles rank viewer < operator < owner; see src/services/access.ts). */
export const siteMemberRoutes = newRouter();

siteMemberRoutes.openapi(
  apiRoute({
    method: "get",
    path: "/{site_id}/members",
    auth: "user",
    tags: TAGS,
    summary: "List a site's members",
    request: { params: s.SiteParams },
    responses: { 200: jsonResponse(s.MemberList, "Members") },
    errors: [404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    await authorizeSite(c.var.db, c.var.user!, site_id, "viewer", c.req.raw);
    return c.json({ members: await listMembers(c.var.db, site_id) }, 200);
  },
);

siteMemberRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/{site_id}/members",
    auth: "user",
    tags: TAGS,
    summary: "Grant a user a role on the site (owner)",
    description: "Adds the user identified by `email` or `user_id`, or changes their role when already a member. Demoting the site's last owner is refused (400).",
    request: { params: s.SiteParams, ...jsonBody(s.AddMemberBody) },
    responses: { 201: jsonResponse(s.Member, "Membership") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const db = c.var.db;
    await authorizeSite(db, c.var.user!, site_id, "owner", c.req.raw);
    const user = await resolveMemberUser(db, body);
    const membership = await upsertSiteMember(db, site_id, user.id, body.role);
    await recordAudit(db, {
      eventType: "site_member_added",
      description: `${user.email} granted ${body.role} on ${site_id}`,
      userId: c.var.user!.id,
      siteId: site_id,
      metadata: { member_user_id: user.id, role: body.role },
      request: c.req.raw,
    });
    return c.json({ user_id: user.id, email: user.email, username: user.username, role: membership.role, created_at: membership.createdAt }, 201);
  },
);

siteMemberRoutes.openapi(
  apiRoute({
    method: "delete",
    path: "/{site_id}/members/{user_id}",
    auth: "user",
    tags: TAGS,
    summary: "Remove a member (owner)",
    description: "The last owner of a site cannot be removed (400).",
    request: { params: s.MemberParams },
    responses: { 200: jsonResponse(s.Member.pick({ user_id: true, role: true }), "Removed membership") },
    errors: [400, 403, 404],
  }),
  async (c) => {
    const { site_id, user_id } = c.req.valid("param");
    const db = c.var.db;
    await authorizeSite(db, c.var.user!, site_id, "owner", c.req.raw);
    const removed = await removeSiteMember(db, site_id, user_id);
    await recordAudit(db, {
      eventType: "site_member_removed",
      description: `User ${user_id} removed from ${site_id}`,
      userId: c.var.user!.id,
      siteId: site_id,
      metadata: { member_user_id: user_id, role: removed.role },
      request: c.req.raw,
    });
    return c.json({ user_id, role: removed.role }, 200);
  },
);
