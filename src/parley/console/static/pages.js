// The console's pages other than flows: overview, calls, one call, signals, live calls, usage, evaluations.
import { ApiError, fetchRaw, get, patch, post } from "./api.js";
import { hbars, lines, stackedBars } from "./charts.js";
import { t } from "./i18n.js";
import {
  announce, badge, cell, dayStart, explain, fmtDateTime, fmtDuration, fmtMs, fmtNumber, fmtTime, h, message,
  outcomeBadge, pretty, severityBadge, statusBadge, table,
} from "./ui.js";

const PAGE = 50;
const OUTCOMES = ["completed", "transferred", "abandoned", "failed"];
const CHANNELS = ["web", "phone", "whatsapp", "test"];

// Flow names by id, per organization (the lists show names, the API gives ids).
let flowNames = { org: null, names: null };
export async function flowName(org, id) {
  if (!id) return "–";
  if (flowNames.org !== org || !flowNames.names) {
    // one request per organization, shared by every row that asks at the same time
    flowNames = { org, names: get("/api/flows", { limit: 200 })
      .then((page) => new Map(page.items.map((flow) => [flow.id, flow.name])))
      .catch(() => new Map()) };  // names are a convenience: ids are shown instead
  }
  return (await flowNames.names).get(id) || id;
}
export function forgetFlowNames() { flowNames = { org: null, names: null }; }

function heading(text) {
  return h("h1", { id: "page-title", tabindex: "-1" }, text);
}

function field(id, label, control) {
  control.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), control);
}

function select(options, value) {
  const element = h("select", {});
  for (const [key, label] of options) element.append(h("option", { value: key, selected: key === value }, label));
  return element;
}

/** A "load more" list over a cursor-paged endpoint: pages of PAGE items, never everything at once. */
function pager(fetchPage, renderRows, tbody, status) {
  let cursor = null, shown = 0, busy = false;
  const more = h("button", { type: "button", class: "secondary", hidden: true }, t("list.more"));
  async function load(reset) {
    if (busy) return;
    busy = true;
    more.disabled = true;
    if (reset) { cursor = null; shown = 0; tbody.replaceChildren(); }
    status.replaceChildren(h("span", { class: "muted" }, t("list.loading")));
    try {
      const page = await fetchPage(cursor);
      const rows = await renderRows(page.items);
      tbody.append(...rows);
      shown += page.items.length;
      cursor = page.next_cursor;
      more.hidden = !cursor;
      status.replaceChildren(h("span", { class: "muted" },
        shown ? t(cursor ? "list.shown_more" : "list.shown", { n: fmtNumber(shown) }) : t("list.empty")));
    } catch (error) {
      status.replaceChildren(message("error", explain(error)));
    } finally {
      busy = false;
      more.disabled = false;
    }
  }
  more.addEventListener("click", () => load(false));
  return { more, load };
}

// --- overview ---------------------------------------------------------------------------------------

export async function overviewPage(view, ctx) {
  view.append(heading(t("overview.title")), h("p", { class: "lead" }, t("overview.lead")));
  const cards = h("div", { class: "cards" });
  view.append(cards);
  const card = (label, value, link, linkText) => h("section", { class: "card" },
    h("h2", {}, label), h("p", { class: "figure" }, value), link ? h("a", { href: link }, linkText) : null);
  try {
    const [yesterday, open, callbacks] = await Promise.all([
      get("/api/reporting/calls/summary", { since: dayStart(-1), until: dayStart(0) }),
      get("/api/brain/signals", { status: "open", limit: 200 }),
      get("/api/brain/signals", { status: "open", type: "callback_requested", limit: 200 }),
    ]);
    const days = yesterday.days;
    const calls = days.reduce((n, d) => n + d.calls, 0);
    const failed = days.reduce((n, d) => n + d.outcomes.failed + d.outcomes.abandoned, 0);
    const latency = days.map((d) => d.mean_voice_latency_ms).filter((v) => v !== null);
    const count = (page) => fmtNumber(page.items.length) + (page.next_cursor ? "+" : "");
    cards.append(
      card(t("overview.yesterday"), fmtNumber(calls), "#/calls?period=yesterday", t("overview.see_calls")),
      card(t("overview.unsuccessful"), fmtNumber(failed), "#/calls?period=yesterday", t("overview.see_calls")),
      card(t("overview.callbacks"), count(callbacks), "#/signals", t("overview.see_signals")),
      card(t("overview.open_signals"), count(open), "#/signals", t("overview.see_signals")),
      card(t("overview.latency"), latency.length ? fmtMs(latency.reduce((a, b) => a + b, 0) / latency.length) : "–",
        "#/usage", t("overview.see_usage")),
    );
  } catch (error) {
    view.append(message("error", explain(error)));
  }
}

