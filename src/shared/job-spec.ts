import type { jobs } from "../db/schema";
import type { JobSpec } from "./hub-contract";
import { DEFAULT_JOB_DEADLINE_S } from "./vocabulary";

/** What a hub needs to run a job: a copy of its D1 row (the Worker hands it over; a hub re-adopts it). */
export function specFromRow(job: typeof jobs.$inferSelect): JobSpec {
  return {
    jobId: job.jobId,
    action: job.action,
    description: job.description,
    priority: job.priority,
    targetDeviceIds: (job.targetDeviceIds as string[] | null) ?? null,
    deviceType: job.deviceType,
    configUrl: job.configUrl,
    configVersion: job.configVersion,
    createdBy: job.createdBy,
    createdAt: job.createdAt,
    deadlineAt: job.deadlineAt ?? new Date(Date.parse(job.createdAt) + DEFAULT_JOB_DEADLINE_S * 1000).toISOString(),
    segment: job.segment ?? undefined,
    startedAt: job.startedAt ?? undefined,
    payload: (job.payload as Record<string, unknown> | null) ?? null,
  };
}
