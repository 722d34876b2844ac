// The console's one way to the API: same origin, the pasted credential as a Bearer header, the chosen
// organization as X-Organization-Id. The credential lives in sessionStorage (this tab only), never in a URL.
const TOKEN = "parley.console.token";
const ORG = "parley.console.org";

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

export const session = {
  get token() { return sessionStorage.getItem(TOKEN) || ""; },
  set token(value) {
    if (value) sessionStorage.setItem(TOKEN, value); else sessionStorage.removeItem(TOKEN);
  },
  get org() { return sessionStorage.getItem(ORG) || ""; },
  set org(value) {
    if (value) sessionStorage.setItem(ORG, value); else sessionStorage.removeItem(ORG);
  },
  clear() { sessionStorage.removeItem(TOKEN); sessionStorage.removeItem(ORG); },
};

const listeners = new Set();
/** Called with the error whenever the server answers 401 (a wrong or expired credential). */
export function onUnauthorized(listener) { listeners.add(listener); }

export function headers(json) {
  const out = { Authorization: "Bearer " + session.token };
  if (session.org) out["X-Organization-Id"] = session.org;
  if (json) out["Content-Type"] = "application/json";
  return out;
}

export function url(path, query) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

function detailOf(data, fallback) {
  let detail = data && data.detail;
  if (Array.isArray(detail)) detail = detail.map((d) => d.msg || JSON.stringify(d)).join("; ");
  return detail || fallback;
}

/** The raw response of an authenticated request; non-2xx answers become ApiError. */
export async function fetchRaw(method, path, options = {}) {
  let response;
  try {
    response = await fetch(url(path, options.query), {
      method,
      headers: headers(options.body !== undefined),
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: "omit",
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(0, "");
  }
  if (!response.ok) {
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (error) { data = null; }
    const failure = new ApiError(response.status, detailOf(data, response.statusText || ""));
    if (response.status === 401) for (const listener of listeners) listener(failure);
    throw failure;
  }
  return response;
}

export async function api(method, path, options = {}) {
  const response = await fetchRaw(method, path, options);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, query) => api("GET", path, { query });
export const post = (path, body) => api("POST", path, { body });
export const patch = (path, body) => api("PATCH", path, { body });
