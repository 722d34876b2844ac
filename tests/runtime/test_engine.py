"""The flow engine on its own, with in-memory ports (no database, no network)."""

from __future__ import annotations

from typing import Any

import pytest

from parley.flows.definition import FlowDefinition
from parley.runtime.engine import MAX_STEPS_PER_TURN, FlowEngine
from parley.runtime.ports import (
    HandOver,
    KnowledgeError,
    LlmError,
    LlmReply,
    LlmToolCall,
    ToolOutcome,
    ToolSpec,
)
from parley.runtime.state import ConversationState


class Tools:
    def __init__(self, outcome: ToolOutcome | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.outcome = outcome or ToolOutcome(
            "ok", result={"success": True, "n": 1}, tool_id="tool_1", tool_name="lookup"
        )

    async def call(self, ref: str, arguments: dict[str, Any]) -> ToolOutcome:
        self.calls.append((ref, arguments))
        return self.outcome

    async def describe(self, refs: list[str]) -> list[ToolSpec]:
        return [ToolSpec(r, r, "a tool", {"type": "object", "properties": {}}) for r in refs]


class Line:
    """The call's line: answers every transfer with ``status`` and records what it was asked."""

    def __init__(self, status: str = "dialing", reason: str | None = None) -> None:
        self.status, self.reason = status, reason
        self.asked: list[tuple[str, str, str]] = []
        self.hung_up = 0

    async def transfer(self, target: str, message: str, language: str) -> HandOver:
        self.asked.append((target, message, language))
        return HandOver(self.status, "test", self.reason)  # type: ignore[arg-type]

    async def hang_up(self) -> None:
        self.hung_up += 1


class Knowledge:
    async def search(self, query: str, top_k: int, document_ids: list[str] | None) -> list[dict[str, Any]]:
        return [{"document_id": "doc_1", "document_title": "Hours", "text": "We open at 8.", "score": 1.0}]


class ScriptedLlm:
    def __init__(self, *replies: LlmReply | Exception) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LlmReply:
        self.seen.append(messages)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def flow(*nodes: dict[str, Any], start: str | None = None, **extra: Any) -> FlowDefinition:
    return FlowDefinition.model_validate(
        {"language": "en", "start_node": start or nodes[0]["id"], "nodes": list(nodes), **extra}
    )


def run_state(engine: FlowEngine, **variables: Any) -> ConversationState:
    return engine.new_state(session_id="ses_1", channel="test", variables=variables)


async def test_unknown_variables_render_as_empty_text() -> None:
    engine = FlowEngine(
        flow({"id": "a", "type": "end", "text": "Hi {{ nobody }}{{ nobody.deeper }}!"}), tools=Tools()
    )
    state = run_state(engine)
    result = await engine.start(state)
    assert result.text == "Hi !" and state.outcome == "completed"


async def test_a_loop_without_waiting_ends_safely() -> None:
    engine = FlowEngine(
        flow(
            {"id": "a", "type": "set", "assignments": {"n": "n + 1"}, "next": "b"},
            {"id": "b", "type": "branch", "conditions": [{"when": "n > -1", "next": "a"}], "default": "a"},
            variables={"n": 0},
        ),
        tools=Tools(),
    )
    state = run_state(engine)
    result = await engine.start(state)
    assert result.text == "Sorry, that did not work just now."
    assert (state.status, state.outcome, state.end_reason) == ("ended", "failed", "step_budget_exceeded")
    assert state.variables["n"] == MAX_STEPS_PER_TURN // 2
    assert any(s.type == "step_budget_exceeded" and s.source == "runtime" for s in state.signals)


@pytest.mark.parametrize(
    ("kind", "answer", "value", "extra"),
    [
        ("digits", "vier sieben eins eins", "4711", {}),
        ("digits", "four seven one one", "4711", {}),
        ("digits", "47 11", "4711", {}),
        ("digits", "doppel vier", "44", {}),
        ("digits", "zwo null", "20", {}),
        ("number", "about 12,5", 12.5, {}),
        ("number", "42", 42, {}),
        ("date", "am 24.12.2025 bitte", "2025-12-24", {}),
        ("date", "2025-01-31", "2025-01-31", {}),
        ("yes_no", "Ja, gerne", True, {}),
        ("yes_no", "nein danke", False, {}),
        ("yes_no", "no thanks", False, {}),
        ("yes_no", "yes please", True, {}),
        ("choice", "I'd like the Blue one", "blue", {"choices": ["red", "blue"]}),
        ("regex", "AB-123", "AB-123", {"pattern": "[A-Z]{2}-[0-9]{3}"}),
        ("free_text", "  whatever  ", "whatever", {}),
    ],
)
async def test_collect_understands_answers(kind: str, answer: str, value: Any, extra: dict[str, Any]) -> None:
    engine = FlowEngine(
        flow(
            {
                "id": "ask",
                "type": "collect",
                "variable": "v",
                "kind": kind,
                "prompt": "?",
                "next": "done",
                **extra,
            },
            {"id": "done", "type": "end", "text": "ok"},
        ),
        tools=Tools(),
    )
    state = run_state(engine)
    await engine.start(state)
    result = await engine.handle(state, answer)
    assert state.variables["v"] == value
    assert result.text == "ok"


@pytest.mark.parametrize(
    ("kind", "answer", "extra"),
    [
        ("digits", "vier banane", {}),
        ("digits", "1234", {"max_length": 3}),
        ("date", "31.02.2025", {}),
        ("date", "tomorrow", {}),
        ("yes_no", "maybe", {}),
        ("choice", "green", {"choices": ["red", "blue"]}),
        ("number", "lots", {}),
    ],
)
async def test_collect_reprompts_then_fails_over(kind: str, answer: str, extra: dict[str, Any]) -> None:
    engine = FlowEngine(
        flow(
            {
                "id": "ask",
                "type": "collect",
                "variable": "v",
                "kind": kind,
                "prompt": "Tell me.",
                "reprompt": "Again please.",
                "max_retries": 1,
                "on_failure": "human",
                "next": "done",
                **extra,
            },
            {"id": "done", "type": "end", "text": "ok"},
            {"id": "human", "type": "transfer", "phone_number": "+4930123456", "message": "Connecting."},
        ),
        tools=Tools(),
        calls=Line("transferred"),
    )
    state = run_state(engine)
    assert (await engine.start(state)).text == "Tell me."
    reask = (await engine.handle(state, answer)).text
    if kind == "digits" and len(answer) > extra.get("max_length", 99):  # says what was wrong
        assert reask.startswith(f"That was {len(answer)} digits; the number has at most")
    else:
        assert reask == "Again please."
    last = await engine.handle(state, answer)
    # the line says the transfer's message before it dials (it is in the transcript, not a say event)
    assert [(e.type, e.text) for e in last.events if e.type == "transfer"] == [("transfer", "Connecting.")]
    assert (state.outcome, state.transferred_to) == ("transferred", "+4930123456")
    assert state.transcript[-1].text == "Connecting."


async def test_tool_errors_follow_on_error_with_the_configured_fallback() -> None:
    tools = Tools(ToolOutcome("error", error="boom", tool_id="tool_1", tool_name="lookup"))
    engine = FlowEngine(
        flow(
            {
                "id": "t",
                "type": "tool",
                "tool": "lookup",
                "arguments": {"id": "{{ n }}", "raw": "{{ data }}"},
                "result_variable": "r",
                "on_error": "bad",
                "next": "good",
            },
            {"id": "good", "type": "end", "text": "good"},
            {"id": "bad", "type": "end", "text": "bad {{ r.error }}"},
            variables={"n": 5, "data": {"a": [1]}, "fallback": "Hold on, {{ n }}."},
        ),
        tools=tools,
    )
    state = run_state(engine)
    result = await engine.start(state)
    assert result.text == "Hold on, 5. bad boom"
    # A template that is one whole variable keeps the variable's type.
    assert tools.calls == [("lookup", {"id": 5, "raw": {"a": [1]}})]
    assert state.tool_calls[0].status == "error" and state.metrics[0].tool_ms is not None


async def test_knowledge_answers_from_hits_without_an_llm() -> None:
    engine = FlowEngine(
        flow(
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "Question?", "next": "k"},
            {
                "id": "k",
                "type": "knowledge",
                "answer": "{{ knowledge_answer }} ({{ hits[0].document_title }})",
                "result_variable": "kr",
                "next": "end",
            },
            {"id": "end", "type": "end"},
        ),
        tools=Tools(),
        knowledge=Knowledge(),
    )
    state = run_state(engine)
    await engine.start(state)
    assert (await engine.handle(state, "when do you open?")).text == "We open at 8. (Hours)"
    assert state.variables["kr"]["answer"] == "We open at 8."


