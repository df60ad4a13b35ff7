/**
 * A device's own histories for operators: its audit events, the jobs that targeted it and how its
 * part went, and the errors reported about it. Each is one device's rows read through an index on
 * the device, newest first, paged with `limit` and `offset`, with the total.
 */
import { desc, eq, sql } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs, errorLogs, jobExecutions, jobs } from "../db/schema";

export interface Page { limit: number; offset: number }

export async function deviceAuditEvents(db: Db, deviceId: string, page: Page) {
  const where = eq(auditLogs.deviceId, deviceId);
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(auditLogs).where(where).orderBy(desc(auditLogs.createdAt), desc(auditLogs.id)).limit(page.limit).offset(page.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(auditLogs).where(where).all(),
  ]);
  return { rows, total };
}

/** Jobs that targeted the device, with its own execution of each (status, command, error). */
export async function deviceJobExecutions(db: Db, deviceId: string, page: Page) {
  const where = eq(jobExecutions.deviceId, deviceId);
  const [rows, [{ total }]] = await Promise.all([
    db.select({ execution: jobExecutions, job: jobs }).from(jobExecutions).innerJoin(jobs, eq(jobs.jobId, jobExecutions.jobId))
      .where(where).orderBy(desc(jobExecutions.createdAt), desc(jobExecutions.id)).limit(page.limit).offset(page.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(jobExecutions).innerJoin(jobs, eq(jobs.jobId, jobExecutions.jobId)).where(where).all(),
  ]);
  return { rows, total };
}

/** Errors whose report names the device in its context (`context.device_id`). */
export async function deviceErrors(db: Db, deviceId: string, page: Page) {
  const where = sql`json_extract(${errorLogs.context}, '$.device_id') = ${deviceId}`;
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(errorLogs).where(where).orderBy(desc(errorLogs.createdAt), desc(errorLogs.id)).limit(page.limit).offset(page.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(errorLogs).where(where).all(),
  ]);
  return { rows, total };
}
