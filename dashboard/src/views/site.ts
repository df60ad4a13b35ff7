import { api, enc, type Device, type Job, type Role, type Site } from "../api";
import { BASE, canOperate, confirmAction, errorBox, heading, link, perform, roleOn, type Session } from "../app";
import { healthChart, sparkline, type Band } from "../charts";
import { VirtualTable } from "../grid";
import { ago, h, replace } from "../dom";
import { channelPosition, LiveChannel, type LiveEvent } from "../live";

const ROW_HEIGHT = 40;
const SPARK_POINTS = 20;
const CHART_POINTS = 120;
const AGENT_PAGE = 500;

interface Row extends Device { agent?: string; cpu: number[] }

/**
 * A site: its devices in a live grid (the site's live channel), filters and search, the health chart,
 * and its jobs. Write actions are drawn only for operators and owners.
 */
export async function siteView(main: HTMLElement, session: Session, siteId: string, signal: AbortSignal) {
  heading(main, siteId, h("p", { class: "muted" }, "Loading…"));
  let site: Site, role: Role, devices: Device[], jobs: Job[], position: number;
  try {
    position = await channelPosition(siteId);
    [site, role, devices, jobs] = await Promise.all([
      api<Site>(`/api/v1/sites/${enc(siteId)}`),
      roleOn(session, siteId),
      api<Device[]>(`/api/v1/devices/sites/${enc(siteId)}/devices`),
      api<{ jobs: Job[] }>(`/api/v1/jobs?site_id=${enc(siteId)}&limit=20`).then((r) => r.jobs),
    ]);
  } catch (error) {
    heading(main, siteId, errorBox(error));
    return;
  }
  if (signal.aborted) return;
  const operate = canOperate(role);
  const rows = new Map<string, Row>(devices.map((d) => [d.device_id, { ...d, cpu: [] }]));
  // Agent states as of now; agent.state events keep them current.
  const loadAgents = async () => {
    for (let offset = 0; ; offset += AGENT_PAGE) {
      const page = await api<{ agents: { device_id: string; state: string }[]; total: number }>(`/api/v1/agents?site_id=${enc(siteId)}&limit=${AGENT_PAGE}&offset=${offset}`);
      for (const a of page.agents) { const r = rows.get(a.device_id); if (r) r.agent = a.state; }
      if (offset + AGENT_PAGE >= page.total || signal.aborted) return;
    }
  };

  // ---- header: live state, counts, chart ----
  const liveBadge = h("span", { class: "badge", id: "live-state", "aria-live": "polite" }, "connecting");
  const counts = h("p", { class: "counts-line", id: "site-counts" });
  const bands: Band[] = [];
  const chartBox = h("figure", { class: "chart" }, h("figcaption", {}, "Devices online (green), in error (red) and offline (grey) since this page opened"));

  // ---- filters ----
  const search = h("input", { id: "device-search", type: "search", placeholder: "name or id" });
  const statusFilter = h("select", { id: "status-filter" },
    ["all", "online", "offline", "error", "unknown"].map((s) => h("option", { value: s }, s)));
  const filters = h("div", { class: "filters" },
    h("label", { for: "device-search" }, "Search devices"), search,
    h("label", { for: "status-filter" }, "Status"), statusFilter);

  const empty = h("p", { class: "empty", hidden: true });
  const table = new VirtualTable<Row>(["Device", "Status", "Lifecycle", "Agent", "Last seen", "CPU", operate ? "Actions" : ""], ROW_HEIGHT, (row) => deviceRow(row), `Devices of ${site.name}`);

  const deviceRow = (row: Row) => h("tr", { "data-device": row.device_id },
    h("td", {}, link(`${BASE}/device?device_id=${enc(row.device_id)}`, row.name), h("span", { class: "muted id" }, ` ${row.device_id}`)),
    h("td", {}, h("span", { class: `status status-${row.status}`, "data-status": row.status }, row.status)),
    h("td", {}, row.lifecycle_state),
    h("td", {}, row.agent ?? "—"),
    h("td", {}, ago(row.last_seen)),
    h("td", {}, sparkline(row.cpu, `CPU of ${row.name}`)),
    h("td", {}, operate && row.lifecycle_state === "active"
      ? h("button", { type: "button", class: "small", onclick: () => void restart(row) }, "Restart", h("span", { class: "visually-hidden" }, ` ${row.name}`))
      : ""));

  const restart = async (row: Row) => {
    if (!(await confirmAction(`Restart ${row.name} (${row.device_id})? It receives the command at its next poll.`, "Restart"))) return;
    await perform(() => api(`/api/v1/devices/${enc(row.device_id)}/commands`, { method: "POST", body: { command_type: "restart" } }), `Restart queued for ${row.name}`);
  };

  const redraw = () => {
    const term = search.value.trim().toLowerCase();
    const wanted = statusFilter.value;
    const all = [...rows.values()];
    const shown = all.filter((r) => (wanted === "all" || r.status === wanted) && (!term || r.name.toLowerCase().includes(term) || r.device_id.toLowerCase().includes(term)));
    table.setRows(shown);
    const by = (s: string) => all.filter((r) => r.status === s).length;
    replace(counts, `${all.length} devices: `, h("span", { class: "ok" }, `${by("online")} online`), ", ", h("span", { class: "bad" }, `${by("error")} error`), ", ", h("span", { class: "off" }, `${all.length - by("online") - by("error")} offline or unknown`));
    empty.hidden = shown.length > 0;
    empty.textContent = all.length === 0
      ? "No devices yet: run the emulator (npm run emulate -- --site " + siteId + ") or create an enrolment intent, then watch them come online here."
      : "No device matches the search or filter.";
  };
  search.addEventListener("input", redraw);
  statusFilter.addEventListener("change", redraw);

  const sample = () => {
    const all = [...rows.values()];
    bands.push({ at: Date.now(), online: all.filter((r) => r.status === "online").length, error: all.filter((r) => r.status === "error").length, offline: all.filter((r) => r.status !== "online" && r.status !== "error").length });
    if (bands.length > CHART_POINTS) bands.shift();
    chartBox.querySelector("svg")?.remove();
    chartBox.prepend(healthChart(bands));
  };

  // ---- jobs ----
  const jobList = h("ul", { class: "job-list", id: "job-list" });
  const drawJobs = () => replace(jobList, jobs.length === 0
    ? h("li", { class: "empty" }, operate ? "No jobs yet: create one above to send a command to many devices at once." : "No jobs yet.")
    : jobs.map((j) => h("li", { "data-job": j.job_id }, link(`${BASE}/job?job_id=${enc(j.job_id)}`, j.action), ` · `, h("span", { class: `status status-${j.status}` }, j.status), h("span", { class: "muted" }, ` · ${ago(j.created_at)}`))));
  const jobsSection = h("section", { "aria-labelledby": "jobs-title" }, h("h2", { id: "jobs-title" }, "Jobs"));
  if (operate) jobsSection.append(jobForm(siteId, (job) => { jobs = [job, ...jobs]; drawJobs(); }));
  jobsSection.append(jobList);
  drawJobs();

  heading(main, site.name,
    h("p", { class: "muted" }, `${site.site_id} · your role: ${role}`, " · live: ", liveBadge),
    h("nav", { class: "subnav", "aria-label": "This site" },
      link(`${BASE}/enrolment?site_id=${enc(siteId)}`, "Enrolment: intents and bootstrap key"), link(`${BASE}/members?site_id=${enc(siteId)}`, "Members and roles")),
    counts, chartBox,
    h("section", { "aria-labelledby": "devices-title" }, h("h2", { id: "devices-title" }, "Devices"), filters, empty, table.element),
    jobsSection);
  redraw();
  sample();
  void loadAgents().then(redraw, () => undefined);

  // ---- live updates ----
  const onEvent = (event: LiveEvent) => {
    const data = (event.data ?? {}) as Record<string, unknown>;
    const row = typeof data.device_id === "string" ? rows.get(data.device_id) : undefined;
    switch (event.type) {
      case "device.status":
        if (row) {
          row.status = String(data.status);
          if (row.status === "online") row.last_seen = String(data.at ?? event.ts);
        }
        break;
      case "device.heartbeat":
        for (const beat of (data.devices as { device_id: string; status: string; last_seen: string }[] | undefined) ?? []) {
          const r = rows.get(beat.device_id);
          if (r) { r.status = beat.status; r.last_seen = beat.last_seen; }
        }
        break;
      case "device.metrics":
        if (row) {
          for (const s of (data.samples as { cpu_usage?: number }[] | undefined) ?? []) if (typeof s.cpu_usage === "number") row.cpu.push(s.cpu_usage);
          row.cpu.splice(0, Math.max(0, row.cpu.length - SPARK_POINTS));
        }
        break;
      case "agent.state":
        if (row) row.agent = String(data.state);
        break;
      case "job.updated": {
        const job = jobs.find((j) => j.job_id === data.job_id);
        if (job && typeof data.status === "string") { job.status = data.status; drawJobs(); }
        return;
      }
      default:
        return;
    }
    redraw();
  };
  const reload = async () => {
    const fresh = await api<Device[]>(`/api/v1/devices/sites/${enc(siteId)}/devices`);
    for (const d of fresh) rows.set(d.device_id, { ...d, cpu: rows.get(d.device_id)?.cpu ?? [], agent: rows.get(d.device_id)?.agent });
    redraw();
  };
  const channel = new LiveChannel(siteId, onEvent, (state) => { liveBadge.textContent = state; liveBadge.dataset.state = state; }, () => void reload());
  channel.start(position);
  // New devices appear through registration, which the channel does not announce: re-read the list now and then.
  const timers = [window.setInterval(() => void reload().catch(() => undefined), 15_000), window.setInterval(() => { sample(); table.schedule(); }, 2_000)];
  signal.addEventListener("abort", () => { channel.close(); timers.forEach(clearInterval); });
}

