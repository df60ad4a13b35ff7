import { api, enc, type Role } from "../api";
import { BASE, canOperate, confirmAction, errorBox, heading, link, perform, roleOn, type Session } from "../app";
import { h, replace } from "../dom";

interface Intent { intent_id: string; status: string; expected_device_identity: string | null; expires_at: string; created_at: string; device_id: string | null }

/**
 * Enrolling devices on a site: enrolment intents (each a one-time claim token, shown once) and the
 * site's bootstrap key (shown once; creating one replaces the previous key).
 */
export async function enrolmentView(main: HTMLElement, session: Session, siteId: string) {
  let role: Role;
  try {
    role = await roleOn(session, siteId);
  } catch (error) {
    heading(main, "Enrolment", errorBox(error));
    return;
  }
  const operate = canOperate(role);
  const secret = h("div", { class: "secret", id: "shown-once", role: "status", hidden: true });
  const showOnce = (label: string, value: string) => {
    replace(secret, `${label} (shown once; copy it now, the service keeps only a hash): `, h("code", {}, value));
    secret.hidden = false;
  };

  const intents = h("tbody", { id: "intents" });
  const draw = async () => {
    const page = await api<{ intents: Intent[] }>(`/api/v1/sites/${enc(siteId)}/enrolment-intents?limit=100`);
    replace(intents, page.intents.length === 0
      ? h("tr", {}, h("td", { colspan: 6, class: "empty" }, operate ? "No enrolment intents: create one to pre-provision a device, then give it the claim token." : "No enrolment intents."))
      : page.intents.map((i) => h("tr", { "data-intent": i.intent_id },
        h("td", {}, i.intent_id), h("td", {}, h("span", { class: `status status-${i.status}` }, i.status)),
        h("td", {}, i.expected_device_identity ?? "any"), h("td", {}, new Date(i.expires_at).toLocaleString()),
        h("td", {}, i.device_id ? link(`${BASE}/device?device_id=${enc(i.device_id)}`, i.device_id) : "—"),
        h("td", {}, operate ? intentActions(i) : ""))));
  };
  const intentActions = (i: Intent) => {
    const buttons: HTMLElement[] = [];
    if (i.status === "pending") {
      buttons.push(h("button", { type: "button", class: "small", onclick: async () => {
        if (await perform(() => api(`/api/v1/sites/${enc(siteId)}/enrolment-intents/${enc(i.intent_id)}`, { method: "PUT", body: { status: "approved" } }), "Intent approved")) await draw();
      } }, "Approve"));
    }
    if (i.status === "pending" || i.status === "approved") {
      buttons.push(h("button", { type: "button", class: "small danger", onclick: async () => {
        if (!(await confirmAction(`Revoke intent ${i.intent_id}? Its claim token stops working for good.`, "Revoke"))) return;
        if (await perform(() => api(`/api/v1/sites/${enc(siteId)}/enrolment-intents/${enc(i.intent_id)}/revoke`, { method: "POST" }), "Intent revoked")) await draw();
      } }, "Revoke"));
    }
    return h("span", { class: "buttons" }, buttons);
  };

  const sections: (Node | null)[] = [
    h("p", { class: "muted" }, "Site ", link(`${BASE}/site?site_id=${enc(siteId)}`, siteId), ` · your role: ${role}`),
    secret,
  ];
  if (operate) {
    const identity = h("input", { id: "intent-identity", maxlength: 256, placeholder: "any device" });
    const hours = h("input", { id: "intent-hours", type: "number", min: 1, max: 720, value: 24 });
    const form = h("form", { class: "card inline-form", "aria-labelledby": "create-intent-title" },
      h("h2", { id: "create-intent-title" }, "Create an enrolment intent"),
      h("label", { for: "intent-identity" }, "Expected device identity (optional)"), identity,
      h("label", { for: "intent-hours" }, "Expires in hours"), hours,
      h("button", { type: "submit" }, "Create intent"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const ok = await perform(async () => {
        const made = await api<{ intent_id: string; claim_token: string }>(`/api/v1/sites/${enc(siteId)}/enrolment-intents`, {
          method: "POST", body: { expires_in_hours: Number(hours.value), ...(identity.value.trim() ? { expected_device_identity: identity.value.trim() } : {}) },
        });
        showOnce(`Claim token of ${made.intent_id}`, made.claim_token);
      }, "Intent created: approve it before the device claims it");
      if (ok) await draw();
    });

    const bootstrap = h("section", { class: "card", "aria-labelledby": "bootstrap-title" },
      h("h2", { id: "bootstrap-title" }, "Bootstrap key"),
      h("p", {}, "Devices given the site's bootstrap key enrol themselves (e.g. the emulator's --bootstrap-key). A new key replaces the old one."),
      h("div", { class: "buttons" },
        h("button", { type: "button", onclick: async () => {
          if (!(await confirmAction("Create a new bootstrap key? The current one stops working.", "Create key"))) return;
          await perform(async () => {
            const { bootstrap_key } = await api<{ bootstrap_key: string }>(`/api/v1/sites/${enc(siteId)}/bootstrap-key`, { method: "POST" });
            showOnce("Bootstrap key", bootstrap_key);
          }, "Bootstrap key created");
        } }, "Create bootstrap key"),
        h("button", { type: "button", class: "danger", onclick: async () => {
          if (!(await confirmAction("Revoke the bootstrap key? Self-enrolment stops; enrolled devices keep working.", "Revoke key"))) return;
          await perform(() => api(`/api/v1/sites/${enc(siteId)}/bootstrap-key`, { method: "DELETE" }), "Bootstrap key revoked");
        } }, "Revoke bootstrap key")));
    sections.push(form, bootstrap);
  } else {
    sections.push(h("p", { class: "muted" }, "Your role on this site is viewer: creating intents and keys needs the operator role."));
  }
  sections.push(h("section", { "aria-labelledby": "intents-title" }, h("h2", { id: "intents-title" }, "Enrolment intents"),
    h("table", { class: "plain" }, h("thead", {}, h("tr", {}, ["Intent", "Status", "Device identity", "Expires", "Device", ""].map((c) => h("th", { scope: "col" }, c)))), intents)));
  heading(main, "Enrolment", ...sections);
  await draw().catch((error) => main.append(errorBox(error)));
}