// --- calls ------------------------------------------------------------------------------------------

function periodRange(period) {
  switch (period) {
    case "today": return { since: dayStart(0) };
    case "yesterday": return { since: dayStart(-1), until: dayStart(0) };
    case "week": return { since: dayStart(-6) };
    default: return {};
  }
}

export async function callsPage(view, ctx) {
  const query = ctx.query;
  view.append(heading(t("calls.title")));
  const period = select([["all", t("period.all")], ["today", t("period.today")], ["yesterday", t("period.yesterday")], ["week", t("period.week")]], query.get("period") || "all");
  const outcome = select([["", t("filter.any")], ...OUTCOMES.map((o) => [o, t(`outcome.${o}`)])], query.get("outcome") || "");
  const channel = select([["", t("filter.any")], ...CHANNELS.map((c) => [c, t(`channel.${c}`)])], query.get("channel") || "");
  const caller = h("input", { type: "search", maxlength: 200, value: query.get("caller") || "", autocomplete: "off" });
  const signals = h("input", { type: "checkbox", checked: query.get("signals") === "1" });
  const form = h("form", { class: "filters", "aria-label": t("calls.filters") },
    field("f-period", t("filter.period"), period),
    field("f-outcome", t("filter.outcome"), outcome),
    field("f-channel", t("filter.channel"), channel),
    field("f-caller", t("filter.caller"), caller),
    h("div", { class: "field check" }, h("label", {}, signals, " ", t("filter.with_signals"))),
    h("button", { type: "submit" }, t("filter.apply")));
  const tbody = h("tbody");
  const status = h("div", { class: "list-status", role: "status" });
  const columns = ["calls.started", "calls.flow", "calls.channel", "calls.caller", "calls.duration", "calls.outcome", "calls.signals", "calls.turns", "calls.latency"];
  const tableEl = h("table", { class: "data calls" },
    h("caption", { class: "visually-hidden" }, t("calls.title")),
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, t(c))))), tbody);
  const filters = () => ({
    ...periodRange(period.value), outcome: outcome.value, channel: channel.value,
    caller: caller.value.trim(), has_signal: signals.checked ? "true" : "",
  });
  const list = pager(
    (cursor) => get("/api/monitoring/calls/history", { ...filters(), limit: PAGE, cursor }),
    (items) => Promise.all(items.map(async (call) => h("tr", { dataset: { callId: call.id } },
      cell(h("a", { href: `#/calls/${encodeURIComponent(call.id)}` }, fmtDateTime(call.started_at))),
      cell(await flowName(ctx.org, call.flow_id)),
      cell(t(`channel.${call.channel}`)),
      cell(call.caller || "–"),
      cell(fmtDuration(call.duration_seconds), "num"),
      cell(outcomeBadge(call.outcome)),
      cell(call.signal_types.length ? call.signal_types.map((type) => badge("signal", type)) : "–"),
      cell(fmtNumber(call.turn_count), "num"),
      cell(fmtMs(call.mean_voice_latency_ms), "num")))),
    tbody, status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    if (period.value !== "all") params.set("period", period.value);
    if (outcome.value) params.set("outcome", outcome.value);
    if (channel.value) params.set("channel", channel.value);
    if (caller.value.trim()) params.set("caller", caller.value.trim());
    if (signals.checked) params.set("signals", "1");
    history.replaceState(null, "", `#/calls${params.toString() ? "?" + params : ""}`);
    list.load(true);
  });
  view.append(form, h("div", { class: "table-wrap" }, tableEl), status, list.more);
  await list.load(true);
}