async def test_knowledge_asks_the_llm_when_there_is_one() -> None:
    llm = ScriptedLlm(LlmReply("From 8 o'clock.", prompt_tokens=10, completion_tokens=3))
    engine = FlowEngine(
        flow(
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "Question?", "next": "k"},
            {"id": "k", "type": "knowledge", "next": "end"},
            {"id": "end", "type": "end"},
        ),
        tools=Tools(),
        knowledge=Knowledge(),
        llm=llm,
    )
    state = run_state(engine)
    await engine.start(state)
    assert (await engine.handle(state, "when do you open?")).text == "From 8 o'clock."
    assert "We open at 8." in llm.seen[0][0]["content"]
    assert state.usage.llm_prompt_tokens == 10


def _llm_flow() -> FlowDefinition:
    return flow(
        {
            "id": "chat",
            "type": "llm",
            "tools": ["lookup"],
            "max_turns": 2,
            "transitions": [{"name": "finish", "next": "bye"}],
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Bye."},
    )


async def test_llm_tool_call_then_transition() -> None:
    llm = ScriptedLlm(
        LlmReply(None, [LlmToolCall("c1", "lookup", '{"order_id": 7}')]),
        LlmReply("Your order is ready."),
        LlmReply("Glad to help.", [LlmToolCall("c2", "finish", "{}")]),
    )
    tools = Tools()
    engine = FlowEngine(_llm_flow(), tools=tools, llm=llm)
    state = run_state(engine)
    assert (await engine.start(state)).text == ""
    assert state.waiting is True
    first = await engine.handle(state, "order 7?")
    assert first.text == "Your order is ready."
    assert tools.calls == [("lookup", {"order_id": 7})]
    assert llm.seen[1][-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"success": true, "n": 1}'}
    second = await engine.handle(state, "thanks, bye")
    assert second.text == "Glad to help. Bye."
    assert state.outcome == "completed" and state.llm is None


async def test_llm_history_stays_bounded_and_max_turns_moves_on() -> None:
    llm = ScriptedLlm(LlmReply("one"), LlmReply("two"))
    engine = FlowEngine(_llm_flow(), tools=Tools(), llm=llm)
    state = run_state(engine)
    await engine.start(state)
    await engine.handle(state, "x" * 4000)
    result = await engine.handle(state, "y" * 4000)
    assert result.text == "two Bye."
    assert sum(len(str(m.get("content") or "")) for m in llm.seen[-1]) <= 12_000 + 4000


async def test_llm_errors_say_the_fallback_in_german() -> None:
    engine = FlowEngine(_llm_flow(), tools=Tools(), llm=ScriptedLlm(LlmError("down")))
    state = run_state(engine, language="de")
    await engine.start(state)
    result = await engine.handle(state, "hallo")
    assert result.text == "Entschuldigung, das hat gerade nicht geklappt. Bye."
    assert any(s.type == "llm_failure" for s in state.signals)


async def test_state_round_trips_through_json() -> None:
    engine = FlowEngine(
        flow(
            {
                "id": "ask",
                "type": "collect",
                "variable": "v",
                "kind": "digits",
                "prompt": "Number?",
                "next": "s",
            },
            {
                "id": "s",
                "type": "signal",
                "signal_type": "seen",
                "severity": "high",
                "details": {"v": "{{ v }}"},
                "next": "end",
            },
            {"id": "end", "type": "end", "text": "Got {{ v }}."},
        ),
        tools=Tools(),
    )
    state = run_state(engine)
    await engine.start(state)
    state = ConversationState.from_json(state.to_json())
    result = await engine.handle(state, "eins zwei drei")
    assert result.text == "Got 123."
    assert state.signals[0].type == "seen" and state.signals[0].severity == "high"
    assert [t.speaker for t in state.transcript] == ["agent", "caller", "agent"]


class BrokenKnowledge:
    async def search(self, query: str, top_k: int, document_ids: list[str] | None) -> list[dict[str, Any]]:
        raise KnowledgeError("The knowledge search failed.")


async def test_a_failing_knowledge_search_says_the_fallback() -> None:
    engine = FlowEngine(
        flow(
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "Question?", "next": "k"},
            {"id": "k", "type": "knowledge", "next": "ask"},
        ),
        tools=Tools(),
        knowledge=BrokenKnowledge(),
    )
    state = run_state(engine)
    await engine.start(state)
    result = await engine.handle(state, "opening hours?")
    assert result.text == "Sorry, that did not work just now. Question?"
    assert state.status == "active" and any(s.type == "knowledge_failure" for s in state.signals)


