import { api } from "../api";
import { errorBox, heading } from "../app";
import { h, replace } from "../dom";

interface AuditEvent { id: number; event_type: string; category: string; severity: string; description: string | null; site_id: string | null; device_id: string | null; user_id: number | null; created_at: string }

const CATEGORIES = ["", "security_events", "user_actions", "site_management", "device_management", "job_management", "system_events", "business_events"];
const SEVERITIES = ["", "info", "warning", "error", "critical"];
const PERIODS = ["1h", "24h", "7d", "30d"];
const PAGE = 100;

/** The audit trail the user may read, filtered by category, severity, event type and period. */
export async function auditView(main: HTMLElement) {
  const select = (id: string, values: string[], empty: string) => h("select", { id }, values.map((v) => h("option", { value: v }, v || empty)));
  const category = select("audit-category", CATEGORIES, "any");
  const severity = select("audit-severity", SEVERITIES, "any");
  const since = select("audit-since", PERIODS, "");
  since.value = "24h";
  const type = h("input", { id: "audit-type", maxlength: 64, placeholder: "e.g. login_success" });
  const form = h("form", { class: "filters", "aria-label": "Filter audit events" },
    h("label", { for: "audit-category" }, "Category"), category,
    h("label", { for: "audit-severity" }, "Severity"), severity,
    h("label", { for: "audit-type" }, "Event type"), type,
    h("label", { for: "audit-since" }, "Period"), since,
    h("button", { type: "submit" }, "Apply"));
  const total = h("p", { class: "muted", "aria-live": "polite" });
  const rows = h("tbody", { id: "audit-events" });
  heading(main, "Audit events", form, total,
    h("table", { class: "plain" }, h("thead", {}, h("tr", {}, ["When", "Severity", "Category", "Event", "Site", "Device", "Description"].map((c) => h("th", { scope: "col" }, c)))), rows));

  const load = async () => {
    const query = new URLSearchParams({ limit: String(PAGE), since: since.value });
    if (category.value) query.set("category", category.value);
    if (severity.value) query.set("severity", severity.value);
    if (type.value.trim()) query.set("event_type", type.value.trim());
    try {
      const page = await api<{ events: AuditEvent[]; total: number }>(`/api/v1/audit/events?${query}`);
      total.textContent = `${page.total} events${page.total > PAGE ? ` (the newest ${PAGE} shown)` : ""}`;
      replace(rows, page.events.length === 0
        ? h("tr", {}, h("td", { colspan: 7, class: "empty" }, "No events match: widen the period or clear a filter."))
        : page.events.map((e) => h("tr", {},
          h("td", {}, new Date(e.created_at).toLocaleString()), h("td", {}, h("span", { class: `status status-${e.severity}` }, e.severity)),
          h("td", {}, e.category), h("td", {}, e.event_type), h("td", {}, e.site_id ?? "—"), h("td", {}, e.device_id ?? "—"), h("td", { class: "wrap" }, e.description ?? ""))));
    } catch (error) {
      replace(rows, h("tr", {}, h("td", { colspan: 7 }, errorBox(error))));
    }
  };
  form.addEventListener("submit", (event) => { event.preventDefault(); void load(); });
  await load();
}