export async function callPage(view, ctx) {
  const back = h("a", { href: "#/calls", class: "back" }, t("call.back"));
  view.append(back);
  let call;
  try {
    call = await get(`/api/calls/${encodeURIComponent(ctx.id)}`);
  } catch (error) {
    view.append(heading(t("call.title")), message("error", explain(error)));
    return;
  }
  view.append(heading(`${t("call.title")} · ${fmtDateTime(call.started_at)}`));
  const facts = h("dl", { class: "facts" });
  const fact = (label, value) => facts.append(h("div", {}, h("dt", {}, label), h("dd", {}, value)));
  fact(t("calls.flow"), `${await flowName(ctx.org, call.flow_id)}${call.flow_version ? " v" + call.flow_version : ""}`);
  fact(t("calls.channel"), t(`channel.${call.channel}`));
  fact(t("calls.caller"), call.caller || "–");
  fact(t("calls.duration"), fmtDuration(call.duration_seconds));
  fact(t("calls.outcome"), outcomeBadge(call.outcome));
  fact(t("call.end_reason"), call.end_reason || "–");
  if (call.transferred_to) fact(t("call.transferred_to"), `${call.transferred_to} (${call.transfer_status || "–"})`);
  fact(t("calls.latency"), fmtMs(call.mean_voice_latency_ms));
  view.append(facts);

  const columns = h("div", { class: "split" });
  const left = h("section", { class: "panel", "aria-labelledby": "transcript-title" }, h("h2", { id: "transcript-title" }, t("call.transcript")));
  const right = h("div", { class: "stack" });
  columns.append(left, right);
  view.append(columns);

  // recording: fetched with the Authorization header, played from a blob URL
  const recording = h("section", { class: "panel", "aria-labelledby": "recording-title" }, h("h2", { id: "recording-title" }, t("call.recording")));
  right.append(recording);
  if (call.recording_url) {
    const audio = h("audio", { controls: true, preload: "auto", "aria-label": t("call.recording") });
    const note = h("p", { class: "help" }, t("call.stereo"));
    const state = h("div", { role: "status" }, h("span", { class: "muted" }, t("call.recording_loading")));
    recording.append(state);
    const load = async () => {
      state.replaceChildren(h("span", { class: "muted" }, t("call.recording_loading")));
      try {
        const response = await fetchRaw("GET", call.recording_url);
        const blob = await response.blob();
        const source = URL.createObjectURL(new Blob([blob], { type: "audio/wav" }));
        audio.src = source;
        ctx.cleanup(() => URL.revokeObjectURL(source));
        state.replaceChildren();
        recording.append(audio, note);
      } catch (error) {
        // a 404 for a call's own recording: the file is not in storage yet (still being written or uploaded)
        const text = error.status === 404 ? t("call.recording_pending") : `${t("call.recording_failed")} ${explain(error)}`;
        const retry = h("button", { type: "button", class: "secondary small", onclick: load }, t("call.recording_retry"));
        state.replaceChildren(h("div", { class: "message error", role: "alert", id: "recording-problem" }, h("p", {}, text), retry));
      }
    };
    await load();
  } else {
    recording.append(h("p", { class: "muted" }, call.channel === "web" || call.channel === "test" ? t("call.no_recording_text") : t("call.no_recording")));
  }

  const started = new Date(call.started_at).getTime();
  const transcript = h("ol", { class: "transcript" });
  for (const turn of call.transcript) {
    const offset = Math.max(0, (new Date(turn.at).getTime() - started) / 1000);
    transcript.append(h("li", { class: turn.speaker },
      h("span", { class: "who" }, t(`speaker.${turn.speaker}`)),
      h("span", { class: "when" }, fmtDuration(offset)),
      h("p", {}, turn.text)));
  }
  left.append(call.transcript.length ? transcript : h("p", { class: "muted" }, t("call.no_transcript")));

  // tool calls: name, status, arguments and result
  const tools = h("section", { class: "panel", "aria-labelledby": "tools-title" }, h("h2", { id: "tools-title" }, t("call.tools")));
  if (!call.tool_calls.length) tools.append(h("p", { class: "muted" }, t("call.no_tools")));
  for (const tool of call.tool_calls) {
    tools.append(h("article", { class: "tool" },
      h("header", {}, h("strong", {}, tool.tool_name), " ", badge(`tool-${tool.status}`, tool.status),
        tool.http_status ? h("span", { class: "muted" }, ` HTTP ${tool.http_status}`) : null,
        h("span", { class: "muted" }, ` · ${fmtMs(tool.latency_ms)} · ${fmtTime(tool.at)}`)),
      h("div", { class: "tool-io" },
        h("div", {}, h("h3", {}, t("call.arguments")), h("pre", {}, pretty(tool.arguments))),
        h("div", {}, h("h3", {}, t("call.result")), h("pre", {}, tool.error ? tool.error : pretty(tool.result))))));
  }
  right.append(tools);

  // latency per turn
  const latency = h("section", { class: "panel", "aria-labelledby": "latency-title" }, h("h2", { id: "latency-title" }, t("call.latency")));
  if (!call.turn_metrics.length) latency.append(h("p", { class: "muted" }, t("call.no_metrics")));
  else {
    const voiced = call.turn_metrics.some((m) => m.voice_to_voice_ms !== null && m.voice_to_voice_ms !== undefined);
    latency.append(hbars(t("call.latency_chart"), call.turn_metrics.map((m) => ({
      label: t("call.turn", { n: m.turn_index }),
      value: voiced ? m.voice_to_voice_ms : m.engine_ms,
      cls: m.interrupted ? "warn" : "",
    }))));
    latency.append(h("p", { class: "help" }, voiced ? t("call.latency_voice") : t("call.latency_engine")));
    latency.append(table(null, [
      { label: t("call.turn_col") }, { label: t("metric.stt"), class: "num" }, { label: t("metric.engine"), class: "num" },
      { label: t("metric.tool"), class: "num" }, { label: t("metric.llm"), class: "num" }, { label: t("metric.tts"), class: "num" },
      { label: t("metric.v2v"), class: "num" },
    ], call.turn_metrics.map((m) => h("tr", {}, cell(String(m.turn_index)), cell(fmtMs(m.stt_final_ms), "num"),
      cell(fmtMs(m.engine_ms), "num"), cell(fmtMs(m.tool_ms), "num"), cell(fmtMs(m.llm_first_token_ms), "num"),
      cell(fmtMs(m.tts_first_byte_ms), "num"), cell(fmtMs(m.voice_to_voice_ms), "num"))), { class: "data compact" }));
  }
  right.append(latency);

  // the call's signals, with the same actions as the inbox
  const signals = h("section", { class: "panel", "aria-labelledby": "call-signals-title" }, h("h2", { id: "call-signals-title" }, t("call.signals")));
  right.append(signals);
  try {
    const page = await get("/api/brain/signals", { call_id: call.id, limit: 200 });
    if (!page.items.length) signals.append(h("p", { class: "muted" }, t("call.no_signals")));
    else signals.append(signalTable(page.items.map((signal) => signalRow(signal, ctx, false))));
  } catch (error) {
    signals.append(message("error", explain(error)));
  }
}

