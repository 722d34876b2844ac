// Flows: the list, one flow's picture, validate, publish, versions, and a test conversation in place
// (typed or spoken, with the draft or a published version).
import { get, post } from "./api.js";
import { VoiceLine, audioContext } from "/playground/voice.js";
import { flowGraph } from "./graph.js";
import { t } from "./i18n.js";
import { forgetFlowNames } from "./pages.js";
import { announce, badge, cell, explain, fmtDateTime, fmtMs, fmtNumber, h, message, pretty, table } from "./ui.js";

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

/**
 * A conversation with the flow in place: its draft or its published version, typed (the session API) or
 * spoken (the microphone over the session's audio WebSocket, through the playground's voice.js), with
 * the latency of each turn and the tool calls with their arguments and results.
 */
function testPanel(ctx, flow) {
  const panel = h("section", { class: "panel test-panel", "aria-labelledby": "test-title" }, h("h2", { id: "test-title" }, t("test.title")));
  const published = Boolean(flow && flow.latest_version);
  const target = h("select", { id: "test-target" },
    h("option", { value: "draft" }, t("test.draft")),
    published ? h("option", { value: "published", selected: true }, t("test.published", { n: flow.latest_version })) : null);
  const mode = h("select", { id: "test-mode" }, h("option", { value: "text" }, t("test.mode_text")), h("option", { value: "voice" }, t("test.mode_voice")));
  const log = h("ol", { class: "transcript chat", "aria-live": "polite", "aria-relevant": "additions" });
  const partial = h("p", { class: "partial muted", "aria-live": "off" });
  const state = h("p", { class: "muted", role: "status", id: "test-state" }, t("test.idle"));
  const start = h("button", { type: "button" }, t("test.start"));
  const end = h("button", { type: "button", class: "secondary", disabled: true }, t("test.end"));
  const mic = h("button", { type: "button", class: "secondary", disabled: true, "aria-pressed": "false" }, t("test.mic_on"));
  const input = h("input", { id: "test-message", type: "text", maxlength: 4000, disabled: true, autocomplete: "off" });
  const send = h("button", { type: "submit", disabled: true }, t("test.send"));
  const form = h("form", { class: "row" }, h("label", { for: "test-message", class: "visually-hidden" }, t("test.message")), input, send);
  const played = h("output", { id: "test-played", dataset: { ms: "0" } }, "0.0 s");
  const playedLine = h("p", { class: "help", hidden: true }, t("test.played"), " ", played);
  const metricsBody = h("tbody");
  const metrics = table(null, [
    { label: t("call.turn_col") }, { label: t("test.answer_ms"), class: "num" }, { label: t("metric.stt"), class: "num" },
    { label: t("metric.engine"), class: "num" }, { label: t("metric.tool"), class: "num" }, { label: t("metric.tts"), class: "num" },
    { label: t("metric.v2v"), class: "num" },
  ], [], { class: "data compact test-metrics" });
  metrics.querySelector("tbody").replaceWith(metricsBody);
  const tools = h("div", { class: "test-tools", "aria-live": "polite" });
  let sessionId = null, line = null, turnNo = 0, toolNo = 0;

  const say = (kind, text) => { log.append(h("li", { class: kind }, h("span", { class: "who" }, t(`speaker.${kind}`)), h("p", {}, text))); log.scrollTop = log.scrollHeight; };
  const controls = () => {
    const on = Boolean(sessionId);
    start.disabled = on; target.disabled = on; mode.disabled = on; end.disabled = !on; input.disabled = !on; send.disabled = !on;
    mic.disabled = !on || !line;
    const listening = Boolean(line && line.listening);
    mic.setAttribute("aria-pressed", String(listening));
    mic.textContent = listening ? t("test.mic_off") : t("test.mic_on");
  };
  const metricRow = (m) => {
    metricsBody.append(h("tr", { dataset: { turn: String(m.turn), answerMs: m.answer_ms ?? "", voiceToVoice: m.voice_to_voice_ms ?? "" } },
      cell(String(m.turn)), cell(fmtMs(m.answer_ms), "num"), cell(fmtMs(m.stt_final_ms), "num"), cell(fmtMs(m.engine_ms), "num"),
      cell(fmtMs(m.tool_ms), "num"), cell(fmtMs(m.tts_first_byte_ms), "num"), cell(fmtMs(m.voice_to_voice_ms), "num")));
  };
  const tool = (data, nodeId) => {
    toolNo += 1;
    const name = (data && (data.tool || data.name)) || nodeId || "tool";
    say("note", `${t("test.tool")}: ${name}${data && data.status ? " → " + data.status : ""}`);
    tools.append(h("article", { class: "tool", dataset: { tool: name } },
      h("header", {}, h("strong", {}, name), " ", data && data.status ? badge(`tool-${data.status}`, data.status) : null,
        data && data.http_status ? h("span", { class: "muted" }, ` HTTP ${data.http_status}`) : null,
        data && data.latency_ms !== undefined && data.latency_ms !== null ? h("span", { class: "muted" }, ` · ${fmtMs(data.latency_ms)}`) : null),
      h("div", { class: "tool-io" },
        h("div", {}, h("h3", {}, t("call.arguments")), h("pre", { class: "tool-arguments" }, pretty(data ? data.arguments : undefined) || "–")),
        h("div", {}, h("h3", {}, t("call.result")), h("pre", { class: "tool-result" }, data && data.error ? data.error : pretty(data ? data.result : undefined) || "–")))));
  };
  const ended = (outcome, reason) => {
    sessionId = null;
    if (line) line.close();
    line = null;
    partial.textContent = "";
    controls();
    state.textContent = t("test.ended", { outcome: [outcome, reason].filter(Boolean).join(", ") || "–" });
  };
  const show = (turn, answerMs) => {
    let toolMs = 0, hadTool = false;
    for (const event of turn.events || []) {
      if (event.type === "say" && event.text) say("agent", event.text);
      else if (event.type === "tool_call") {
        hadTool = true;
        toolMs += Number((event.data && event.data.latency_ms) || 0);
        tool(event.data, event.node_id);
      } else if (event.type === "transfer") say("note", `${t("test.transfer")}: ${event.text || ""}`);
      else if (event.type === "signal") say("note", `${t("test.signal")}: ${(event.data && event.data.type) || ""}`);
    }
    metricRow({ turn: turnNo++, answer_ms: answerMs, tool_ms: hadTool ? toolMs : null });
    if (turn.status === "ended") ended(turn.outcome, turn.end_reason);
  };
  const timed = async (request) => {
    const began = performance.now();
    const turn = await request();
    return [turn, Math.round(performance.now() - began)];
  };

  // the spoken side: voice.js does the audio, this panel shows what happens in the console's words
  const voiceEvents = {
    event(event) {
      switch (event.type) {
        case "transcript":
          if (event.final) { partial.textContent = ""; say("caller", event.text); } else partial.textContent = event.text;
          break;
        case "agent_text": say("agent", event.text); break;
        case "tool_call": tool(event.data, event.node_id); break;
        case "metrics": metricRow({ ...event, turn: event.turn }); break;
        case "interruption": say("note", t("test.interrupted")); break;
        case "warning": case "error": say("note", event.detail || ""); break;
        case "end": ended(event.outcome, event.reason); break;
        default: break;
      }
    },
    state(name, detail) {
      const texts = {
        connecting: t("test.v.connecting"), starting: t("test.v.starting"), listening: t("test.v.listening"), muted: t("test.v.muted"),
        "mic-failed": t("test.v.mic_failed", { detail: detail && detail.message === "no-microphone" ? t("test.v.no_mic") : (detail && detail.message) || String(detail) }),
        refused: t("test.v.refused", { detail }),
      };
      if (name === "dropped") { ended("abandoned", "connection closed"); return; }
      if (name === "refused") line = null;
      if (texts[name]) state.textContent = texts[name];
      controls();
    },
    played(ms) { played.dataset.ms = String(Math.round(ms)); played.textContent = `${(ms / 1000).toFixed(1)} s`; },
    dropped(n) { played.dataset.dropped = String(n); },
  };
  async function openVoice() {
    await audioContext();  // inside the click: browsers start audio only after a gesture
    line = new VoiceLine(voiceEvents);
    const grant = await post(`/api/sessions/${encodeURIComponent(sessionId)}/audio-token`);
    await line.open(grant);
    controls();
  }

  start.addEventListener("click", async () => {
    log.replaceChildren(); tools.replaceChildren(); metricsBody.replaceChildren();
    turnNo = 0; toolNo = 0;
    start.disabled = true;
    const draft = target.value === "draft";
    const voiced = mode.value === "voice";
    playedLine.hidden = !voiced;
    try {
      const body = draft ? { flow_id: ctx.id, channel: "test", draft: true, voiced } : { flow_id: ctx.id, channel: "web", voiced };
      if (voiced) {
        await audioContext();
        const created = await post("/api/sessions", body);
        sessionId = created.id;
        controls();
        // the audio line speaks the opening itself (as on a phone line)
        await openVoice();
      } else {
        const [turn, ms] = await timed(() => post("/api/sessions", body));
        sessionId = turn.id;
        controls();
        state.textContent = draft ? t("test.running_draft") : t("test.running_version", { n: turn.flow_version || "" });
        show(turn, ms);
      }
      input.focus();
    } catch (error) {
      if (line) line.close();
      line = null;
      sessionId = null;
      controls();
      state.textContent = explain(error, "flow");
    }
  });
  end.addEventListener("click", async () => {
    if (!sessionId) return;
    if (line && line.end()) return;  // the server ends it and sends "end"
    try {
      const row = await post(`/api/sessions/${encodeURIComponent(sessionId)}/end`);
      ended(row.outcome, row.end_reason);
    } catch (error) { state.textContent = explain(error); }
  });
  mic.addEventListener("click", () => {
    if (!line) return;
    if (line.listening) line.mute(); else line.listen();
    controls();
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || !sessionId) return;
    input.value = "";
    say("caller", text);
    try {
      const [turn, ms] = await timed(() => post(`/api/sessions/${encodeURIComponent(sessionId)}/messages`, { text }));
      show(turn, ms);
    } catch (error) { say("note", explain(error)); }
  });
  ctx.cleanup(() => {
    if (line) line.close();
    if (sessionId) post(`/api/sessions/${encodeURIComponent(sessionId)}/end`).catch(() => {});
  });
  panel.append(
    h("div", { class: "row" },
      h("div", { class: "field inline" }, h("label", { for: "test-target" }, t("test.target")), target),
      h("div", { class: "field inline" }, h("label", { for: "test-mode" }, t("test.mode")), mode)),
    h("div", { class: "row" }, start, mic, end), form, state, log, partial,
    playedLine,
    h("h3", {}, t("test.latency")), h("p", { class: "help" }, t("test.latency_help")), h("div", { class: "table-wrap flat" }, metrics),
    h("h3", {}, t("call.tools")), tools);
  return panel;
}
