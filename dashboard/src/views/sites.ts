import { api, enc, type Site, type SiteHealth } from "../api";
import { BASE, errorBox, heading, link, navigate, perform } from "../app";
import { h, replace } from "../dom";
import { channelPosition, LiveChannel } from "../live";

const REFRESH_MS = 5_000;

/** Every site the user can see, with its health counts, kept current by each visible site's live channel. */
export async function sitesView(main: HTMLElement, signal: AbortSignal) {
  const list = h("div", { class: "site-list", "aria-live": "polite" }, h("p", { class: "muted" }, "Loading sites…"));
  const name = h("input", { id: "new-site-name", required: true, maxlength: 200 });
  const siteId = h("input", { id: "new-site-id", maxlength: 64, placeholder: "generated when empty" });
  const create = h("form", { class: "card inline-form", "aria-labelledby": "create-site-title" },
    h("h2", { id: "create-site-title" }, "Create a site"),
    h("label", { for: "new-site-name" }, "Name"), name,
    h("label", { for: "new-site-id" }, "Site id (optional)"), siteId,
    h("button", { type: "submit" }, "Create site"));
  const invitationCode = h("input", { id: "invitation-code-input", required: true, maxlength: 200, autocomplete: "off" });
  const accept = h("form", { class: "card inline-form", "aria-labelledby": "accept-invitation-title" },
    h("h2", { id: "accept-invitation-title" }, "Accept an invitation"),
    h("label", { for: "invitation-code-input" }, "Invitation code"), invitationCode,
    h("button", { type: "submit" }, "Accept"));
  heading(main, "Sites", list, create, accept);

  accept.addEventListener("submit", async (event) => {
    event.preventDefault();
    let joined: { site_id: string | null; tenant_id: string | null; role: string } | undefined;
    const ok = await perform(async () => {
      joined = await api<{ site_id: string | null; tenant_id: string | null; role: string }>("/api/v1/invitations/accept", { method: "POST", body: { invitation_code: invitationCode.value.trim() } });
    }, "Invitation accepted");
    if (!ok || !joined) return;
    invitationCode.value = "";
    navigate(joined.site_id ? `${BASE}/site?site_id=${enc(joined.site_id)}` : `${BASE}/sites`);
  });

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
    replace(list, h("p", { class: "empty" }, "No sites yet: create one below, or ask a site's owner to invite you and accept their code below."));
    return;
  }

  const cards = new Map<string, { counts: HTMLElement; live: HTMLElement; card: HTMLElement }>();
  replace(list, sites.map((site) => {
    const counts = h("dl", { class: "counts" }, h("dt", {}, "Health"), h("dd", {}, "…"));
    const live = h("span", { class: "badge" }, "not live");
    const card = h("article", { class: "card site-card", "data-site": site.site_id, "data-live": "off" },
      h("h2", {}, link(`${BASE}/site?site_id=${enc(site.site_id)}`, site.name)),
      h("p", { class: "muted" }, site.site_id, site.location ? ` · ${site.location}` : "", " · ", live),
      counts);
    cards.set(site.site_id, { counts, live, card });
    return card;
  }));

  const overview = new LiveOverview(cards, signal);
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const siteId = (entry.target as HTMLElement).dataset.site!;
      if (entry.isIntersecting) overview.follow(siteId);
      else overview.unfollow(siteId);
    }
  });
  for (const { card } of cards.values()) observer.observe(card);
  // Only where a site's live channel is not open (yet, or at all): its health is re-read on a timer.
  const timer = window.setInterval(() => overview.refreshUnfollowed(), REFRESH_MS);
  signal.addEventListener("abort", () => {
    clearInterval(timer);
    observer.disconnect();
    overview.close();
  });
}

/** Live events that change what a site's health says: a device's presence or error state. */
const HEALTH_EVENTS = new Set(["device.status", "device.heartbeat"]);
/** A burst of events (a fleet coming online) costs at most one health read per site this often. */
const MIN_READ_GAP_MS = 500;