def _digits_flow(language: str = "en", **limits: int) -> FlowDefinition:
    return flow(
        {"id": "ask", "type": "collect", "variable": "n", "kind": "digits", "prompt": "Number?",
         "reprompt": "Again?", "next": "done", **limits},
        {"id": "done", "type": "end", "text": "Got {{ n }}."},
        language=language,
    )  # fmt: skip


async def test_a_number_in_words_answers_a_digits_question() -> None:
    engine = FlowEngine(_digits_flow("de", max_length=5), tools=Tools())
    state = run_state(engine)
    await engine.start(state)
    assert (await engine.handle(state, "siebenundvierzig elf")).text == "Got 4711."


async def test_too_many_digits_get_a_clear_reask_not_a_lookup() -> None:
    engine = FlowEngine(_digits_flow("de", max_length=5), tools=Tools())
    state = run_state(engine)
    await engine.start(state)
    answer = await engine.handle(state, "eins zwei drei vier fünf sechs sieben")
    assert "7 Ziffern" in answer.text and "höchstens 5" in answer.text
    assert "n" not in state.variables or state.variables["n"] is None
    assert (await engine.handle(state, "vier sieben eins eins")).text == "Got 4711."


async def test_a_number_split_by_a_pause_is_joined() -> None:
    engine = FlowEngine(_digits_flow(min_length=4, max_length=5), tools=Tools())
    state = run_state(engine)
    await engine.start(state)
    first = await engine.handle(state, "four seven")
    assert first.text == ""  # the caller is mid-number: nothing is said, the node listens on
    assert (await engine.handle(state, "one one")).text == "Got 4711."


async def test_a_short_answer_after_a_pause_is_reasked() -> None:
    engine = FlowEngine(_digits_flow(min_length=4, max_length=5), tools=Tools())
    state = run_state(engine)
    await engine.start(state)
    await engine.handle(state, "four")
    assert (await engine.handle(state, "seven")).text == "Again?"
