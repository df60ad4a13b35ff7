import { api, enc, type Command, type DeviceDetail, type Role } from "../api";
import { BASE, canOperate, confirmAction, errorBox, heading, link, perform, roleOn, type Session } from "../app";
import { ago, announce, h, replace } from "../dom";
import { percentChart } from "../charts";
import { channelPosition, LiveChannel } from "../live";

interface Health { health: { status: string; response_time_ms?: number; metrics?: Record<string, number | undefined> }; agent_state: string; last_updated: string }
interface MetricsSeries { from: string; to: string; samples: number; series: { cpu_usage_avg: number | null; memory_usage_avg: number | null; disk_usage_avg: number | null }[] }

interface StateHistory { history: { timestamp: string; previous_state: string | null; new_state: string; source: string; reason: string | null }[] }

/** A device: its state, its state history, its commands (live), and the operator's actions on it. */
export async function deviceView(main: HTMLElement, session: Session, deviceId: string, signal: AbortSignal) {
  heading(main, deviceId, h("p", { class: "muted" }, "Loading…"));
  let device: DeviceDetail, role: Role, position: number;
  try {
    device = await api<DeviceDetail>(`/api/v1/devices/${enc(deviceId)}`);
    [role, position] = await Promise.all([roleOn(session, device.site_id), channelPosition(device.site_id)]);
    // Read again after taking the channel's position, so a change in between is replayed, not lost.
    device = await api<DeviceDetail>(`/api/v1/devices/${enc(deviceId)}`);
  } catch (error) {
    heading(main, deviceId, errorBox(error));
    return;
  }
  if (signal.aborted) return;
  const operate = canOperate(role);

  const facts = h("dl", { class: "facts" });
  const drawFacts = () => replace(facts,
    ...([["Status", device.status], ["Lifecycle", device.lifecycle_state], ["Last seen", ago(device.last_seen)], ["Type", device.device_type],
      ["Source", device.device_source], ["Heartbeat interval", `${device.heartbeat_interval_s} s`], ["IP address", device.ip_address ?? "—"],
      ["OS", [device.os_type, device.os_version].filter(Boolean).join(" ") || "—"]] as const)
      .flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-fact": k }, v)]));
  drawFacts();

  const commands = h("tbody", { id: "commands" });
  const drawCommands = async () => {
    const page = await api<{ commands: Command[] }>(`/api/v1/devices/${enc(deviceId)}/commands?limit=50`);
    replace(commands, page.commands.length === 0
      ? h("tr", {}, h("td", { colspan: 5, class: "empty" }, operate ? "No commands yet: queue one above." : "No commands yet."))
      : page.commands.map((c) => h("tr", { "data-command": c.command_id },
        h("td", {}, c.command_type), h("td", {}, h("span", { class: `status status-${c.status}` }, c.status)),
        h("td", {}, ago(c.created_at)), h("td", {}, c.created_by ?? "—"),
        h("td", {}, c.error_message ?? (c.result === null || c.result === undefined ? "—" : JSON.stringify(c.result))))));
  };

  const history = h("ol", { class: "history" });
  const drawHistory = async () => {
    const page = await api<StateHistory>(`/api/v1/metrics/device-state-history/${enc(deviceId)}?hours=168&limit=20`);
    replace(history, page.history.length === 0
      ? h("li", { class: "empty" }, "No state changes recorded in the last 7 days.")
      : page.history.map((e) => h("li", {}, `${new Date(e.timestamp).toLocaleString()}: ${e.previous_state ?? "—"} → ${e.new_state} (${e.source}${e.reason ? `: ${e.reason}` : ""})`)));
  };

  const health = h("dl", { class: "facts", id: "health" });
  const drawHealth = async () => {
    const now = await api<Health>(`/api/v1/devices/${enc(deviceId)}/health`);
    const metrics = Object.entries(now.health.metrics ?? {}).filter(([, v]) => typeof v === "number");
    replace(health, h("dt", {}, "Health"), h("dd", {}, now.health.status), h("dt", {}, "Agent state"), h("dd", {}, now.agent_state),
      ...metrics.flatMap(([k, v]) => [h("dt", {}, k.replace(/_/g, " ")), h("dd", {}, String(Math.round(v! * 10) / 10))]),
      h("dt", {}, "As of"), h("dd", {}, new Date(now.last_updated).toLocaleString()));
  };
  const chart = h("figure", { class: "chart", id: "metrics-chart" });
  const drawChart = async () => {
    const series = await api<MetricsSeries>(`/api/v1/agents/${enc(deviceId)}/metrics?period=24h`);
    replace(chart, series.samples === 0
      ? h("p", { class: "empty" }, "No telemetry stored in the last 24 hours: the device has not sent metrics yet.")
      : [percentChart([
        { label: "CPU %", cls: "line-cpu", values: series.series.map((b) => b.cpu_usage_avg) },
        { label: "Memory %", cls: "line-memory", values: series.series.map((b) => b.memory_usage_avg) },
        { label: "Disk %", cls: "line-disk", values: series.series.map((b) => b.disk_usage_avg) },
      ], series.from, series.to), h("figcaption", {}, "Hourly averages over 24 hours: CPU (blue), memory (orange), disk (grey), in %")]);
  };

  const actions = h("div");
  // Which actions apply depends on the lifecycle state (suspend or resume): drawn again after each one.
  const drawActions = () => replace(actions, operate
    ? deviceActions(device, async (lifecycleChanged) => {
      device = await api<DeviceDetail>(`/api/v1/devices/${enc(deviceId)}`);
      drawFacts();
      if (lifecycleChanged) drawActions();
      await drawCommands();
    })
    : h("p", { class: "muted" }, "Your role on this site is viewer: you can watch, not act."));
  drawActions();

  heading(main, device.name,
    h("p", { class: "muted" }, device.device_id, " · site ", link(`${BASE}/site?site_id=${enc(device.site_id)}`, device.site_id), ` · your role: ${role}`),
    facts,
    h("section", { "aria-labelledby": "health-title" }, h("h2", { id: "health-title" }, "Health and metrics"), health, chart),
    h("section", { "aria-labelledby": "actions-title" }, h("h2", { id: "actions-title" }, "Actions"), actions),
    h("section", { "aria-labelledby": "commands-title" }, h("h2", { id: "commands-title" }, "Commands"),
      h("table", { class: "plain" }, h("thead", {}, h("tr", {}, ["Type", "Status", "Queued", "By", "Result"].map((c) => h("th", { scope: "col" }, c)))), commands)),
    h("section", { "aria-labelledby": "history-title" }, h("h2", { id: "history-title" }, "State history"), history));
  await Promise.all([drawCommands(), drawHistory(), drawHealth(), drawChart()].map((p) => p.catch((error) => main.append(errorBox(error)))));

  const channel = new LiveChannel(device.site_id, (event) => {
    const data = (event.data ?? {}) as Record<string, unknown>;
    if (data.device_id !== deviceId) return;
    if (event.type === "command.updated") void drawCommands();
    if (event.type === "device.status") {
      device.status = String(data.status);
      if (device.status === "online") device.last_seen = String(data.at ?? event.ts);
      drawFacts();
      void drawHistory();
    }
  }, () => undefined, () => void drawCommands());
  channel.start(position);
  signal.addEventListener("abort", () => channel.close());
}

function deviceActions(device: DeviceDetail, changed: (lifecycleChanged: boolean) => Promise<void>) {
  const id = enc(device.device_id);
  const queue = (type: string, payload?: Record<string, unknown>) =>
    api(`/api/v1/devices/${id}/commands`, { method: "POST", body: { command_type: type, ...(payload ? { payload } : {}) } });
  const button = (label: string, question: string, run: () => Promise<unknown>, done: string, lifecycle = false) =>
    h("button", { type: "button", onclick: async () => {
      if (!(await confirmAction(question, label))) return;
      if (await perform(run, done)) await changed(lifecycle);
    } }, label);

  const commandType = h("input", { id: "command-type", required: true, placeholder: "ping", maxlength: 64 });
  const payload = h("textarea", { id: "command-payload", rows: 2, placeholder: "{}" });
  const queueForm = h("form", { class: "inline-form", "aria-label": "Queue a command" },
    h("label", { for: "command-type" }, "Command type"), commandType,
    h("label", { for: "command-payload" }, "Payload (JSON object, optional)"), payload,
    h("button", { type: "submit" }, "Queue command"));
  queueForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    let body: Record<string, unknown> | undefined;
    try {
      body = payload.value.trim() ? JSON.parse(payload.value) as Record<string, unknown> : undefined;
    } catch {
      announce("The payload is not valid JSON: give an object such as {\"count\": 3}, or leave it empty.", "error");
      payload.focus();
      return;
    }
    if (!(await confirmAction(`Queue ${commandType.value} for ${device.name}?`, "Queue"))) return;
    if (await perform(() => queue(commandType.value, body), `${commandType.value} queued for ${device.name}`)) await changed(false);
  });

  const configUrl = h("input", { id: "config-url", type: "url", required: true, placeholder: "https://config.example.com/pos.json" });
  const configForm = h("form", { class: "inline-form", "aria-label": "Push configuration" },
    h("label", { for: "config-url" }, "Configuration URL"), configUrl,
    h("button", { type: "submit" }, "Push config"));
  configForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!(await confirmAction(`Push the configuration at ${configUrl.value} to ${device.name}?`, "Push config"))) return;
    if (await perform(() => queue("update_config", { config_url: configUrl.value }), `Configuration push queued for ${device.name}`)) await changed(false);
  });

  const newKey = h("p", { class: "secret", hidden: true, role: "status" });
  const rotate = h("button", { type: "button", onclick: async () => {
    if (!(await confirmAction(`Rotate the API key of ${device.name}? The device is refused until it is given the new key.`, "Rotate key"))) return;
    await perform(async () => {
      const { api_key } = await api<{ api_key: string }>(`/api/v1/devices/${id}/rotate-key`, { method: "POST" });
      replace(newKey, "New API key (shown once; copy it now): ", h("code", {}, api_key));
      newKey.hidden = false;
    }, "Key rotated");
  } }, "Rotate key");

  return h("div", { class: "actions" },
    h("div", { class: "buttons" },
      device.lifecycle_state === "active" ? button("Restart", `Restart ${device.name}? It receives the command at its next poll.`, () => queue("restart"), `Restart queued for ${device.name}`) : null,
      device.lifecycle_state === "active"
        ? button("Suspend", `Suspend ${device.name}? Its calls are refused until it is resumed.`, () => api(`/api/v1/devices/${id}/suspend`, { method: "POST" }), `${device.name} suspended`, true)
        : device.lifecycle_state === "suspended" ? button("Resume", `Resume ${device.name}?`, () => api(`/api/v1/devices/${id}/resume`, { method: "POST" }), `${device.name} resumed`, true) : null,
      rotate),
    newKey, queueForm, configForm);
}
