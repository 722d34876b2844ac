"""Running one scenario: the flow engine over in-memory state (no session row, no call record, no
notification, no telephony), the caller's scripted turns or an LLM playing the caller, then the
expectations and the rubric."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from parley.evaluations.expectations import Conversation, TurnRecord, check
from parley.evaluations.schemas import Scenario, TextCheck, ToolMock
from parley.evaluations.voice import Pace, VoiceFailure, check_voice, voice_turns
from parley.flows.definition import FlowDefinition
from parley.runtime.engine import ANSWERED, FlowEngine, TurnResult
from parley.runtime.ports import HandOver, LlmError, LlmPort, ToolOutcome, ToolPort, ToolSpec
from parley.voice.engines.base import SttEngine, TtsEngine, Vad

HANGUP = "[HANGUP]"
CALLER_PROMPT = (
    "You play the caller in a test of an automated phone agent. Stay in your role.\n"
    "Persona: {persona}\nGoal: {goal}\n"
    "Answer with the caller's next words only (one or two short sentences, in the agent's language). "
    f"When your goal is reached or the agent says goodbye, answer exactly {HANGUP}."
)
JUDGE_PROMPT = (
    "You judge a phone conversation between an automated agent and a caller against criteria. "
    'Answer only with JSON: {"criteria": [{"criterion": "...", "passed": true, "reason": "..."}]}, '
    "one entry per criterion, in the given order, each with a one-sentence reason."
)


class MockedTools:
    """The organization's tools, except those the scenario mocks (by tool name)."""

    def __init__(self, inner: ToolPort, mocks: dict[str, ToolMock]) -> None:
        self.inner = inner
        self.mocks = mocks

    async def call(self, ref: str, arguments: dict[str, Any]) -> ToolOutcome:
        mock = self.mocks.get(ref)
        if mock is None:
            return await self.inner.call(ref, arguments)
        answered = mock.status in ANSWERED  # a 404 answers too: its body is the result
        return ToolOutcome(
            mock.status,
            tool_id=None,
            tool_name=ref,
            http_status=mock.http_status,
            result=mock.result if answered else None,
            error=None if answered else (mock.error or f"mocked {mock.status}"),
        )

    async def describe(self, refs: list[str]) -> list[ToolSpec]:
        return await self.inner.describe(refs)


class MockedLine:
    """The phone line a scenario's transfers meet (``Scenario.line``); never a real call."""

    def __init__(self, status: Literal["transferred", "failed", "unavailable"]) -> None:
        self.status = status

    async def transfer(self, target: str, message: str, language: str) -> HandOver:
        if self.status == "unavailable":
            return HandOver("unavailable", reason="An evaluation has no phone line (Scenario.line).")
        return HandOver(self.status, "evaluation", None if self.status == "transferred" else "mocked failure")

    async def hang_up(self) -> None:
        return None


@dataclass
class Outcome:
    status: str
    reason: str | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    rubric: list[dict[str, Any]] = field(default_factory=list)
    conversation: Conversation | None = None
    duration_ms: float = 0.0

    def fields(self) -> dict[str, Any]:
        """The result row's columns."""
        out: dict[str, Any] = {
            "status": self.status,
            "reason": self.reason,
            "failures": self.failures,
            "rubric": self.rubric,
            "duration_ms": round(self.duration_ms, 3),
        }
        conv = self.conversation
        if conv is not None:
            state = conv.state.to_json()
            out.update(
                transcript=[
                    {"speaker": t["speaker"], "text": t["text"], "node_id": t.get("node_id")}
                    for t in state["transcript"]
                ],
                tool_calls=state["tool_calls"],
                turns=[t.as_json() for t in conv.turns],
                signals=[s["type"] for s in state["signals"]],
                variables=state["variables"],
                outcome=conv.state.outcome,
                end_reason=(conv.state.end_reason or "")[:60] or None,
            )
        return out