// --- signals ----------------------------------------------------------------------------------------

function signalTable(rows) {
  return table(null, [
    { label: t("signals.when") }, { label: t("signals.type") }, { label: t("signals.severity") },
    { label: t("signals.call") }, { label: t("signals.status") }, { label: t("signals.actions") },
  ], rows, { class: "data signals" });
}

function signalRow(signal, ctx, withCall) {
  const row = h("tr", { dataset: { signalId: signal.id } });
  const actions = h("td", { class: "actions" });
  const statusCell = cell(statusBadge(signal.status));
  const render = (current) => {
    statusCell.replaceChildren(statusBadge(current.status));
    actions.replaceChildren();
    if (current.status === "open") actions.append(action("acknowledged", t("signals.acknowledge")));
    if (current.status !== "resolved") actions.append(action("resolved", t("signals.resolve")));
    if (current.status === "resolved") actions.append(h("span", { class: "muted" }, current.resolved_by ? t("signals.resolved_by", { who: current.resolved_by }) : ""));
  };
  const action = (status, label) => h("button", {
    type: "button", class: "small", "aria-label": `${label}: ${signal.type}`,
    onclick: async (event) => {
      event.currentTarget.disabled = true;
      try {
        const updated = await patch(`/api/brain/signals/${encodeURIComponent(signal.id)}`, { status });
        render(updated);
        announce(t(`signals.done.${status}`, { type: signal.type }));
      } catch (error) {
        announce(explain(error), true);
        render(signal);
      }
    },
  }, label);
  const details = Object.entries(signal.details || {}).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
  row.append(
    cell(fmtDateTime(signal.occurred_at)),
    cell([h("strong", {}, signal.type), details ? h("div", { class: "muted small" }, details) : null]),
    cell(severityBadge(signal.severity)),
    cell(signal.call_id && withCall ? h("a", { href: `#/calls/${encodeURIComponent(signal.call_id)}` }, t("signals.open_call")) : (signal.call_id ? "✓" : "–")),
    statusCell, actions);
  render(signal);
  return row;
}

