import { api, enc, type Member, type Role } from "../api";
import { BASE, confirmAction, errorBox, heading, link, perform, roleOn, type Session } from "../app";
import { h, replace } from "../dom";

const ROLES: Role[] = ["viewer", "operator", "owner"];

/** A site's members and their roles; owners invite by e-mail, change roles and remove members. */
export async function membersView(main: HTMLElement, session: Session, siteId: string) {
  let role: Role;
  try {
    role = await roleOn(session, siteId);
  } catch (error) {
    heading(main, "Members", errorBox(error));
    return;
  }
  const own = role === "owner";
  const list = h("tbody", { id: "members" });
  const draw = async () => {
    const { members } = await api<{ members: Member[] }>(`/api/v1/sites/${enc(siteId)}/members`);
    replace(list, members.map((m) => h("tr", { "data-user": m.user_id },
      h("td", {}, m.username), h("td", {}, m.email ?? "—"),
      h("td", {}, own ? roleSelect(m) : m.role),
      h("td", {}, own && m.user_id !== session.me.id ? h("button", { type: "button", class: "small danger", onclick: async () => {
        if (!(await confirmAction(`Remove ${m.username} from the site? Their live views of it close at once.`, "Remove"))) return;
        if (await perform(() => api(`/api/v1/sites/${enc(siteId)}/members/${m.user_id}`, { method: "DELETE" }), `${m.username} removed`)) await draw();
      } }, "Remove", h("span", { class: "visually-hidden" }, ` ${m.username}`)) : ""))));
  };
  const roleSelect = (m: Member) => {
    const select = h("select", { "aria-label": `Role of ${m.username}` }, ROLES.map((r) => h("option", { value: r, selected: r === m.role }, r)));
    select.addEventListener("change", async () => {
      if (!(await confirmAction(`Make ${m.username} ${select.value} of this site?`, "Change role"))) { select.value = m.role; return; }
      if (await perform(() => api(`/api/v1/sites/${enc(siteId)}/members`, { method: "POST", body: { user_id: m.user_id, role: select.value } }), `${m.username} is now ${select.value}`)) await draw();
      else select.value = m.role;
    });
    return select;
  };

  const code = h("div", { class: "secret", id: "invitation-code", role: "status", hidden: true });
  const parts: (Node | null)[] = [h("p", { class: "muted" }, "Site ", link(`${BASE}/site?site_id=${enc(siteId)}`, siteId), ` · your role: ${role}`), code];
  if (own) {
    const email = h("input", { id: "invite-email", type: "email", required: true });
    const inviteRole = h("select", { id: "invite-role" }, ROLES.map((r) => h("option", { value: r }, r)));
    const form = h("form", { class: "card inline-form", "aria-labelledby": "invite-title" },
      h("h2", { id: "invite-title" }, "Invite by e-mail"),
      h("label", { for: "invite-email" }, "E-mail"), email,
      h("label", { for: "invite-role" }, "Role"), inviteRole,
      h("button", { type: "submit" }, "Invite"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const invitee = email.value;
      const ok = await perform(async () => {
        const invited = await api<{ invitation_code: string }>(`/api/v1/sites/${enc(siteId)}/members`, { method: "POST", body: { email: invitee, role: inviteRole.value } });
        replace(code, `Invitation code for ${invitee} (shown once; send it to them: they accept it under "Accept an invitation" on the Sites page, signed in with that address): `,
          h("code", {}, invited.invitation_code));
        code.hidden = false;
      }, `${invitee} invited as ${inviteRole.value}: the role applies once they accept the code`);
      if (ok) { email.value = ""; await draw(); }
    });
    parts.push(form);
  }
  parts.push(h("table", { class: "plain" }, h("caption", { class: "visually-hidden" }, "Members"),
    h("thead", {}, h("tr", {}, ["User", "E-mail", "Role", ""].map((c) => h("th", { scope: "col" }, c)))), list));
  heading(main, "Members and roles", ...parts);
  await draw().catch((error) => main.append(errorBox(error)));
}
