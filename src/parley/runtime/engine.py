"""The flow engine: walks a flow definition turn by turn over a :class:`ConversationState`.

A turn starts with the session (``start``) or with a caller message (``handle``) and runs node after
node until the flow waits for the caller (a ``collect`` or ``llm`` node) or ends. Tools, knowledge
search and the LLM come in through ports, so the engine itself is fast and testable.

The agent never goes silent and never dies: a failing tool or LLM makes it say the fallback line and
follow the failure path; a turn that runs more than ``MAX_STEPS_PER_TURN`` nodes (a loop) ends the
conversation with the fallback line and outcome ``failed``; templates with unknown variables render
as empty text.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from parley.calls.contracts import Outcome, SignalRecord, ToolCallRecord, TurnMetrics, TurnRecord
from parley.flows.definition import (
    BranchNode,
    CollectNode,
    EndNode,
    FlowDefinition,
    KnowledgeNode,
    LlmNode,
    SayNode,
    SetNode,
    SignalNode,
    ToolNode,
    TransferNode,
    assigned_variables,
)
from parley.flows.expressions import ExpressionError, evaluate
from parley.kit.metrics import observe_turn
from parley.kit.templates import TemplateRenderError, is_straight_line, render_template
from parley.runtime import spoken
from parley.runtime.numbers import spoken_digits, too_many_digits
from parley.runtime.ports import (
    CallControlPort,
    HandOver,
    KnowledgeError,
    KnowledgePort,
    LlmError,
    LlmPort,
    LlmReply,
    StreamingLlmPort,
    ToolOutcome,
    ToolPort,
)
from parley.runtime.state import ConversationState, LlmNodeState, TransferState
from parley.runtime.validators import parse_answer

MAX_STEPS_PER_TURN = 100
MAX_TOOL_ROUNDS = 3
LLM_HISTORY_MESSAGES = 20
LLM_HISTORY_CHARS = 12_000
TOOL_RESULT_CHARS = 4_000

DEFAULT_FALLBACK = {
    "de": "Entschuldigung, das hat gerade nicht geklappt.",
    "en": "Sorry, that did not work just now.",
}

# Said when a transfer cannot start or the dialled line does not connect (the flow variable
# ``transfer_failed``, a template, overrides them).
TRANSFER_APOLOGY = {
    "busy": {
        "de": "Entschuldigung, dort ist gerade besetzt. Ich bin wieder für Sie da.",
        "en": "Sorry, that line is busy right now. I am back with you.",
    },
    "no-answer": {
        "de": "Entschuldigung, dort nimmt gerade niemand ab. Ich bin wieder für Sie da.",
        "en": "Sorry, nobody is answering right now. I am back with you.",
    },
    "failed": {
        "de": "Entschuldigung, ich kann Sie gerade nicht verbinden.",
        "en": "Sorry, I cannot connect you right now.",
    },
}
NO_LINE = "This conversation has no phone line that could be transferred (a web or text conversation)."

# Tool statuses that carry an answer the flow goes on with (``not_found`` is "no such order").
ANSWERED = ("ok", "not_found")

EventType = Literal["say", "tool_call", "signal", "transfer", "end"]

# Receives ``(node_id, text)`` for each piece of an ``llm`` node's text while the model generates it.
TextSink = Callable[[str, str], Awaitable[None]]


@dataclass
class AgentEvent:
    type: EventType
    node_id: str | None = None
    text: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class TurnResult:
    events: list[AgentEvent] = field(default_factory=list)
    engine_ms: float = 0.0
    tool_ms: float = 0.0
    llm_ms: float = 0.0
    # From the start of the turn's first LLM request to the first piece of model text (None: no text).
    llm_first_token_ms: float | None = None

    @property
    def text(self) -> str:
        return " ".join(e.text for e in self.events if e.type == "say" and e.text)


class _Wait:
    pass


WAIT = _Wait()
Step = str | None | _Wait  # the next node id; None ends the conversation; WAIT waits for the caller


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Turn:
    result: TurnResult
    pending_user: str | None = None
    on_text: TextSink | None = None
    llm_started: float | None = None
    # A tool or LLM failure in this turn (``tool_failure``/``llm_failure``): a flow that ends in the same
    # turn, down the failure's path, ends as ``failed`` with it as the reason, not ``completed``.
    failure: str | None = None


class FlowEngine:
    def __init__(
        self,
        definition: FlowDefinition,
        *,
        tools: ToolPort,
        knowledge: KnowledgePort | None = None,
        llm: LlmPort | None = None,
        calls: CallControlPort | None = None,
    ) -> None:
        self.definition = definition
        self.nodes = {node.id: node for node in definition.nodes}
        self.tools = tools
        self.knowledge = knowledge
        self.llm = llm
        # the live call's line (transfers); None: the conversation has none (web, text)
        self.calls = calls

    # --- setting up ----------------------------------------------------------------------------

    def new_state(
        self,
        *,
        session_id: str,
        channel: str,
        caller: str | None = None,
        callee: str | None = None,
        variables: dict[str, Any] | None = None,
    ) -> ConversationState:
        values: dict[str, Any] = {}
        for node in self.definition.nodes:
            for name in assigned_variables(node):
                values[name] = None
        values.update(self.definition.variables)
        values.update(
            caller_number=caller,
            called_number=callee,
            session_id=session_id,
            channel=channel,
            language=self.definition.language,
            last_user_message="",
        )
        values.update(variables or {})
        return ConversationState(current_node=self.definition.start_node, variables=values)

    @property
    def language(self) -> str:
        return self.definition.language

    def fallback_text(self, state: ConversationState) -> str:
        configured = state.variables.get("fallback") or self.definition.variables.get("fallback")
        if isinstance(configured, str) and configured.strip():
            return self._render(configured, state)
        return DEFAULT_FALLBACK.get(self._language(state), DEFAULT_FALLBACK["en"])

    def _language(self, state: ConversationState) -> str:
        return str(state.variables.get("language") or self.definition.language)[:2]

    # --- turns ---------------------------------------------------------------------------------

    async def start(self, state: ConversationState) -> TurnResult:
        """Run the opening turn: from the start node until the flow first waits or ends."""
        turn = _Turn(TurnResult())
        started = time.perf_counter()
        await self._run(state, turn)
        await self._hang_up_if_ended(state)
        return self._finish(state, turn, started)

    async def handle(
        self, state: ConversationState, text: str, *, on_text: TextSink | None = None
    ) -> TurnResult:
        """Take the caller's message and run until the flow waits again or ends.

        ``on_text`` receives the text of ``llm`` nodes piece by piece while the model generates it
        (the same text is in the turn's ``say`` events at the end).
        """
        turn = _Turn(TurnResult(), on_text=on_text)
        started = time.perf_counter()
        if state.status != "active" or state.transferring:
            # While a transfer dials the caller is not in the flow; nothing they send moves it.
            return turn.result
        state.transcript.append(
            TurnRecord(
                index=len(state.transcript),
                speaker="caller",
                text=text,
                at=_now(),
                node_id=state.current_node,
            )
        )
        state.variables["last_user_message"] = text
        node = self.nodes.get(state.current_node or "")
        if state.waiting and isinstance(node, CollectNode):
            state.waiting = False
            step = await self._answer_collect(node, state, turn, text)
            if isinstance(step, _Wait):
                state.waiting = True
            else:
                self._move(state, turn, step)
        elif state.waiting and isinstance(node, LlmNode):
            state.waiting = False
            turn.pending_user = text
        else:
            turn.pending_user = text
        if state.status == "active" and not state.waiting:
            await self._run(state, turn)
        await self._hang_up_if_ended(state)
        return self._finish(state, turn, started)

    async def transfer_ended(
        self, state: ConversationState, status: str, *, caller_gone: bool = False
    ) -> TurnResult:
        """The provider reports how a dialling transfer ended. ``completed``/``answered``: the caller
        is with the target, the conversation ends as ``transferred``. Anything else (``busy``,
        ``no-answer``, ``failed``, ``canceled``): the caller is back, hears the apology and the flow
        continues at the transfer's failure branch (or ends as ``failed`` without one); a caller who
        hung up while it rang (``caller_gone``) ends it as ``abandoned``."""
        turn = _Turn(TurnResult())
        started = time.perf_counter()
        transfer = state.transfer
        if state.status != "active" or transfer is None or transfer.status != "dialing":
            return turn.result  # reported twice, or the session ended meanwhile: nothing to do
        if status in ("completed", "answered", "in-progress"):
            transfer.status = "transferred"
            state.transferred_to, state.transferred_at = transfer.to, _now()
            self._finish_conversation(state, turn, "transferred", "transferred")
            return self._finish(state, turn, started)
        transfer.status = status if status in ("busy", "no-answer", "canceled") else "failed"  # type: ignore[assignment]
        if caller_gone:
            self._finish_conversation(state, turn, "abandoned", "caller_hung_up")
            return self._finish(state, turn, started)
        transfer.resume_index = len(state.transcript)
        state.waiting = False
        self._transfer_failed(state, turn, transfer.node_id, transfer.to, transfer.status, None)
        node = self.nodes.get(transfer.node_id)
        if isinstance(node, LlmNode):
            state.waiting = True  # back in the conversation with the model: the caller speaks next
        elif transfer.next is None:
            self._finish_conversation(state, turn, "failed", "transfer_failed")
        else:
            self._move(state, turn, transfer.next)
            await self._run(state, turn)
        await self._hang_up_if_ended(state)
        return self._finish(state, turn, started)

    def end(self, state: ConversationState, outcome: Outcome, reason: str) -> None:
        """End the conversation from outside (the caller hung up, an idle timeout...)."""
        if state.status == "active":
            state.status = "ended"
            state.outcome = outcome
            state.end_reason = reason
            state.waiting = False

    def _finish(self, state: ConversationState, turn: _Turn, started: float) -> TurnResult:
        result = turn.result
        total = (time.perf_counter() - started) * 1000
        result.engine_ms = round(max(total - result.tool_ms - result.llm_ms, 0.0), 3)
        # The transfer's message is said by the line before it dials (not by the voice pipeline).
        said = [e for e in result.events if e.type in ("say", "transfer") and e.text]
        for event in said:
            state.transcript.append(
                TurnRecord(
                    index=len(state.transcript),
                    speaker="agent",
                    text=event.text or "",
                    at=_now(),
                    node_id=event.node_id,
                    engine_ms=result.engine_ms if event is said[-1] else None,
                )
            )
        if said or result.events:
            observe_turn(
                {
                    "engine_ms": result.engine_ms,
                    "tool_ms": result.tool_ms or None,
                    "llm_first_token_ms": result.llm_first_token_ms,
                    "llm_total_ms": result.llm_ms or None,
                }
            )
            state.metrics.append(
                TurnMetrics(
                    turn_index=len(state.metrics),
                    engine_ms=result.engine_ms,
                    tool_ms=round(result.tool_ms, 3) if result.tool_ms else None,
                    llm_first_token_ms=(
                        round(result.llm_first_token_ms, 3) if result.llm_first_token_ms is not None else None
                    ),
                    llm_total_ms=round(result.llm_ms, 3) if result.llm_ms else None,
                )
            )
        return result

    async def _run(self, state: ConversationState, turn: _Turn) -> None:
        steps = 0
        while state.status == "active":
            steps += 1
            node = self.nodes.get(state.current_node or "")
            if steps > MAX_STEPS_PER_TURN or node is None:
                reason = "step_budget_exceeded" if node is not None else "unknown_node"
                self._runtime_signal(state, reason, {"node": state.current_node})
                self._say(turn, state, self.fallback_text(state), state.current_node)
                self._finish_conversation(state, turn, "failed", reason)
                return
            step = await self._step(node, state, turn)
            if isinstance(step, _Wait):
                state.waiting = True
                return
            self._move(state, turn, step)

    def _move(self, state: ConversationState, turn: _Turn, target: str | None) -> None:
        if state.status != "active":
            return
        if target is None:
            self._finish_conversation(state, turn, "completed", "flow_completed")
            return
        if state.llm is not None and state.llm.node_id != target:
            state.llm = None
        state.current_node = target

    def _finish_conversation(
        self, state: ConversationState, turn: _Turn, outcome: Outcome, reason: str
    ) -> None:
        if state.status != "active":
            return
        if outcome == "completed" and turn.failure is not None:
            outcome, reason = "failed", turn.failure
        state.status = "ended"
        state.outcome = outcome
        state.end_reason = reason
        state.waiting = False
        turn.result.events.append(
            AgentEvent("end", state.current_node, data={"outcome": outcome, "reason": reason})
        )

    # --- helpers -------------------------------------------------------------------------------

    def _context(self, state: ConversationState) -> dict[str, Any]:
        now = _now()
        return {**state.variables, "now": now.isoformat(timespec="seconds"), "today": now.date().isoformat()}

    def _render(self, text: str, state: ConversationState, extra: dict[str, Any] | None = None) -> str:
        if not text:
            return ""
        try:
            return render_template(text, {**self._context(state), **(extra or {})}).strip()
        except TemplateRenderError as exc:
            self._runtime_signal(state, "template_error", {"error": str(exc)[:300]})
            return ""

    async def _arender(self, text: str, state: ConversationState, extra: dict[str, Any] | None = None) -> str:
        if "{" not in text:  # no template syntax: the text is its own rendering
            return text.strip()
        if is_straight_line(text):  # one pass over the data: cheaper here than a thread hop
            return self._render(text, state, extra)
        # In a worker thread: a template within its budget still never holds up the event loop.
        return await asyncio.to_thread(self._render, text, state, extra)

    def _render_value(self, value: Any, state: ConversationState) -> Any:
        if isinstance(value, str):
            stripped = value.strip()
            if stripped.startswith("{{") and stripped.endswith("}}") and stripped.count("{{") == 1:
                name = stripped[2:-2].strip()
                if name.isidentifier() and name in state.variables:
                    return state.variables[name]
            return self._render(value, state)
        if isinstance(value, dict):
            return {k: self._render_value(v, state) for k, v in value.items()}
        if isinstance(value, list):
            return [self._render_value(v, state) for v in value]
        return value

    def _say(self, turn: _Turn, state: ConversationState, text: str, node_id: str | None) -> None:
        if text:
            turn.result.events.append(AgentEvent("say", node_id, text=text))

    def _runtime_signal(self, state: ConversationState, kind: str, details: dict[str, Any]) -> None:
        state.signals.append(
            SignalRecord(type=kind[:60], severity="medium", details=details, at=_now(), source="runtime")
        )

    # --- transfers -----------------------------------------------------------------------------

    async def _hang_up_if_ended(self, state: ConversationState) -> None:
        # A transferred call belongs to the target now; any other end of the flow ends the call.
        if state.status == "ended" and state.outcome != "transferred" and self.calls is not None:
            await self.calls.hang_up()

    async def _hand_over(
        self,
        node_id: str,
        target: str,
        message: str,
        failure_next: str | None,
        state: ConversationState,
        turn: _Turn,
    ) -> HandOver:
        """Ask the line to move the call to ``target``. Dialling or done: the message goes with the
        transfer (the line says it before it dials) and the state records it; otherwise nothing is
        said here and the caller decides what follows."""
        language = str(state.variables.get("language") or self.definition.language)
        text = await self._arender(message, state)
        if self.calls is None:
            handover = HandOver("unavailable", reason=NO_LINE)
        else:
            handover = await self.calls.transfer(target, text, language)
        state.transfer = TransferState(
            to=target,
            node_id=node_id,
            status=handover.status,
            provider=handover.provider,
            requested_at=_now(),
            next=failure_next,
        )
        if handover.status not in ("dialing", "transferred"):
            return handover
        turn.result.events.append(
            AgentEvent(
                "transfer",
                node_id,
                text=text or None,
                data={"to": target, "status": handover.status, "provider": handover.provider},
            )
        )
        if handover.status == "transferred":
            state.transferred_to, state.transferred_at = target, _now()
            self._finish_conversation(state, turn, "transferred", "transferred")
        return handover

    def _transfer_failed(
        self,
        state: ConversationState,
        turn: _Turn,
        node_id: str,
        target: str,
        status: str,
        reason: str | None,
    ) -> None:
        """The transfer did not connect: a runtime signal, a ``transfer`` event and the apology."""
        details: dict[str, Any] = {"node": node_id, "to": target, "status": status}
        if reason:
            details["reason"] = reason[:300]
        self._runtime_signal(state, "transfer_failed", details)
        turn.result.events.append(
            AgentEvent("transfer", node_id, data={"to": target, "status": status, "reason": reason})
        )
        self._say(turn, state, self.transfer_apology(state, status), node_id)

    def transfer_apology(self, state: ConversationState, status: str) -> str:
        configured = state.variables.get("transfer_failed") or self.definition.variables.get(
            "transfer_failed"
        )
        if isinstance(configured, str) and configured.strip():
            return self._render(configured, state, {"transfer_status": status})
        language = str(state.variables.get("language") or self.definition.language)[:2]
        lines = TRANSFER_APOLOGY.get(status, TRANSFER_APOLOGY["failed"])
        return lines.get(language, lines["en"])

    async def _act(
        self,
        outcome: ToolOutcome,
        node_id: str,
        failure_next: str | None,
        state: ConversationState,
        turn: _Turn,
    ) -> None:
        """A tool that acts on the conversation: end it, or transfer the call. A transfer that cannot
        start turns the tool's outcome into an error (the caller's failure path speaks)."""
        action = outcome.action or {}
        if outcome.status != "ok" or not action:
            return
        if action.get("action") == "end_session":
            self._say(turn, state, await self._arender(str(action.get("message") or ""), state), node_id)
            self._finish_conversation(state, turn, "completed", "ended_by_agent")
            outcome.result = {"action": "end_session", "ended": True}
            return
        if action.get("action") == "transfer":
            target = str(action.get("to") or "")
            handover = await self._hand_over(
                node_id, target, str(action.get("message") or ""), failure_next, state, turn
            )
            outcome.result = {"action": "transfer", "to": target, "status": handover.status}
            if handover.status not in ("dialing", "transferred"):
                outcome.status = "error"
                outcome.error = handover.reason or "The transfer could not start."
                self._runtime_signal(
                    state,
                    "transfer_failed",
                    {"node": node_id, "to": target, "status": handover.status, "reason": outcome.error[:300]},
                )

    # --- nodes ---------------------------------------------------------------------------------

    async def _step(self, node: Any, state: ConversationState, turn: _Turn) -> Step:
        if isinstance(node, SayNode):
            self._say(turn, state, await self._arender(node.text, state), node.id)
            return node.next
        if isinstance(node, CollectNode):
            state.retries[node.id] = 0
            self._say(turn, state, await self._arender(node.prompt, state), node.id)
            return WAIT
        if isinstance(node, ToolNode):
            return await self._tool_node(node, state, turn)
        if isinstance(node, BranchNode):
            return self._branch(node, state)
        if isinstance(node, LlmNode):
            return await self._llm_node(node, state, turn)
        if isinstance(node, KnowledgeNode):
            return await self._knowledge_node(node, state, turn)
        if isinstance(node, TransferNode):
            handover = await self._hand_over(node.id, node.phone_number, node.message, node.next, state, turn)
            if handover.status == "dialing":
                return WAIT
            if handover.status == "transferred":
                return None
            self._transfer_failed(state, turn, node.id, node.phone_number, handover.status, handover.reason)
            if node.next is None:
                self._finish_conversation(state, turn, "failed", "transfer_failed")
            return node.next
        if isinstance(node, SetNode):
            return self._set(node, state, turn)
        if isinstance(node, SignalNode):
            details = await asyncio.to_thread(self._render_value, dict(node.details), state)
            state.signals.append(
                SignalRecord(
                    type=node.signal_type,
                    severity=node.severity,
                    details={**details, "node": node.id},
                    at=_now(),
                    source="flow",
                )
            )
            turn.result.events.append(AgentEvent("signal", node.id, data={"type": node.signal_type}))
            return node.next
        if isinstance(node, EndNode):
            self._say(turn, state, await self._arender(node.text, state), node.id)
            self._finish_conversation(state, turn, "completed", "flow_completed")
            return None
        raise AssertionError(f"unknown node type {type(node).__name__}")  # pragma: no cover

    async def _answer_collect(
        self, node: CollectNode, state: ConversationState, turn: _Turn, text: str
    ) -> Step:
        reask: str | None = None
        if node.kind == "digits":
            heard = spoken_digits(text[:4000])
            earlier = state.partial_digits.pop(node.id, "")
            if heard is not None and earlier:
                text = earlier + heard  # the second half of a number split by a pause
                heard = text
            if heard is not None and not earlier and node.min_length and len(heard) < node.min_length:
                # the caller paused mid-number: keep what was heard and listen on, without a word
                state.partial_digits[node.id] = heard
                return WAIT
            if heard is not None and node.max_length and len(heard) > node.max_length:
                reask = too_many_digits(self._language(state), len(heard), node.max_length)
        value = parse_answer(text, node)
        if value is not None:
            state.variables[node.variable] = value
            state.retries.pop(node.id, None)
            return node.next
        retries = state.retries.get(node.id, 0) + 1
        state.retries[node.id] = retries
        if retries <= node.max_retries:
            self._say(turn, state, reask or await self._arender(node.reprompt or node.prompt, state), node.id)
            return WAIT
        state.retries.pop(node.id, None)
        if node.on_failure:
            return node.on_failure
        self._say(turn, state, self.fallback_text(state), node.id)
        self._finish_conversation(state, turn, "failed", "collect_failed")
        return None

    def _branch(self, node: BranchNode, state: ConversationState) -> Step:
        context = self._context(state)
        for condition in node.conditions:
            try:
                if evaluate(condition.when, context):
                    return condition.next
            except ExpressionError as exc:
                self._runtime_signal(
                    state,
                    "expression_error",
                    {"node": node.id, "expression": condition.when, "error": str(exc)},
                )
        return node.default

    def _set(self, node: SetNode, state: ConversationState, turn: _Turn) -> Step:
        for name, expression in node.assignments.items():
            try:
                state.variables[name] = evaluate(expression, self._context(state))
            except ExpressionError as exc:
                self._runtime_signal(
                    state, "expression_error", {"node": node.id, "expression": expression, "error": str(exc)}
                )
                state.variables[name] = None
        return node.next

    async def _call_tool(
        self,
        ref: str,
        arguments: dict[str, Any],
        node_id: str,
        state: ConversationState,
        turn: _Turn,
        failure_next: str | None = None,
    ) -> ToolOutcome:
        started = time.perf_counter()
        outcome = await self.tools.call(ref, arguments)
        turn.result.tool_ms += (time.perf_counter() - started) * 1000
        await self._act(outcome, node_id, failure_next, state, turn)
        state.tool_calls.append(
            ToolCallRecord(**outcome.recorded(), node_id=node_id, arguments=arguments, at=_now())
        )
        turn.result.events.append(
            AgentEvent(
                "tool_call",
                node_id,
                data={
                    "tool": outcome.tool_name,
                    "status": outcome.status,
                    "http_status": outcome.http_status,
                    # what was asked and answered, for the pages that show a conversation as it happens
                    "arguments": arguments,
                    "result": outcome.result,
                    "error": outcome.error,
                    "latency_ms": outcome.latency_ms,
                },
            )
        )
        return outcome

    async def _tool_node(self, node: ToolNode, state: ConversationState, turn: _Turn) -> Step:
        arguments = await asyncio.to_thread(self._render_value, dict(node.arguments), state)
        outcome = await self._call_tool(
            node.tool, arguments, node.id, state, turn, failure_next=node.on_error or node.next
        )
        if state.status != "active":
            return None
        if state.transferring:
            return WAIT
        if outcome.status in ANSWERED:
            if node.result_variable:
                state.variables[node.result_variable] = outcome.result
            return node.next
        turn.failure = "tool_failure"
        if node.result_variable:
            state.variables[node.result_variable] = {
                "success": False,
                "status": outcome.status,
                "error": outcome.error,
            }
        self._say(turn, state, self.fallback_text(state), node.id)
        return node.on_error or node.next

    async def _knowledge_node(self, node: KnowledgeNode, state: ConversationState, turn: _Turn) -> Step:
        query = await self._arender(node.query, state) or str(state.variables.get("last_user_message") or "")
        hits: list[dict[str, Any]] = []
        failed = False
        if self.knowledge is not None and query.strip():
            started = time.perf_counter()
            try:
                hits = await self.knowledge.search(query[:1000], node.top_k, node.document_ids)
            except KnowledgeError as exc:
                failed = True
                self._runtime_signal(state, "knowledge_failure", {"node": node.id, "error": str(exc)[:300]})
            finally:
                turn.result.tool_ms += (time.perf_counter() - started) * 1000
        language = str(state.variables.get("language") or self.language)
        hits = spoken.relevant_hits(query, hits, language, node.min_relevance)
        if hits:
            answer = spoken.answer(query, hits)
        elif failed:
            answer = ""  # the fallback line below: the search failed, it did not come back empty
        else:
            answer = self._render(node.not_found, state) or spoken.nothing_found(language)
        if hits and self.llm is not None:
            sources = "\n\n".join(f"[{i + 1}] {h['text'][:1500]}" for i, h in enumerate(hits))
            messages = [
                {
                    "role": "system",
                    "content": "Answer the caller's question briefly, only from these sources, in the "
                    f"language '{state.variables.get('language') or self.language}'. If they do not "
                    f"contain the answer, say so.\n\n{sources}",
                },
                {"role": "user", "content": query},
            ]
            try:
                reply = await self._complete(messages, [], state, turn, speaking=None)
                answer = (reply.content or "").strip() or answer
            except LlmError as exc:
                self._runtime_signal(state, "llm_failure", {"node": node.id, "error": str(exc)[:300]})
        text = await self._arender(node.answer, state, {"hits": hits, "knowledge_answer": answer})
        if not text and not hits:
            text = answer or self.fallback_text(state)
        if node.result_variable:
            state.variables[node.result_variable] = {"answer": answer, "hits": hits}
        self._say(turn, state, text, node.id)
        return node.next

    # --- llm -----------------------------------------------------------------------------------

    async def _complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        state: ConversationState,
        turn: _Turn,
        *,
        speaking: str | None,
    ) -> LlmReply:
        """One LLM call; the text of a call whose answer is said (``speaking`` = its node id) goes to
        the turn's text sink piece by piece."""
        if self.llm is None:
            raise LlmError("No LLM provider is configured for this organization.")
        started = time.perf_counter()
        if turn.llm_started is None:
            turn.llm_started = started
        first_request = turn.llm_started

        async def on_delta(piece: str) -> None:
            if not piece:
                return
            if turn.result.llm_first_token_ms is None:
                turn.result.llm_first_token_ms = (time.perf_counter() - first_request) * 1000
            if speaking is not None and turn.on_text is not None:
                await turn.on_text(speaking, piece)

        try:
            if isinstance(self.llm, StreamingLlmPort):
                reply = await self.llm.stream(messages, tools, on_delta)
            else:
                reply = await self.llm.complete(messages, tools)
                await on_delta(reply.content or "")
        finally:
            turn.result.llm_ms += (time.perf_counter() - started) * 1000
        state.usage.llm_prompt_tokens += reply.prompt_tokens
        state.usage.llm_completion_tokens += reply.completion_tokens
        return reply

    @staticmethod
    def _bounded(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept: list[dict[str, Any]] = []
        size = 0
        for message in reversed(messages[-LLM_HISTORY_MESSAGES:]):
            size += len(str(message.get("content") or ""))
            if kept and size > LLM_HISTORY_CHARS:
                break
            kept.append(message)
        kept.reverse()
        while kept and kept[0].get("role") == "assistant":
            kept.pop(0)
        return kept

    async def _llm_node(self, node: LlmNode, state: ConversationState, turn: _Turn) -> Step:
        if state.llm is None or state.llm.node_id != node.id:
            state.llm = LlmNodeState(node_id=node.id)
        user = turn.pending_user
        if user is None:
            return WAIT
        turn.pending_user = None
        memory = state.llm
        memory.messages.append({"role": "user", "content": user[:4000]})
        memory.messages = self._bounded(memory.messages)
        prompts = (
            await self._arender(self.definition.prompt, state),
            await self._arender(node.system_prompt, state),
        )
        system = "\n\n".join(part for part in prompts if part)
        specs = await self.tools.describe(node.tools) if node.tools else []
        by_name = {spec.name: spec for spec in specs}
        functions = [
            {
                "type": "function",
                "function": {"name": s.name, "description": s.description, "parameters": s.parameters},
            }
            for s in specs
        ]
        transitions = {t.name: t for t in node.transitions}
        functions += [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or f"Continue the conversation at '{t.next}'.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
            for t in node.transitions
            if t.name not in by_name
        ]
        working = ([{"role": "system", "content": system}] if system else []) + list(memory.messages)
        seen: dict[str, str] = {}
        offer = functions
        try:
            for round_index in range(MAX_TOOL_ROUNDS + 1):
                last_round = round_index == MAX_TOOL_ROUNDS
                reply = await self._complete(
                    working, [] if last_round else offer, state, turn, speaking=node.id
                )
                if not reply.tool_calls:
                    text = (reply.content or "").strip()
                    memory.messages.append({"role": "assistant", "content": text})
                    self._say(turn, state, text, node.id)
                    memory.turns += 1
                    if memory.turns >= node.max_turns and node.next:
                        return node.next
                    return WAIT
                # Text that comes with function calls ("Let me check that.") has been streamed to
                # the caller already, so it is said.
                if reply.content and reply.content.strip():
                    self._say(turn, state, reply.content.strip(), node.id)
                for call in reply.tool_calls:
                    if call.name in transitions:
                        return transitions[call.name].next
                working.append(
                    {
                        "role": "assistant",
                        "content": reply.content,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            }
                            for c in reply.tool_calls
                        ],
                    }
                )
                repeated = False
                for call in reply.tool_calls:
                    key = f"{call.name}:{call.arguments}"
                    if key in seen:
                        repeated = True
                        content = seen[key]
                    else:
                        content = await self._llm_tool(call.name, call.arguments, by_name, node, state, turn)
                        seen[key] = content
                    if state.status != "active":
                        return None  # the model ended the conversation (end_session) or it was transferred
                    if state.transferring:
                        return WAIT
                    working.append({"role": "tool", "tool_call_id": call.id, "content": content})
                if repeated:
                    offer = []
        except LlmError as exc:
            self._runtime_signal(state, "llm_failure", {"node": node.id, "error": str(exc)[:300]})
            self._say(turn, state, self.fallback_text(state), node.id)
            turn.failure = "llm_failure"
            if node.next:
                return node.next
            self._finish_conversation(state, turn, "failed", "llm_failure")
            return None
        return WAIT  # pragma: no cover - the last round offers no tools, so it always answers

    async def _llm_tool(
        self,
        name: str,
        raw_arguments: str,
        specs: dict[str, Any],
        node: LlmNode,
        state: ConversationState,
        turn: _Turn,
    ) -> str:
        spec = specs.get(name)
        if spec is None:
            return json.dumps({"error": f"There is no tool named {name!r}."})
        try:
            arguments = json.loads(raw_arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return json.dumps({"error": "The arguments must be a JSON object."})
        outcome = await self._call_tool(spec.ref, arguments, node.id, state, turn, failure_next=node.id)
        if outcome.status in ANSWERED:
            payload: Any = outcome.result
        else:
            payload = {"error": outcome.error or outcome.status}
        return json.dumps(payload, ensure_ascii=False, default=str)[:TOOL_RESULT_CHARS]