/**
 * Keeps each site card in view current from the site's live channel: an event that changes the
 * site's health makes the card re-read it (coalesced, so a burst costs one read). The counts are the
 * service's own (`GET …/health`), not recomputed here from events. A card scrolled out of view closes
 * its channel; a card whose channel is not open is re-read on the 5 s timer instead.
 */
class LiveOverview {
  private readonly channels = new Map<string, { channel?: LiveChannel; live: boolean }>();
  private readonly reads = new Map<string, { running: boolean; again: boolean; last: number }>();

  constructor(private readonly cards: Map<string, { counts: HTMLElement; live: HTMLElement; card: HTMLElement }>, private readonly signal: AbortSignal) {}

  async follow(siteId: string) {
    if (this.channels.has(siteId) || this.signal.aborted) return;
    const entry: { channel?: LiveChannel; live: boolean } = { live: false };
    this.channels.set(siteId, entry);
    let position: number | undefined;
    try {
      // The channel's position before the read: a change between the two is replayed, not lost.
      position = await channelPosition(siteId);
    } catch {
      position = undefined;
    }
    await this.read(siteId);
    if (this.channels.get(siteId) !== entry || this.signal.aborted) return;
    entry.channel = new LiveChannel(siteId, (event) => {
      if (HEALTH_EVENTS.has(event.type)) void this.read(siteId);
    }, (state) => {
      entry.live = state === "live" || state === "live (events)";
      this.showState(siteId, state === "closed" ? "off" : entry.live ? "live" : "polling");
    }, () => void this.read(siteId));
    entry.channel.start(position);
  }

  unfollow(siteId: string) {
    const entry = this.channels.get(siteId);
    if (!entry) return;
    this.channels.delete(siteId);
    entry.channel?.close();
  }

  /** The 5 s fallback: cards in view whose channel is not open now. */
  refreshUnfollowed() {
    for (const [siteId, entry] of this.channels) if (!entry.live) void this.read(siteId);
  }

  close() {
    for (const siteId of [...this.channels.keys()]) this.unfollow(siteId);
  }

  private showState(siteId: string, state: "live" | "polling" | "off") {
    const card = this.cards.get(siteId);
    if (!card) return;
    card.card.dataset.live = state;
    card.live.textContent = state === "live" ? "live" : state === "polling" ? "re-read every 5 s" : "not live";
  }

  /** Re-reads one site's health; calls during a read, or too soon after one, are folded into one more read. */
  private async read(siteId: string): Promise<void> {
    let state = this.reads.get(siteId);
    if (!state) this.reads.set(siteId, (state = { running: false, again: false, last: 0 }));
    if (state.running) {
      state.again = true;
      return;
    }
    state.running = true;
    try {
      const wait = state.last + MIN_READ_GAP_MS - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      do {
        state.again = false;
        state.last = Date.now();
        if (this.signal.aborted) return;
        await this.draw(siteId);
      } while (state.again);
    } finally {
      state.running = false;
    }
  }

  private async draw(siteId: string) {
    const counts = this.cards.get(siteId)?.counts;
    if (!counts) return;
    try {
      const health = await api<SiteHealth>(`/api/v1/sites/${enc(siteId)}/health`);
      replace(counts,
        h("dt", {}, "Online"), h("dd", { class: "ok", "data-count": "online" }, health.healthy_devices),
        h("dt", {}, "Offline"), h("dd", { class: "off", "data-count": "offline" }, health.offline_devices),
        h("dt", {}, "Error"), h("dd", { class: "bad", "data-count": "error" }, health.error_devices),
        h("dt", {}, "Devices"), h("dd", { "data-count": "total" }, health.total_devices),
        h("dt", {}, "Healthy"), h("dd", {}, `${Math.round(health.health_percentage)} %`));
    } catch (error) {
      replace(counts, errorBox(error));
    }
  }
}
