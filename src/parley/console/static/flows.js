// Flows: the list, one flow's picture, validate, publish, versions, and a typed test conversation in place.
import { get, post } from "./api.js";
import { flowGraph } from "./graph.js";
import { t } from "./i18n.js";
import { forgetFlowNames } from "./pages.js";
import { announce, badge, cell, explain, fmtDateTime, fmtNumber, h, message, pretty, table } from "./ui.js";

function heading(text) {
  return h("h1", { id: "page-title", tabindex: "-1" }, text);
}

function flowStatus(flow) {
  const parts = [badge(`flow-${flow.status}`, t(`flow.status.${flow.status}`))];
  if (flow.has_unpublished_changes) parts.push(" ", badge("changes", t("flow.unpublished")));
  return parts;
}

export async function flowsPage(view) {
  view.append(heading(t("flows.title")), h("p", { class: "lead" }, t("flows.lead")));
  try {
    const page = await get("/api/flows", { limit: 200 });
    if (!page.items.length) { view.append(h("p", { class: "muted" }, t("flows.empty"))); return; }
    view.append(h("div", { class: "table-wrap" }, table(null, [
      { label: t("flows.name") }, { label: t("flows.status") }, { label: t("flows.version"), class: "num" }, { label: t("flows.updated") },
    ], page.items.map((flow) => h("tr", { dataset: { flowId: flow.id } },
      cell([h("a", { href: `#/flows/${encodeURIComponent(flow.id)}` }, flow.name), flow.description ? h("div", { class: "muted small" }, flow.description) : null]),
      cell(flowStatus(flow)), cell(flow.latest_version ? `v${flow.latest_version}` : "–", "num"), cell(fmtDateTime(flow.updated_at)))))));
    if (page.next_cursor) view.append(h("p", { class: "muted" }, t("flows.more")));
  } catch (error) {
    view.append(message("error", explain(error)));
  }
}

export async function flowPage(view, ctx) {
  view.append(h("a", { href: "#/flows", class: "back" }, t("flows.back")));
  const id = encodeURIComponent(ctx.id);
  let full;
  try {
    full = await get(`/api/flows/${id}/full`);
  } catch (error) {
    view.append(heading(t("flows.title")), message("error", explain(error, "flow")));
    return;
  }
  const title = heading(full.name);
  const statusLine = h("p", { class: "status-line" });
  const feedback = h("div", { class: "feedback", role: "status", "aria-live": "polite" });
  const validate = h("button", { type: "button", class: "secondary" }, t("flow.validate"));
  const publish = h("button", { type: "button" }, t("flow.publish"));
  const role = ctx.role;
  const canPublish = !role || ["owner", "admin", "member"].includes(role);
  const toolbar = h("div", { class: "toolbar" }, validate, publish,
    canPublish ? null : h("span", { class: "muted small", id: "publish-note" }, t("flow.viewer_note")));
  if (!canPublish) publish.setAttribute("aria-describedby", "publish-note");
  view.append(title, statusLine, toolbar, feedback);

  const versionsBody = h("tbody");
  async function refresh() {
    try {
      const flow = await get(`/api/flows/${id}`);
      statusLine.replaceChildren(...flowStatus(flow), flow.latest_version ? ` · v${flow.latest_version}` : "");
      const versions = await get(`/api/flows/${id}/versions`, { limit: 50 });
      versionsBody.replaceChildren(...versions.items.map((v) => h("tr", {},
        cell(`v${v.version}`), cell(fmtDateTime(v.created_at)), cell(v.published_by || "–"), cell(v.notes || "–"),
        cell(h("code", {}, v.definition_hash.slice(0, 12))))));
      if (!versions.items.length) versionsBody.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, t("flow.no_versions"))));
      return flow;
    } catch (error) {
      feedback.replaceChildren(message("error", explain(error, "flow")));
      return null;
    }
  }
  const flow = await refresh();

  validate.addEventListener("click", async () => {
    validate.disabled = true;
    try {
      const result = await post(`/api/flows/${id}/validate`);
      feedback.replaceChildren(result.valid ? message("ok", t("flow.valid")) : h("div", { class: "message error", role: "alert" },
        h("p", {}, t("flow.invalid", { n: result.errors.length })),
        h("ul", {}, result.errors.map((e) => h("li", {}, h("code", {}, [e.node, e.field].filter(Boolean).join(" · ")), " ", e.message)))));
    } catch (error) {
      feedback.replaceChildren(message("error", explain(error, "flow")));
    }
    validate.disabled = false;
  });
  publish.addEventListener("click", async () => {
    publish.disabled = true;
    try {
      const version = await post(`/api/flows/${id}/publish`);
      feedback.replaceChildren(message("ok", t("flow.published", { n: version.version })));
      announce(t("flow.published", { n: version.version }));
      forgetFlowNames();
      await refresh();
    } catch (error) {
      feedback.replaceChildren(message("error", explain(error, error.status === 404 ? "flow" : "publish")));
    }
    publish.disabled = false;
  });

  const graph = h("section", { class: "panel wide", "aria-labelledby": "graph-title" },
    h("h2", { id: "graph-title" }, t("flow.graph")),
    h("div", { class: "graph-wrap", tabindex: "0", "aria-label": t("flow.graph_scroll") }, flowGraph(full, t("flow.graph_of", { name: full.name }))),
    h("details", {}, h("summary", {}, t("flow.as_text")), h("ul", { class: "edge-list" },
      full.nodes.map((node) => h("li", {}, h("strong", {}, node.id), ` (${node.type})`,
        full.edges.filter((e) => e.from === node.id).map((e) => ` → ${e.to}${e.label ? " [" + e.label + "]" : ""}`).join(","))))));
  view.append(graph);

  const versions = h("section", { class: "panel", "aria-labelledby": "versions-title" }, h("h2", { id: "versions-title" }, t("flow.versions")),
    (() => { const tbl = table(null, [{ label: t("flow.version") }, { label: t("flow.published_at") }, { label: t("flow.published_by") }, { label: t("flow.notes") }, { label: t("flow.hash") }], []); tbl.querySelector("tbody").replaceWith(versionsBody); return h("div", { class: "table-wrap flat" }, tbl); })());
  const test = testPanel(ctx, flow);
  view.append(h("div", { class: "split" }, test, versions));
}