export async function signalsPage(view, ctx) {
  view.append(heading(t("signals.title")), h("p", { class: "lead" }, t("signals.lead")));
  const status = select([["open", t("signal.status.open")], ["acknowledged", t("signal.status.acknowledged")], ["resolved", t("signal.status.resolved")], ["", t("filter.any")]], ctx.query.get("status") ?? "open");
  const type = h("input", { type: "search", maxlength: 60, value: ctx.query.get("type") || "", autocomplete: "off" });
  const form = h("form", { class: "filters", "aria-label": t("signals.filters") },
    field("s-status", t("signals.status"), status), field("s-type", t("signals.type"), type),
    h("button", { type: "submit" }, t("filter.apply")));
  const tableEl = signalTable([]);
  const tbody = tableEl.querySelector("tbody");
  const listStatus = h("div", { class: "list-status", role: "status" });
  const list = pager(
    (cursor) => get("/api/brain/signals", { status: status.value, type: type.value.trim(), limit: PAGE, cursor }),
    async (items) => items.map((signal) => signalRow(signal, ctx, true)), tbody, listStatus);
  form.addEventListener("submit", (event) => { event.preventDefault(); list.load(true); });
  view.append(form, h("div", { class: "table-wrap" }, tableEl), listStatus, list.more);
  await list.load(true);
}

// --- live calls -------------------------------------------------------------------------------------

