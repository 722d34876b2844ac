// Small DOM helpers: elements built with textContent only (no innerHTML), formatting, messages.
import { t, language } from "./i18n.js";

export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") element.className = value;
    else if (key === "text") element.textContent = value;
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

const SVG = "http://www.w3.org/2000/svg";
export function s(tag, attrs, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") element.setAttribute("class", value);
    else if (key === "text") element.textContent = value;
    else element.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) element.append(child);
  return element;
}

/** A sentence a person understands for a failed request. */
export function explain(error, context) {
  if (!error || error.status === undefined) return String((error && error.message) || error);
  const detail = error.detail ? ` (${error.detail})` : "";
  switch (error.status) {
    case 0: return t("error.network");
    case 401: return t("error.401");
    case 403: return t(context === "publish" ? "error.403.publish" : "error.403") + detail;
    case 404: return t(context === "flow" ? "error.404.flow" : "error.404") + detail;
    case 409: return t("error.409") + detail;
    case 422: return t("error.422") + detail;
    case 429: return t("error.429") + detail;
    default:
      if (error.status >= 500) return t("error.5xx") + detail;
      return `${error.status}${detail}`;
  }
}

export function message(kind, text) {
  return h("p", { class: `message ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

/** Announces a short confirmation in the page's live region. */
export function announce(text, isError) {
  const region = document.getElementById("announce");
  region.textContent = text;
  region.classList.toggle("error", Boolean(isError));
}

const locale = () => (language() === "de" ? "de-DE" : "en-GB");

export function fmtDateTime(value) {
  if (!value) return "–";
  return new Date(value).toLocaleString(locale(), { dateStyle: "medium", timeStyle: "short" });
}

export function fmtTime(value) {
  if (!value) return "–";
  return new Date(value).toLocaleTimeString(locale(), { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function fmtNumber(value, digits = 0) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString(locale(), { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

export function fmtMs(value) {
  return value === null || value === undefined ? "–" : `${fmtNumber(value)} ms`;
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const total = Math.round(seconds);
  const minutes = Math.floor(total / 60);
  return `${minutes}:${String(total % 60).padStart(2, "0")}`;
}

export function badge(kind, text) {
  return h("span", { class: `badge ${kind}` }, text);
}

export function outcomeBadge(outcome) {
  return badge(`outcome-${outcome}`, t(`outcome.${outcome}`));
}

export function statusBadge(status) {
  return badge(`status-${status}`, t(`signal.status.${status}`));
}

export function severityBadge(severity) {
  return badge(`severity-${severity}`, t(`severity.${severity}`));
}

export function table(caption, columns, rows, options = {}) {
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.class }, c.label))));
  const body = h("tbody", {}, rows);
  return h("table", { class: options.class || "data" }, caption ? h("caption", { class: options.captionClass }, caption) : null, head, body);
}

export function cell(content, cls) {
  return h("td", { class: cls }, content);
}

/** Local midnight of the day `offset` days from today, as an ISO string. */
export function dayStart(offset) {
  const day = new Date();
  day.setHours(0, 0, 0, 0);
  day.setDate(day.getDate() + offset);
  return day.toISOString();
}

export function pretty(value) {
  if (value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}