/** Creates a job on the site (operators): an action for every device, or those of one type. */
function jobForm(siteId: string, created: (job: Job) => void) {
  const action = h("select", { id: "job-action" }, ["restart", "update_config", "ping"].map((a) => h("option", { value: a }, a)));
  const description = h("input", { id: "job-description", maxlength: 2000 });
  const deviceType = h("input", { id: "job-device-type", placeholder: "all devices" });
  const form = h("form", { class: "card inline-form", "aria-label": "Create a job" },
    h("label", { for: "job-action" }, "Action"), action,
    h("label", { for: "job-description" }, "Description"), description,
    h("label", { for: "job-device-type" }, "Device type (optional)"), deviceType,
    h("button", { type: "submit" }, "Create job"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const target = deviceType.value.trim() ? `devices of type ${deviceType.value.trim()}` : "every device of the site";
    if (!(await confirmAction(`Send ${action.value} to ${target}?`, "Create job"))) return;
    await perform(async () => {
      const made = await api<{ job_id: string; site_id: string; action: string; status: string }>(`/api/v1/jobs/sites/${enc(siteId)}/jobs`, { method: "POST", body: {
        action: action.value, ...(description.value ? { description: description.value } : {}), ...(deviceType.value.trim() ? { device_type: deviceType.value.trim() } : {}),
      } });
      created({ ...made, description: description.value || null, created_at: new Date().toISOString(), completed_at: null, created_by: null });
      description.value = "";
    }, `Job ${action.value} created`);
  });
  return form;
}
