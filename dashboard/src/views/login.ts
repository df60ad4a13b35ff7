import { api, ApiError } from "../api";
import { BASE, heading, navigate } from "../app";
import { h } from "../dom";

/** Password sign-in (the API sets the httpOnly cookie), and single sign-on when the service offers it. */
export async function loginView(main: HTMLElement, onSignedIn: () => Promise<void>) {
  const email = h("input", { id: "email", name: "email", type: "email", autocomplete: "username", required: true });
  const password = h("input", { id: "password", name: "password", type: "password", autocomplete: "current-password", required: true });
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const form = h("form", { class: "card narrow", "aria-labelledby": "page-title" },
    h("label", { for: "email" }, "E-mail"), email,
    h("label", { for: "password" }, "Password"), password,
    problem,
    h("button", { type: "submit" }, "Sign in"));
  heading(main, "Sign in", form);
  email.focus();

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.hidden = true;
    try {
      await api("/api/v1/auth/login", { method: "POST", body: { email: email.value, password: password.value } });
      password.value = "";
      await onSignedIn();
      navigate(`${BASE}/sites`, true);
    } catch (error) {
      problem.textContent = error instanceof ApiError && error.status === 401 ? "Wrong e-mail or password." : (error as Error).message;
      problem.hidden = false;
      password.focus();
    }
  });

  try {
    const methods = await api<{ oidc: boolean; oidc_login_url: string | null }>("/api/v1/auth/methods");
    if (methods.oidc && methods.oidc_login_url) {
      form.after(h("p", { class: "card narrow" }, h("a", { class: "button", href: methods.oidc_login_url }, "Sign in with your organisation's account")));
    }
  } catch {
    // Password sign-in works without knowing the other methods.
  }
}
