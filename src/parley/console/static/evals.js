// One evaluation run: its scenarios with pass/fail/skipped/error, and for a failure the conversation with
// the failed expectation highlighted beside the turn it belongs to (expected vs. actual).
import { get, post } from "./api.js";
import { t } from "./i18n.js";
import { announce, badge, explain, fmtDateTime, fmtMs, fmtNumber, h, message, pretty } from "./ui.js";

const PAGE = 50;
const FINISHED = ["completed", "cancelled"];

function heading(text) {
  return h("h1", { id: "page-title", tabindex: "-1" }, text);
}

export function runVerdict(run) {
  return run.passed === true ? badge("run-passed", t("evals.green"))
    : run.passed === false ? badge("run-failed", t("evals.red")) : null;
}

function resultBadge(status) {
  return badge(`result-${status}`, t(`evals.result.${status}`));
}

function value(text) {
  return h("code", { class: "value" }, text === null || text === undefined ? "–" : pretty(text));
}

/** One failed expectation: what was expected and what happened. */
function failureBox(failure, id) {
  return h("div", { class: "failure", id, role: "group", "aria-label": `${t("evals.failed_expectation")}: ${failure.expectation}` },
    h("p", { class: "failure-title" }, h("strong", {}, t("evals.failed_expectation")), " ", failure.expectation),
    h("dl", { class: "expected-actual" },
      h("dt", {}, t("evals.expected")), h("dd", { class: "expected" }, value(failure.expected)),
      h("dt", {}, t("evals.actual")), h("dd", { class: "actual" }, value(failure.actual))));
}

/** The conversation turn by turn (0 is the opening), each failure placed at its turn and marked. */
function conversation(result) {
  const byTurn = new Map();
  const general = [];
  result.failures.forEach((failure, index) => {
    const entry = { failure, id: `f-${result.id}-${index}` };
    if (failure.turn === null || failure.turn === undefined) general.push(entry);
    else byTurn.set(failure.turn, [...(byTurn.get(failure.turn) || []), entry]);
  });
  const list = h("ol", { class: "transcript eval" });
  const seen = new Set();
  for (const turn of result.turns || []) {
    seen.add(turn.turn);
    const failures = byTurn.get(turn.turn) || [];
    if (turn.caller !== null && turn.caller !== undefined) {
      list.append(h("li", { class: "caller" }, h("span", { class: "who" }, t("speaker.caller")), h("p", {}, turn.caller || t("evals.silence"))));
    }
    const item = h("li", {
      class: failures.length ? "agent failed-turn" : "agent",
      dataset: { turn: String(turn.turn) },
      "aria-describedby": failures.length ? failures.map((f) => f.id).join(" ") : null,
    },
    h("span", { class: "who" }, t("speaker.agent"), " · ", turn.turn === 0 ? t("evals.opening") : t("call.turn", { n: turn.turn }),
      h("span", { class: "muted" }, ` · ${fmtMs(turn.total_ms)}`)),
    h("p", {}, turn.reply || "–"),
    failures.map((f) => failureBox(f.failure, f.id)));
    list.append(item);
  }
  // failures on turns the conversation never reached (it ended earlier) are shown too
  for (const [turn, failures] of byTurn) if (!seen.has(turn)) general.push(...failures);
  return { list, general };
}

function toolList(result) {
  if (!result.tool_calls.length) return null;
  return h("details", { class: "tools-of-result" }, h("summary", {}, t("evals.tool_calls", { n: result.tool_calls.length })),
    result.tool_calls.map((call) => h("article", { class: "tool" },
      h("header", {}, h("strong", {}, call.tool || call.name || "tool"), " ", call.status ? badge(`tool-${call.status}`, call.status) : null),
      h("div", { class: "tool-io" },
        h("div", {}, h("h4", {}, t("call.arguments")), h("pre", {}, pretty(call.arguments))),
        h("div", {}, h("h4", {}, t("call.result")), h("pre", {}, call.error ? call.error : pretty(call.result)))))));
}

function resultArticle(result) {
  const broken = result.status === "failed" || result.status === "error";
  const summary = h("summary", {},
    resultBadge(result.status), " ", h("strong", {}, result.name),
    result.failures.length ? h("span", { class: "muted" }, ` · ${t("evals.n_failures", { n: result.failures.length })}`) : null,
    result.duration_ms !== null && result.duration_ms !== undefined ? h("span", { class: "muted" }, ` · ${fmtMs(result.duration_ms)}`) : null);
  // failures open by themselves: they are what a person came to see
  const details = h("details", { class: `scenario result-${result.status}`, open: broken, dataset: { resultId: result.id, status: result.status } }, summary);
  if (result.reason) details.append(h("p", { class: result.status === "error" ? "message error" : "muted" }, result.reason));
  const { list, general } = conversation(result);
  if (general.length) details.append(h("div", { class: "general-failures" }, general.map((f) => failureBox(f.failure, f.id))));
  if (result.turns && result.turns.length) details.append(h("h3", {}, t("call.transcript")), list);
  else if (result.status !== "skipped" && result.status !== "pending") details.append(h("p", { class: "muted" }, t("evals.no_transcript")));
  if (result.rubric && result.rubric.length) {
    details.append(h("h3", {}, t("evals.rubric")), h("ul", { class: "rubric" }, result.rubric.map((r) => h("li", {},
      badge(r.passed ? "run-passed" : "run-failed", r.passed ? t("evals.result.passed") : t("evals.result.failed")), " ",
      r.criterion || "", r.reason ? h("span", { class: "muted" }, ` — ${r.reason}`) : null))));
  }
  const tools = toolList(result);
  if (tools) details.append(tools);
  return details;
}