def _record(conversation: Conversation, index: int, caller: str | None, result: TurnResult) -> None:
    # What the caller heard: the said lines, and a transfer's message (the line speaks it).
    heard = [result.text, *(e.text for e in result.events if e.type == "transfer" and e.text)]
    reply = " ".join(part for part in heard if part)
    conversation.turns.append(
        TurnRecord(index, caller, reply, result.engine_ms, result.tool_ms, result.llm_ms)
    )
    for event in result.events:
        if event.node_id and event.node_id not in conversation.visited:
            conversation.visited.append(event.node_id)


def _new_state(engine: FlowEngine, scenario: Scenario, session_id: str) -> Any:
    variables = dict(scenario.variables)
    if scenario.language:
        variables["language"] = scenario.language
    return engine.new_state(
        session_id=session_id, channel="test", caller=scenario.caller, variables=variables
    )


async def _scripted(engine: FlowEngine, scenario: Scenario, session_id: str) -> Conversation:
    conversation = Conversation(_new_state(engine, scenario, session_id))
    state = conversation.state
    _record(conversation, 0, None, await engine.start(state))
    for number, turn in enumerate(scenario.turns, start=1):
        if state.status != "active":
            conversation.unused_turns = len(scenario.turns) - number + 1
            break
        if turn.noise_ms is not None:  # a noise over the agent is voice mode's; text has no turn for it
            _record(conversation, number, None, TurnResult())
            continue
        _record(conversation, number, turn.text, await engine.handle(state, turn.text))
    # The script is over: the caller hangs up, as on a phone.
    engine.end(state, "abandoned", "caller_hung_up")
    return conversation


@dataclass
class VoiceKit:
    """Voice mode's engines: recognition, the caller's voice, the agent's voice, the VAD."""

    definition: FlowDefinition
    stt: SttEngine
    caller_tts: TtsEngine
    agent_tts: TtsEngine
    vad: Vad
    pace: Pace = "fast"
    # The offline German grammar decodes slower than real time (docs/voice.md): only recognizers in
    # processes of their own (PARLEY_VOICE_DECODER_PROCESSES > 0) keep that from stalling this one.
    languages: frozenset[str] = frozenset({"en"})


async def _voiced(engine: FlowEngine, scenario: Scenario, session_id: str, kit: VoiceKit) -> Conversation:
    conversation = Conversation(_new_state(engine, scenario, session_id))
    _record(conversation, 0, None, await engine.start(conversation.state))
    figures = await voice_turns(
        engine,
        kit.definition,
        scenario,
        conversation,
        stt=kit.stt,
        caller_tts=kit.caller_tts,
        agent_tts=kit.agent_tts,
        vad=kit.vad,
        record=_record,
        pace=kit.pace,
    )
    for record, figure in zip(conversation.turns[1:], figures, strict=False):
        record.voice = figure.as_json()
    engine.end(conversation.state, "abandoned", "caller_hung_up")
    return conversation


async def _simulated(engine: FlowEngine, scenario: Scenario, session_id: str, llm: LlmPort) -> Conversation:
    conversation = Conversation(_new_state(engine, scenario, session_id))
    state = conversation.state
    _record(conversation, 0, None, await engine.start(state))
    # From the caller model's side the agent is the "user" and its own lines are the "assistant".
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": CALLER_PROMPT.format(persona=scenario.persona, goal=scenario.goal)},
    ]
    for number in range(1, scenario.max_turns + 1):
        if state.status != "active":
            break
        messages.append({"role": "user", "content": conversation.turns[-1].reply or "..."})
        reply = await llm.complete(messages, [])
        line = (reply.content or "").strip()
        if not line or HANGUP in line:
            break
        messages.append({"role": "assistant", "content": line})
        _record(conversation, number, line, await engine.handle(state, line[:4000]))
    engine.end(state, "abandoned", "caller_hung_up")
    return conversation