export async function livePage(view, ctx) {
  view.append(heading(t("live.title")), h("p", { class: "lead" }, t("live.lead")));
  const refresh = h("button", { type: "button", class: "secondary" }, t("live.refresh"));
  const tbody = h("tbody");
  const listStatus = h("div", { class: "list-status", role: "status" });
  const tableEl = table(null, [
    { label: t("calls.started") }, { label: t("calls.flow") }, { label: t("calls.channel") }, { label: t("calls.caller") },
    { label: t("live.node") }, { label: t("calls.turns"), class: "num" }, { label: t("live.activity") }, { label: t("signals.actions") },
  ], []);
  tableEl.querySelector("tbody").replaceWith(tbody);
  const row = async (live) => {
    const actions = h("td", { class: "actions" });
    const end = h("button", { type: "button", class: "small danger", "aria-label": `${t("live.end")}: ${live.id}`, onclick: async () => {
      end.disabled = true;
      try { await post(`/api/sessions/${encodeURIComponent(live.id)}/end`); announce(t("live.ended")); list.load(true); }
      catch (error) { announce(explain(error), true); end.disabled = false; }
    } }, t("live.end"));
    actions.append(end);
    if (live.channel !== "whatsapp") {
      let voiced = live.voiced;
      const mute = h("button", { type: "button", class: "small secondary", "aria-pressed": String(!voiced), onclick: async () => {
        mute.disabled = true;
        try {
          await post(`/api/sessions/${encodeURIComponent(live.id)}/voice`, { voiced: !voiced });
          voiced = !voiced;
          mute.textContent = voiced ? t("live.mute") : t("live.unmute");
          mute.setAttribute("aria-pressed", String(!voiced));
          announce(voiced ? t("live.unmuted") : t("live.muted"));
        } catch (error) { announce(explain(error), true); }
        mute.disabled = false;
      } }, voiced ? t("live.mute") : t("live.unmute"));
      actions.append(mute);
    }
    return h("tr", { dataset: { sessionId: live.id } }, cell(fmtTime(live.started_at)), cell(await flowName(ctx.org, live.flow_id)),
      cell(t(`channel.${live.channel}`)), cell(live.caller || "–"), cell(live.current_node || "–"),
      cell(fmtNumber(live.turns), "num"), cell(fmtTime(live.last_activity_at)), actions);
  };
  const list = pager((cursor) => get("/api/monitoring/sessions/live", { limit: PAGE, cursor }),
    (items) => Promise.all(items.map(row)), tbody, listStatus);
  refresh.addEventListener("click", () => list.load(true));
  view.append(h("div", { class: "toolbar" }, refresh), h("div", { class: "table-wrap" }, tableEl), listStatus, list.more);
  await list.load(true);
  const timer = setInterval(() => { if (!document.hidden) list.load(true); }, 15000);
  ctx.cleanup(() => clearInterval(timer));
}

// --- usage and reports ------------------------------------------------------------------------------

export async function usagePage(view, ctx) {
  view.append(heading(t("usage.title")));
  const range = select([["7", t("usage.days", { n: 7 })], ["30", t("usage.days", { n: 30 })], ["90", t("usage.days", { n: 90 })]], ctx.query.get("days") || "30");
  const form = h("form", { class: "filters" }, field("u-range", t("usage.range"), range), h("button", { type: "submit" }, t("filter.apply")));
  const body = h("div", { class: "usage-body" });
  view.append(form, body);
  async function load() {
    body.replaceChildren(h("p", { class: "muted", role: "status" }, t("list.loading")));
    const since = dayStart(-(Number(range.value) - 1));
    try {
      const [summary, usage] = await Promise.all([
        get("/api/reporting/calls/summary", { since }),
        get("/api/billing/usage", { since, granularity: "day" }),
      ]);
      body.replaceChildren();
      const totals = usage.totals;
      body.append(h("div", { class: "cards" },
        [["usage.calls", fmtNumber(totals.calls)], ["usage.minutes", fmtNumber(totals.minutes, 2)],
          ["usage.llm_tokens", fmtNumber(totals.llm_prompt_tokens + totals.llm_completion_tokens)],
          ["usage.tts_chars", fmtNumber(totals.tts_characters)], ["usage.stt_seconds", fmtNumber(totals.stt_seconds, 1)]]
          .map(([key, value]) => h("section", { class: "card" }, h("h2", {}, t(key)), h("p", { class: "figure" }, value)))));
      if (!summary.days.length) { body.append(h("p", { class: "muted" }, t("usage.no_calls"))); return; }
      const rows = summary.days.map((d) => ({ label: d.day.slice(5), values: { ...d.outcomes, mean: d.mean_voice_latency_ms, p95: d.p95_voice_latency_ms } }));
      const outcomeSeries = OUTCOMES.map((o) => ({ key: o, label: t(`outcome.${o}`), cls: `o-${o}` }));
      body.append(h("section", { class: "panel" }, h("h2", {}, t("usage.calls_per_day")),
        stackedBars(t("usage.calls_per_day"), t("usage.calls_chart_desc"), outcomeSeries, rows)));
      body.append(h("section", { class: "panel" }, h("h2", {}, t("usage.latency")),
        lines(t("usage.latency"), t("usage.latency_desc"), [{ key: "mean", label: t("usage.mean"), cls: "l-mean" }, { key: "p95", label: "p95", cls: "l-p95" }], rows)));
      body.append(h("details", { class: "panel" }, h("summary", {}, t("usage.table")), table(null, [
        { label: t("usage.day") }, { label: t("usage.calls"), class: "num" }, { label: t("usage.minutes"), class: "num" },
        ...OUTCOMES.map((o) => ({ label: t(`outcome.${o}`), class: "num" })), { label: t("usage.mean"), class: "num" },
        { label: "p95", class: "num" }, { label: t("usage.top_signals") },
      ], summary.days.map((d) => h("tr", {}, cell(d.day), cell(fmtNumber(d.calls), "num"), cell(fmtNumber(d.minutes, 2), "num"),
        ...OUTCOMES.map((o) => cell(fmtNumber(d.outcomes[o]), "num")), cell(fmtMs(d.mean_voice_latency_ms), "num"),
        cell(fmtMs(d.p95_voice_latency_ms), "num"), cell(d.top_signals.map((sig) => `${sig.type} (${sig.count})`).join(", ") || "–"))))));
    } catch (error) {
      body.replaceChildren(message("error", explain(error)));
    }
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); load(); });
  await load();
}

