import { api, enc, type JobDetail } from "../api";
import { BASE, canOperate, confirmAction, errorBox, heading, link, perform, roleOn, type Session } from "../app";
import { ago, h, replace } from "../dom";
import { channelPosition, LiveChannel } from "../live";

const FINAL = new Set(["completed", "failed", "cancelled", "timeout"]);

/** A job and its executions, one per device, following the site's live channel. */
export async function jobView(main: HTMLElement, session: Session, jobId: string, signal: AbortSignal) {
  heading(main, "Job", h("p", { class: "muted" }, "Loading…"));
  let job: JobDetail, position: number;
  try {
    job = await api<JobDetail>(`/api/v1/jobs/${enc(jobId)}`);
    position = await channelPosition(job.site_id);
    // Read again after taking the channel's position, so a change in between is replayed, not lost.
    job = await api<JobDetail>(`/api/v1/jobs/${enc(jobId)}`);
  } catch (error) {
    heading(main, "Job", errorBox(error));
    return;
  }
  const operate = canOperate(await roleOn(session, job.site_id).catch(() => "viewer" as const));
  if (signal.aborted) return;

  const summary = h("p", { id: "job-summary", "aria-live": "polite" });
  const executions = h("tbody", { id: "executions" });
  const cancel = operate ? h("button", { type: "button", class: "danger", onclick: async () => {
    if (!(await confirmAction(`Cancel job ${job.action}? Commands not yet run are cancelled.`, "Cancel job"))) return;
    if (await perform(() => api(`/api/v1/jobs/${enc(jobId)}/cancel`, { method: "POST" }), "Job cancelled")) await refresh();
  } }, "Cancel job") : null;

  const draw = () => {
    const c = job.counts;
    replace(summary, h("span", { class: `status status-${job.status}`, "data-status": job.status }, job.status),
      ` · ${c.succeeded} succeeded, ${c.failed} failed, ${c.cancelled} cancelled, ${c.pending} pending of ${c.total}`);
    if (cancel) cancel.hidden = FINAL.has(job.status);
    replace(executions, job.executions.length === 0
      ? h("tr", {}, h("td", { colspan: 4, class: "empty" }, "No executions yet: the job reaches the site's devices within a few seconds (none, if no device matches)."))
      : job.executions.map((e) => h("tr", { "data-device": e.device_id },
        h("td", {}, link(`${BASE}/device?device_id=${enc(e.device_id)}`, e.device_id)),
        h("td", {}, h("span", { class: `status status-${e.status}`, "data-status": e.status }, e.status)),
        h("td", {}, e.completed_at ? ago(e.completed_at) : "—"),
        h("td", {}, e.error_message ?? ""))));
  };
  let pending: number | undefined;
  const refresh = async () => {
    job = await api<JobDetail>(`/api/v1/jobs/${enc(jobId)}`);
    draw();
  };

  heading(main, `Job: ${job.action}`,
    h("p", { class: "muted" }, job.job_id, " · site ", link(`${BASE}/site?site_id=${enc(job.site_id)}`, job.site_id), ` · created ${new Date(job.created_at).toLocaleString()}${job.created_by ? ` by ${job.created_by}` : ""}`),
    job.description ? h("p", {}, job.description) : null,
    summary, cancel,
    h("table", { class: "plain" }, h("thead", {}, h("tr", {}, ["Device", "Status", "Finished", "Error"].map((c) => h("th", { scope: "col" }, c)))), executions));
  draw();

  // Many executions finish at once: coalesce their events into one re-read.
  const channel = new LiveChannel(job.site_id, (event) => {
    const data = (event.data ?? {}) as Record<string, unknown>;
    const ours = (event.type === "job.updated" && data.job_id === jobId)
      || (event.type === "command.updated" && (data.job_id === jobId || job.executions.some((e) => e.command_id === data.command_id)));
    if (ours) {
      pending ??= window.setTimeout(() => { pending = undefined; void refresh().catch(() => undefined); }, 300);
    }
  }, () => undefined, () => void refresh());
  channel.start(position);
  // A safety net while the job runs: its fan-out to new commands is not itself an event.
  const poll = window.setInterval(() => { if (!FINAL.has(job.status)) void refresh().catch(() => undefined); }, 5_000);
  signal.addEventListener("abort", () => { channel.close(); clearTimeout(pending); clearInterval(poll); });
}