def _verdict(text: str, criteria: list[str]) -> list[dict[str, Any]]:
    fenced = re.search(r"\{.*\}", text, re.S)
    try:
        data = json.loads(fenced.group(0) if fenced else text)
        items = data["criteria"]
        verdicts = [
            {"criterion": criterion, "passed": bool(item["passed"]), "reason": str(item.get("reason") or "")}
            for criterion, item in zip(criteria, items, strict=True)
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise LlmError(
            f"The judge did not answer with one verdict per criterion ({type(exc).__name__})."
        ) from exc
    return verdicts


async def _judge(llm: LlmPort, conversation: Conversation, criteria: list[str]) -> list[dict[str, Any]]:
    lines = [f"{t.speaker}: {t.text}" for t in conversation.state.transcript]
    numbered = "\n".join(f"{i}. {c}" for i, c in enumerate(criteria, start=1))
    messages = [
        {"role": "system", "content": JUDGE_PROMPT},
        {"role": "user", "content": "Conversation:\n" + "\n".join(lines) + "\n\nCriteria:\n" + numbered},
    ]
    reply = await llm.complete(messages, [])
    return _verdict(reply.content or "", criteria)


async def run_scenario(
    engine: FlowEngine,
    scenario: Scenario,
    *,
    session_id: str,
    llm: LlmPort | None,
    voice: VoiceKit | None = None,
) -> Outcome:
    """Run ``scenario``; failures of the platform (an LLM that fails) are ``error`` with a reason."""
    started = time.perf_counter()
    if scenario.simulated and voice is not None:
        return Outcome("skipped", "Simulated callers run in text mode only.")
    language = (scenario.language or engine.language or "en")[:2]
    if voice is not None and language not in voice.languages:
        return Outcome(
            "skipped",
            f"Voice mode hears {language!r} offline only with the recognizer in processes of its own "
            "(PARLEY_VOICE_DECODER_PROCESSES > 0): its decoding is slower than real time.",
        )
    if scenario.simulated and llm is None:
        return Outcome(
            "skipped", "A simulated caller needs an LLM provider in the organization; none is set up."
        )
    try:
        if scenario.simulated:
            assert llm is not None
            conversation = await _simulated(engine, scenario, session_id, llm)
        elif voice is not None:
            conversation = await _voiced(engine, scenario, session_id, voice)
        else:
            conversation = await _scripted(engine, scenario, session_id)
    except LlmError as exc:
        return Outcome("error", f"The LLM playing the caller failed: {exc}", duration_ms=_ms(started))
    except VoiceFailure as exc:
        return Outcome("error", f"Voice mode failed: {exc}", duration_ms=_ms(started))
    turn_checks: list[list[TextCheck]] = [scenario.expect.opening] + [t.expect for t in scenario.turns]
    failures = check(scenario, turn_checks, conversation)
    if voice is not None:
        failures.extend(check_voice(scenario, conversation))
    outcome = Outcome("passed", conversation=conversation)
    llm_failures = [s for s in conversation.state.signals if s.type == "llm_failure"]
    if llm_failures and "llm_failure" not in scenario.expect.signals:
        outcome.status = "error"
        outcome.reason = f"The flow's LLM failed: {llm_failures[0].details.get('error') or 'no answer'}"
    if scenario.rubric and llm is not None and outcome.status == "passed":
        try:
            outcome.rubric = await _judge(llm, conversation, scenario.rubric)
        except LlmError as exc:
            outcome.status, outcome.reason = "error", f"The LLM judging the rubric failed: {exc}"
        for verdict in outcome.rubric:
            if not verdict["passed"]:
                failures.append(
                    {
                        "expectation": f"rubric: {verdict['criterion']}",
                        "expected": "met",
                        "actual": verdict["reason"],
                        "turn": None,
                    }
                )
    outcome.failures = failures
    if failures and outcome.status == "passed":
        outcome.status = "failed"
        outcome.reason = f"{len(failures)} expectation(s) failed"
    outcome.duration_ms = _ms(started)
    return outcome


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
