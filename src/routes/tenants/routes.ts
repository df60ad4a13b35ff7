import { z } from "@hono/zod-openapi";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { recordAudit } from "../../services/audit";
import { authorizeTenant } from "../../services/access";
import { resolveMemberUser } from "../../services/sites";
import { createTenant, listTenantMembers, listTenants, removeTenantMember, upsertTenantMember } from "../../services/tenants";
import { AddMemberBody, Member, MemberList } from "../sites/schema";

const TAGS = ["Tenants"];

const Tenant = z.object({ tenant_id: z.string(), name: z.string(), created_at: z.string() }).openapi("Tenant");
const TenantParams = z.object({ tenant_id: z.string().min(1).max(64).openapi({ param: { name: "tenant_id", in: "path" } }) });
const TenantMemberParams = TenantParams.extend({
  user_id: z.coerce.number().int().positive().openapi({ param: { name: "user_id", in: "path" } }),
});
const CreateTenantBody = z
  .object({
    tenant_id: z.string().min(1).max(64).regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/).optional(),
    name: z.string().trim().min(1).max(200),
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

tenantRoutes.openapi(
  apiRoute({
    method: "get", path: "/{tenant_id}/members", auth: "user", tags: TAGS, summary: "List a tenant's members (tenant members and administrators)",
    request: { params: TenantParams },
    responses: { 200: jsonResponse(MemberList, "Members") },
    errors: [404],
  }),
  async (c) => {
    const { tenant_id } = c.req.valid("param");
    await authorizeTenant(c.var.db, c.var.user!, tenant_id, "viewer");
    return c.json({ members: await listTenantMembers(c.var.db, tenant_id) }, 200);
  },
);

tenantRoutes.openapi(
  apiRoute({
    method: "post", path: "/{tenant_id}/members", auth: "user", tags: TAGS, summary: "Grant a tenant-level role (tenant owner or administrator)",
    description: "The role applies to every site of the tenant.",
    request: { params: TenantParams, ...jsonBody(AddMemberBody) },
    responses: { 201: jsonResponse(Member, "Membership") },
    errors: [403, 404],
  }),
  async (c) => {
    const { tenant_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const db = c.var.db;
    await authorizeTenant(db, c.var.user!, tenant_id, "owner");
    const user = await resolveMemberUser(db, body);
    const m = await upsertTenantMember(db, tenant_id, user.id, body.role);
    await recordAudit(db, { eventType: "tenant_member_added", description: `${user.email} granted ${body.role} on tenant ${tenant_id}`, userId: c.var.user!.id, metadata: { tenant_id, member_user_id: user.id, role: body.role }, request: c.req.raw });
    return c.json({ user_id: user.id, email: user.email, username: user.username, role: m.role, created_at: m.createdAt }, 201);
  },
);

tenantRoutes.openapi(
  apiRoute({
    method: "delete", path: "/{tenant_id}/members/{user_id}", auth: "user", tags: TAGS, summary: "Remove a tenant member (tenant owner or administrator)",
    request: { params: TenantMemberParams },
    responses: { 200: jsonResponse(Member.pick({ user_id: true, role: true }), "Removed membership") },
    errors: [403, 404],
  }),
  async (c) => {
    const { tenant_id, user_id } = c.req.valid("param");
    const db = c.var.db;
    await authorizeTenant(db, c.var.user!, tenant_id, "owner");
    const removed = await removeTenantMember(db, tenant_id, user_id);
    await recordAudit(db, { eventType: "tenant_member_removed", description: `User ${user_id} removed from tenant ${tenant_id}`, userId: c.var.user!.id, metadata: { tenant_id, member_user_id: user_id }, request: c.req.raw });
    return c.json({ user_id, role: removed.role }, 200);
  },
);