// --- evaluation runs ----------------------------------------------------------------------------------

export async function evaluationsPage(view, ctx) {
  view.append(heading(t("evals.title")), h("p", { class: "lead" }, t("evals.lead")));
  const tbody = h("tbody");
  const listStatus = h("div", { class: "list-status", role: "status" });
  const tableEl = table(null, [
    { label: t("evals.started") }, { label: t("evals.suite") }, { label: t("calls.flow") }, { label: t("evals.mode") },
    { label: t("evals.status") }, { label: t("evals.progress"), class: "num" }, { label: t("evals.passed"), class: "num" },
    { label: t("evals.failed"), class: "num" }, { label: t("evals.other"), class: "num" },
  ], []);
  tableEl.querySelector("tbody").replaceWith(tbody);
  // GET /api/evaluations/runs (docs/evaluations.md): counts per scenario state, passed once done
  const verdict = (run) => run.passed === true ? badge("run-passed", t("evals.green"))
    : run.passed === false ? badge("run-failed", t("evals.red")) : null;
  const list = pager((cursor) => get("/api/evaluations/runs", { limit: PAGE, cursor }),
    async (items) => items.map((run) => {
      const counts = run.counts || {};
      return h("tr", { dataset: { runId: run.id } },
        cell(h("a", { href: `#/evaluations/${encodeURIComponent(run.id)}`, "aria-label": t("evals.open_run", { suite: run.suite_name || run.dataset_id, when: fmtDateTime(run.created_at) }) },
          fmtDateTime(run.created_at))), cell(run.suite_name || run.dataset_id || "–"),
        cell(`${run.flow_name || run.flow_id || "–"} ${run.flow_version ? "v" + run.flow_version : t("evals.draft")}`),
        cell(run.mode || "–"), cell([badge(`run-${run.status}`, t(`evals.state.${run.status}`)), " ", verdict(run)]),
        cell(`${fmtNumber(run.done)} / ${fmtNumber(run.total)}`, "num"),
        cell(fmtNumber(counts.passed), "num"), cell(fmtNumber(counts.failed), "num"),
        cell(fmtNumber((counts.skipped || 0) + (counts.error || 0)), "num"));
    }),
    tbody, listStatus);
  view.append(h("div", { class: "table-wrap" }, tableEl), listStatus, list.more);
  await list.load(true);
  // The evaluations API is being built beside this console: a server without it answers 404.
  if (listStatus.querySelector(".message.error") && (await evaluationsMissing())) {
    tableEl.hidden = true;
    listStatus.replaceChildren(h("div", { class: "placeholder", id: "evals-unavailable" },
      h("h2", {}, t("evals.unavailable_title")), h("p", {}, t("evals.unavailable"))));
  }
}

async function evaluationsMissing() {
  try {
    await get("/api/evaluations/runs", { limit: 1 });
    return false;
  } catch (error) {
    return error instanceof ApiError && (error.status === 404 || error.status === 405);
  }
}