/** A typed conversation with the flow's published version, in place (the microphone: /playground). */
function testPanel(ctx, flow) {
  const panel = h("section", { class: "panel", "aria-labelledby": "test-title" }, h("h2", { id: "test-title" }, t("test.title")));
  if (!flow || flow.status !== "published") {
    panel.append(h("p", { class: "muted" }, t("test.unpublished")));
    return panel;
  }
  const log = h("ol", { class: "transcript chat", "aria-live": "polite", "aria-relevant": "additions" });
  const state = h("p", { class: "muted", role: "status" }, t("test.idle"));
  const start = h("button", { type: "button" }, t("test.start"));
  const end = h("button", { type: "button", class: "secondary", disabled: true }, t("test.end"));
  const input = h("input", { id: "test-message", type: "text", maxlength: 4000, disabled: true, autocomplete: "off" });
  const send = h("button", { type: "submit", disabled: true }, t("test.send"));
  const form = h("form", { class: "row" }, h("label", { for: "test-message", class: "visually-hidden" }, t("test.message")), input, send);
  let sessionId = null;
  const line = (kind, text) => { log.append(h("li", { class: kind }, h("span", { class: "who" }, t(`speaker.${kind}`)), h("p", {}, text))); };
  const live = (on) => { start.disabled = on; end.disabled = !on; input.disabled = !on; send.disabled = !on; };
  const show = (turn) => {
    for (const event of turn.events || []) {
      if (event.type === "say" && event.text) line("agent", event.text);
      else if (event.type === "tool_call") {
        const data = event.data || {};
        line("note", `${t("test.tool")}: ${data.tool || data.name || event.node_id || "tool"} ${data.status ? "→ " + data.status : ""}`);
      } else if (event.type === "signal") line("note", `${t("test.signal")}: ${(event.data && event.data.type) || ""}`);
    }
    if (turn.status === "ended") {
      sessionId = null;
      live(false);
      state.textContent = t("test.ended", { outcome: [turn.outcome, turn.end_reason].filter(Boolean).join(", ") });
    }
  };
  start.addEventListener("click", async () => {
    log.replaceChildren();
    start.disabled = true;
    try {
      const turn = await post("/api/sessions", { flow_id: ctx.id, channel: "web" });
      sessionId = turn.id;
      live(true);
      state.textContent = t("test.running");
      show(turn);
      input.focus();
    } catch (error) {
      start.disabled = false;
      state.textContent = explain(error, "flow");
    }
  });
  end.addEventListener("click", async () => {
    if (!sessionId) return;
    try {
      const row = await post(`/api/sessions/${encodeURIComponent(sessionId)}/end`);
      show({ status: "ended", outcome: row.outcome, end_reason: row.end_reason });
    } catch (error) { state.textContent = explain(error); }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || !sessionId) return;
    input.value = "";
    line("caller", text);
    try {
      show(await post(`/api/sessions/${encodeURIComponent(sessionId)}/messages`, { text }));
    } catch (error) { line("note", explain(error)); }
  });
  ctx.cleanup(() => { if (sessionId) post(`/api/sessions/${encodeURIComponent(sessionId)}/end`).catch(() => {}); });
  panel.append(h("div", { class: "row" }, start, end), form, state, log,
    h("p", { class: "help" }, t("test.voice_hint"), " ", h("a", { href: "/playground" }, t("test.playground"))));
  return panel;
}
