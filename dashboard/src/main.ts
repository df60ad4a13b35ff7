import { api, ApiError, SIGNED_OUT_EVENT, type Me } from "./api";
import { BASE, errorBox, link, navigate, perform, type Session } from "./app";
import { h, replace } from "./dom";
import { auditView } from "./views/audit";
import { deviceView } from "./views/device";
import { enrolmentView } from "./views/enrolment";
import { jobView } from "./views/job";
import { loginView } from "./views/login";
import { membersView } from "./views/members";
import { siteView } from "./views/site";
import { sitesView } from "./views/sites";

const main = document.getElementById("main")!;
const top = document.getElementById("top")!;
let session: Session | undefined;
/** Ends the current screen's timers and live connections when another screen opens. */
let leaving = new AbortController();

async function loadSession(): Promise<Session | undefined> {
  try {
    const me = await api<{ data: Me }>("/api/v1/auth/me");
    return { me: me.data };
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return undefined;
    throw error;
  }
}

function drawTop() {
  const status = h("p", { id: "status-line", class: "status-line", role: "status", "aria-live": "polite" });
  const nav = session
    ? h("nav", { "aria-label": "Main" }, link(`${BASE}/sites`, "Sites"), link(`${BASE}/audit`, "Audit"),
      h("span", { class: "who" }, session.me.username, session.me.is_admin ? " (administrator)" : ""),
      h("button", { type: "button", class: "secondary", onclick: () => void signOut() }, "Sign out"))
    : null;
  replace(top, h("a", { class: "brand", href: `${BASE}/` }, "Fleet Edge"), nav, status);
}

async function signOut() {
  if (await perform(() => api("/api/v1/auth/logout", { method: "POST" }), "Signed out")) {
    session = undefined;
    drawTop();
    navigate(`${BASE}/login`, true);
  }
}

async function route() {
  leaving.abort();
  leaving = new AbortController();
  const signal = leaving.signal;
  const path = location.pathname.replace(/\/+$/, "");
  const view = path === BASE ? "" : path.slice(BASE.length + 1);
  const query = new URLSearchParams(location.search);

  if (!session && view !== "login") return navigate(`${BASE}/login`, true);
  if (session && (view === "" || view === "login")) return navigate(`${BASE}/sites`, true);
  try {
    switch (view) {
      case "login":
        return await loginView(main, async () => { session = await loadSession(); drawTop(); });
      case "sites":
        return await sitesView(main, signal);
      case "site":
        return await siteView(main, session!, query.get("site_id") ?? "", signal);
      case "device":
        return await deviceView(main, session!, query.get("device_id") ?? "", signal);
      case "job":
        return await jobView(main, session!, query.get("job_id") ?? "", signal);
      case "enrolment":
        return await enrolmentView(main, session!, query.get("site_id") ?? "");
      case "members":
        return await membersView(main, session!, query.get("site_id") ?? "");
      case "audit":
        return await auditView(main);
      default:
        replace(main, h("h1", {}, "Not found"), h("p", {}, "This screen does not exist. ", link(`${BASE}/sites`, "Go to your sites")));
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      session = undefined;
      drawTop();
      return navigate(`${BASE}/login`, true);
    }
    main.append(errorBox(error));
  }
}

async function start() {
  try {
    session = await loadSession();
  } catch (error) {
    replace(main, errorBox(error));
    return;
  }
  drawTop();
  window.addEventListener("popstate", () => void route());
  window.addEventListener(SIGNED_OUT_EVENT, () => {
    if (!session) return;
    session = undefined;
    drawTop();
    navigate(`${BASE}/login`, true);
  });
  window.addEventListener("dashboard:navigate", () => {
    // Focus follows the navigation to the new content, unless the screen already focused a field.
    void route().then(() => { if (!main.contains(document.activeElement)) main.focus({ preventScroll: true }); });
  });
  await route();
}

void start();
