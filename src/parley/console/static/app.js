// The console's shell: sign-in, organization and language switches, and the hash router.
import { get, onUnauthorized, session } from "./api.js";
import { evaluationPage } from "./evals.js";
import { flowPage, flowsPage } from "./flows.js";
import { applyStatic, language, setLanguage, t } from "./i18n.js";
import {
  callPage, callsPage, evaluationsPage, forgetFlowNames, livePage, overviewPage, signalsPage, usagePage,
} from "./pages.js";
import { explain, h } from "./ui.js";

const $ = (id) => document.getElementById(id);
const ui = {
  signin: $("signin"), signinForm: $("signin-form"), token: $("token"), signinError: $("signin-error"),
  shell: $("shell"), org: $("org"), lang: $("lang"), langSignin: $("lang-signin"), who: $("who"),
  signout: $("signout"), view: $("view"), nav: $("nav"), providerLogin: $("provider-login"), providerLink: $("provider-link"),
};
const state = { orgs: [], me: null, cleanups: [], route: 0, provider: null };

const ROUTES = {
  "": overviewPage, calls: callsPage, call: callPage, signals: signalsPage, flows: flowsPage, flow: flowPage,
  live: livePage, usage: usagePage, evaluations: evaluationsPage, evaluation: evaluationPage,
};

function parse() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, search] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  let name = parts[0] || "";
  let id = null;
  if (parts.length > 1 && (name === "calls" || name === "flows" || name === "evaluations")) { id = parts[1]; name = name.slice(0, -1); }
  return { name: name in ROUTES ? name : "", id, query: new URLSearchParams(search || "") };
}

async function render(moveFocus) {
  if (!session.token) return;
  for (const cleanup of state.cleanups.splice(0)) cleanup();
  const route = parse();
  const token = ++state.route;
  const view = h("div", { class: "page" });
  ui.view.replaceChildren(view);
  const section = { call: "calls", flow: "flows", evaluation: "evaluations" }[route.name] || route.name;
  for (const link of ui.nav.querySelectorAll("a")) {
    if (link.dataset.route === section) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  const org = state.orgs.find((o) => o.id === session.org);
  const ctx = {
    id: route.id, query: route.query, org: session.org, role: org ? org.role : null,
    cleanup: (fn) => state.cleanups.push(fn),
  };
  try {
    await ROUTES[route.name](view, ctx);
  } catch (error) {
    if (token === state.route) view.append(h("p", { class: "message error", role: "alert" }, explain(error)));
  }
  if (token !== state.route) return;
  const title = view.querySelector("h1");
  document.title = `${title ? title.textContent + " · " : ""}${t("app.name")}`;
  if (moveFocus && title) title.focus();  // after navigation, screen readers start at the new page
}

/** "Sign in with <provider>" when this server has an identity provider's login configured. */
async function offerProvider() {
  try {
    const response = await fetch("/api/auth/login", { credentials: "omit", cache: "no-store" });
    const options = response.ok ? await response.json() : { enabled: false };
    state.provider = options.enabled ? options : null;
  } catch (error) {
    state.provider = null;
  }
  labelProvider();
}

function labelProvider() {
  ui.providerLogin.hidden = !state.provider;
  if (!state.provider) return;
  ui.providerLink.href = state.provider.start_path;
  ui.providerLink.textContent = t("signin.provider", { provider: state.provider.provider });
}

/** Back from the identity provider: take the finished sign-in's token over (once), or say why not. */
async function completeProviderSignin(query) {
  history.replaceState(null, "", "/console#/");
  if (query.get("error")) {
    showSignin(`${t("signin.provider_failed")} ${query.get("error")}`);
    return;
  }
  try {
    const response = await fetch("/api/auth/login/token", { method: "POST", credentials: "same-origin", cache: "no-store" });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) { showSignin(`${t("signin.provider_failed")} ${data.detail || response.status}`); return; }
    session.token = data.token;
  } catch (error) {
    showSignin(t("error.network"));
    return;
  }
  signIn();
}

function showSignin(text) {
  ui.shell.hidden = true;
  ui.signin.hidden = false;
  ui.signinError.textContent = text || "";
  ui.signinError.hidden = !text;
  ui.token.value = "";
  ui.token.focus();
}

async function signIn() {
  ui.signinError.hidden = true;
  try {
    state.me = await get("/api/me");
  } catch (error) {
    session.clear();
    showSignin(explain(error));
    return;
  }
  try {
    state.orgs = await get("/api/organizations");
  } catch (error) {
    state.orgs = [];  // an API key sees its own organization only; the header is not needed then
  }
  if (!state.orgs.some((o) => o.id === session.org)) session.org = state.orgs.length ? state.orgs[0].id : "";
  ui.org.replaceChildren(...state.orgs.map((o) => h("option", { value: o.id, selected: o.id === session.org },
    o.role ? `${o.name} (${t(`role.${o.role}`)})` : o.name)));
  ui.org.disabled = state.orgs.length < 2;
  if (!state.orgs.length) ui.org.append(h("option", { value: "" }, t("org.key")));
  const me = state.me;
  ui.who.textContent = me.name || me.email || me.subject || (me.kind === "api_key" ? t("who.key") : me.id);
  ui.signin.hidden = true;
  ui.shell.hidden = false;
  forgetFlowNames();
  await render(false);
}

ui.signinForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  session.token = token;
  ui.token.value = "";
  signIn();
});

ui.signout.addEventListener("click", () => {
  session.clear();
  for (const cleanup of state.cleanups.splice(0)) cleanup();
  ui.view.replaceChildren();
  showSignin("");
});

ui.org.addEventListener("change", () => {
  session.org = ui.org.value;
  forgetFlowNames();
  if (parse().id) location.hash = `#/${parse().name}s`;
  else render(false);
});

for (const select of [ui.lang, ui.langSignin]) {
  select.addEventListener("change", () => {
    setLanguage(select.value);
    ui.lang.value = ui.langSignin.value = select.value;
    applyStatic();
    labelProvider();
    if (session.token && !ui.shell.hidden) signIn();
  });
}

onUnauthorized(() => {
  session.clear();
  showSignin(t("error.401"));
});

window.addEventListener("hashchange", () => render(true));

ui.lang.value = ui.langSignin.value = language();
applyStatic();
offerProvider();
const arrival = parse();
if (location.hash.startsWith("#/signin?")) completeProviderSignin(arrival.query);
else if (session.token) signIn(); else showSignin("");
