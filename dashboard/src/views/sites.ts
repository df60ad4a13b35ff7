import { api, enc, type Site, type SiteHealth } from "../api";
import { BASE, errorBox, heading, link, navigate, perform } from "../app";
import { h, replace } from "../dom";

const REFRESH_MS = 5_000;

/** Every site the user can see, with its health counts, refreshed every few seconds. */
export async function sitesView(main: HTMLElement, signal: AbortSignal) {
  const list = h("div", { class: "site-list", "aria-live": "polite" }, h("p", { class: "muted" }, "Loading sites…"));
  const name = h("input", { id: "new-site-name", required: true, maxlength: 200 });
  const siteId = h("input", { id: "new-site-id", maxlength: 64, placeholder: "generated when empty" });
  const create = h("form", { class: "card inline-form", "aria-labelledby": "create-site-title" },
    h("h2", { id: "create-site-title" }, "Create a site"),
    h("label", { for: "new-site-name" }, "Name"), name,
    h("label", { for: "new-site-id" }, "Site id (optional)"), siteId,
    h("button", { type: "submit" }, "Create site"));
  heading(main, "Sites", list, create);

  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    let created: { site_id: string } | undefined;
    const ok = await perform(async () => {
      created = await api<{ site_id: string }>("/api/v1/sites/sites", { method: "POST", body: { name: name.value, ...(siteId.value ? { site_id: siteId.value } : {}) } });
    }, `Site ${name.value} created`);
    if (ok && created) navigate(`${BASE}/site?site_id=${enc(created.site_id)}`);
  });

  let sites: Site[];
  try {
    sites = (await api<{ sites: Site[] }>("/api/v1/sites/sites")).sites;
  } catch (error) {
    replace(list, errorBox(error));
    return;
  }
  if (sites.length === 0) {
    replace(list, h("p", { class: "empty" }, "No sites yet: create one below, or ask a site's owner to add you as a member."));
    return;
  }

  const cards = new Map<string, HTMLElement>();
  replace(list, sites.map((site) => {
    const counts = h("dl", { class: "counts" }, h("dt", {}, "Health"), h("dd", {}, "…"));
    cards.set(site.site_id, counts);
    return h("article", { class: "card site-card", "data-site": site.site_id },
      h("h2", {}, link(`${BASE}/site?site_id=${enc(site.site_id)}`, site.name)),
      h("p", { class: "muted" }, site.site_id, site.location ? ` · ${site.location}` : ""),
      counts);
  }));

  const refresh = async () => {
    await Promise.all(sites.map(async (site) => {
      const counts = cards.get(site.site_id)!;
      try {
        const health = await api<SiteHealth>(`/api/v1/sites/${enc(site.site_id)}/health`);
        replace(counts,
          h("dt", {}, "Online"), h("dd", { class: "ok" }, health.healthy_devices),
          h("dt", {}, "Offline"), h("dd", { class: "off" }, health.offline_devices),
          h("dt", {}, "Error"), h("dd", { class: "bad" }, health.error_devices),
          h("dt", {}, "Devices"), h("dd", {}, health.total_devices),
          h("dt", {}, "Healthy"), h("dd", {}, `${Math.round(health.health_percentage)} %`));
      } catch (error) {
        replace(counts, errorBox(error));
      }
    }));
  };
  await refresh();
  const timer = window.setInterval(() => void refresh(), REFRESH_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
}
