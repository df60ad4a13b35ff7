import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedJob } from "../../middleware/access";
import { cancelJob, createJob, listJobs, readJob } from "../../services/jobs";
import * as s from "./schema";
import type { MountOptions } from "../mount";

const TAGS = ["Jobs"];

const LIFECYCLE = "`queued → sent → completed | failed | cancelled | timeout`. Within a second or two the site's hub sends the job: `started_at`, `segment`, `config_url` and `config_version` are filled and one command per target device is queued (simulated agents run theirs in the hub; real devices poll them). It completes when every target has reported: `completed` when all succeeded, else `failed` with `result` `{total, succeeded, failed, cancelled, pending}` and a summary in `error_message`; at its deadline it is `timeout`. A job with no matching device completes at once with a result saying so. Every transition is audited (job_created, job_started, job_completed, job_failed, job_cancelled, job_timeout), recorded as a job outcome and published on the site's live channel as `job.updated`.";

const IDEMPOTENCY = "With an `Idempotency-Key` header, retrying is safe: the same key on the same site with the same body (compared as JSON, whatever the key order) creates nothing and answers 201 with the same body as the first time, including `status: queued` (read the job for its current state), and the header `Idempotent-Replayed: true`; the same key with a different body is 422. Keys are kept as long as the job.";

/** `POST /api/v1/jobs/sites/{site_id}/jobs` and the deprecated `/sites/{site_id}/jobs`. */
export function siteJobRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "post", path: "/{site_id}/jobs", auth: "user", access: { site: "operator" }, deprecated, tags: TAGS,
      summary: "Create a job for a site (operator)",
      description: `Targets every active device of the site, or \`target_device_ids\`, or the devices of \`device_type\`. ${IDEMPOTENCY} ${LIFECYCLE}`,
      request: { params: s.SiteParams, headers: s.JobIdempotencyHeaders, ...jsonBody(s.CreateJobBody) },
      responses: {
        201: {
          ...jsonResponse(s.CreateJobResponse, "Queued; for a repeated Idempotency-Key, the same answer as the first time"),
          headers: s.JobCreatedHeaders,
        },
      },
      errors: [403, 404],
    }),
    async (c) => {
      const { site_id } = c.req.valid("param");
      const { job, created } = await createJob(c.env, c.var.db, c.var.user!, site_id, c.req.valid("json"), c.req.valid("header")["idempotency-key"], c.req.raw);
      if (!created) c.header("Idempotent-Replayed", "true");
      return c.json({ message: "Job created successfully", job_id: job.jobId, site_id: job.siteId, action: job.action, status: "queued" as const }, 201);
    },
  );

  return app;
}

/** `/api/v1/jobs` and the deprecated `/jobs`. */
export function jobRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/", auth: "user", access: { site: "viewer", from: "query" }, deprecated, tags: TAGS,
      summary: "List jobs, newest first",
      description: "Jobs of the sites the caller can read (administrators: all), optionally of one `site_id` (404 when the site is unknown or not visible to the caller) and one `status`; paged with `limit` (default 50, max 500) and `offset`, with `total`.",
      request: { query: s.JobListQuery },
      responses: { 200: jsonResponse(s.JobList, "Jobs") },
      errors: [404],
    }),
    async (c) => {
      const q = c.req.valid("query");
      const { rows, total } = await listJobs(c.var.db, c.var.user!, { siteId: q.site_id, status: q.status, limit: q.limit, offset: q.offset });
      return c.json({ jobs: rows.map(s.toJob), total, limit: q.limit, offset: q.offset }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{job_id}", auth: "user", access: { job: "viewer" }, deprecated, tags: TAGS,
      summary: "A job with its per-device executions",
      description: `The Job object plus \`counts\` and \`executions\` (one per target device: its command, status, result). Viewer role on the job's site. Executions follow their commands within about a second. ${LIFECYCLE}`,
      request: { params: s.JobParams },
      responses: { 200: jsonResponse(s.JobDetail, "The job") },
      errors: [404],
    }),
    async (c) => {
      const { job, executions } = await readJob(c.var.db, grantedJob(c));
      return c.json(s.toJobDetail(job, executions), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{job_id}/cancel", auth: "user", access: { job: "operator" }, deprecated, tags: TAGS,
      summary: "Cancel a job (operator)",
      description: "Only while `queued` or `sent`: the job becomes `cancelled` (audited as job_cancelled) and every open command of it is cancelled, so devices that poll no longer get them and a late result is refused. Cancelling a cancelled job answers it again; a finished one is 409.",
      request: { params: s.JobParams },
      responses: { 200: jsonResponse(s.JobDetail, "The cancelled job") },
      errors: [403, 404, 409],
    }),
    async (c) => {
      const { job, executions } = await cancelJob(c.env, c.var.db, c.var.user!, grantedJob(c));
      return c.json(s.toJobDetail(job, executions), 200);
    },
  );

  return app;
}