export async function evaluationPage(view, ctx) {
  view.append(h("a", { href: "#/evaluations", class: "back" }, t("evals.back")));
  const id = encodeURIComponent(ctx.id);
  let run;
  try {
    run = await get(`/api/evaluations/runs/${id}`);
  } catch (error) {
    view.append(heading(t("evals.run")), message("error", explain(error)));
    return;
  }
  view.append(heading(`${run.suite_name} · ${run.flow_name} ${run.flow_version ? "v" + run.flow_version : t("evals.draft")}`));
  const facts = h("dl", { class: "facts run-facts" });
  const status = h("div", { class: "list-status", role: "status" });
  const filter = h("select", { id: "r-status" },
    [["", t("filter.any")], ...["failed", "error", "passed", "skipped", "pending"].map((s) => [s, t(`evals.result.${s}`)])]
      .map(([key, label]) => h("option", { value: key }, label)));
  const cancel = h("button", { type: "button", class: "secondary danger", hidden: true }, t("evals.cancel"));
  const results = h("div", { class: "results", id: "results" });
  const more = h("button", { type: "button", class: "secondary", hidden: true }, t("list.more"));
  const canWrite = !ctx.role || ["owner", "admin", "member"].includes(ctx.role);

  const showRun = (current) => {
    run = current;
    const c = current.counts || {};
    const fact = (label, content) => h("div", {}, h("dt", {}, label), h("dd", {}, content));
    facts.replaceChildren(
      fact(t("evals.status"), [badge(`run-${current.status}`, t(`evals.state.${current.status}`)), " ", runVerdict(current)]),
      fact(t("evals.progress"), `${fmtNumber(current.done)} / ${fmtNumber(current.total)}`),
      fact(t("evals.counts"), h("span", { class: "counts" },
        ["passed", "failed", "error", "skipped"].map((k) => h("span", { class: `count count-${k}` }, `${t(`evals.result.${k}`)}: ${fmtNumber(c[k] || 0)}`)))),
      fact(t("evals.mode"), current.mode),
      fact(t("evals.started"), fmtDateTime(current.started_at || current.created_at)),
      fact(t("evals.finished"), fmtDateTime(current.finished_at)),
      fact(t("calls.flow"), h("a", { href: `#/flows/${encodeURIComponent(current.flow_id)}` }, current.flow_name)));
    cancel.hidden = !canWrite || FINISHED.includes(current.status);
  };
  showRun(run);

  let cursor = null, shown = 0, busy = false;
  async function load(reset) {
    if (busy) return;
    busy = true;
    more.disabled = true;
    if (reset) { cursor = null; shown = 0; results.replaceChildren(); }
    status.replaceChildren(h("span", { class: "muted" }, t("list.loading")));
    try {
      const page = await get(`/api/evaluations/runs/${id}/results`, { limit: PAGE, cursor, status: filter.value });
      results.append(...page.items.map(resultArticle));
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
  filter.addEventListener("change", () => load(true));
  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      showRun(await post(`/api/evaluations/runs/${id}/cancel`));
      announce(t("evals.cancelled"));
      await load(true);
    } catch (error) { announce(explain(error), true); }
    cancel.disabled = false;
  });

  view.append(facts, h("div", { class: "toolbar" },
    h("div", { class: "field inline" }, h("label", { for: "r-status" }, t("evals.show")), filter), cancel),
  h("section", { "aria-labelledby": "results-title" }, h("h2", { id: "results-title" }, t("evals.scenarios")), results, status, more));
  await load(true);

  // a run still working: its figures and scenarios are read again every few seconds until it is done
  if (!FINISHED.includes(run.status)) {
    let stopped = false;
    const timer = setInterval(async () => {
      if (stopped || document.hidden || busy) return;
      try {
        const current = await get(`/api/evaluations/runs/${id}`);
        const changed = current.done !== run.done || current.status !== run.status;
        showRun(current);
        if (changed && shown <= PAGE) await load(true);
        if (FINISHED.includes(current.status)) { stopped = true; clearInterval(timer); announce(t("evals.run_done")); }
      } catch (error) { stopped = true; clearInterval(timer); status.replaceChildren(message("error", explain(error))); }
    }, 2000);
    ctx.cleanup(() => { stopped = true; clearInterval(timer); });
  }
}
