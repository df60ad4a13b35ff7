import { api, ApiError, enc, type Me, type Member, type Role } from "./api";
import { announce, h, replace } from "./dom";

/** Who is signed in, and (per site) what they may do there. */
export interface Session { me: Me }

export const BASE = "/dashboard";

/** Goes to a screen of the dashboard without reloading the page. */
export function navigate(path: string, replaceEntry = false) {
  if (replaceEntry) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  window.dispatchEvent(new Event("dashboard:navigate"));
}

/** A link to a screen of the dashboard, followed without reloading the page. */
export function link(path: string, text: string, attrs: Record<string, string> = {}) {
  return h("a", {
    href: path, ...attrs,
    onclick: ((event: MouseEvent) => {
      if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      navigate(path);
    }) as EventListener,
  }, text);
}

/** The caller's role on a site: an administrator may do everything; otherwise their membership. */
export async function roleOn(session: Session, siteId: string): Promise<Role> {
  if (session.me.is_admin) return "owner";
  const { members } = await api<{ members: Member[] }>(`/api/v1/sites/${enc(siteId)}/members`);
  return members.find((m) => m.user_id === session.me.id)?.role ?? "viewer";
}

export const canOperate = (role: Role) => role === "operator" || role === "owner";

/** Asks before an action takes effect; resolves true only when the user confirms. */
export function confirmAction(question: string, confirmLabel: string): Promise<boolean> {
  return new Promise((resolve) => {
    const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
    const ok = h("button", { type: "submit", class: "danger" }, confirmLabel);
    const dialog = h("dialog", { class: "confirm", "aria-labelledby": "confirm-title" },
      h("form", { method: "dialog" },
        h("h2", { id: "confirm-title" }, "Please confirm"),
        h("p", {}, question),
        h("div", { class: "buttons" }, cancel, ok)));
    const done = (value: boolean) => {
      dialog.close();
      dialog.remove();
      resolve(value);
    };
    cancel.addEventListener("click", () => done(false));
    dialog.addEventListener("cancel", (event) => { event.preventDefault(); done(false); });
    dialog.querySelector("form")!.addEventListener("submit", (event) => { event.preventDefault(); done(true); });
    document.body.appendChild(dialog);
    dialog.showModal();
    cancel.focus();
  });
}

/** Runs an action, announcing success or the API's refusal. */
export async function perform(action: () => Promise<unknown>, success: string): Promise<boolean> {
  try {
    await action();
    announce(success);
    return true;
  } catch (error) {
    announce(error instanceof ApiError ? `Refused (${error.status}): ${error.message}` : `Failed: ${String(error)}`, "error");
    return false;
  }
}

export function heading(main: HTMLElement, title: string, ...extra: (Node | string | null)[]) {
  document.title = `${title} · Fleet Edge`;
  replace(main, h("h1", { id: "page-title" }, title), ...extra);
}

export function errorBox(error: unknown) {
  return h("p", { class: "error", role: "alert" }, error instanceof Error ? error.message : String(error));
}
