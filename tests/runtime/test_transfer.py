"""Transfers and session actions in the flow engine, with an in-memory line (no provider)."""

from __future__ import annotations

from typing import Any

from parley.runtime.engine import FlowEngine
from parley.runtime.ports import LlmReply, LlmToolCall, ToolOutcome
from tests.runtime.test_engine import Line, ScriptedLlm, Tools, flow, run_state

ASK = {"id": "ask", "type": "collect", "variable": "q", "kind": "free_text", "prompt": "How can I help?"}
HUMAN = {
    "id": "human",
    "type": "transfer",
    "phone_number": "+4930999999",
    "message": "I am connecting you with a colleague.",
    "next": "back",
}
BACK = {"id": "back", "type": "collect", "variable": "more", "kind": "free_text", "prompt": "What else?"}
BYE = {"id": "bye", "type": "end", "text": "Goodbye."}


def handoff_flow(**human: Any) -> Any:
    return flow({**ASK, "next": "human"}, {**HUMAN, **human}, {**BACK, "next": "bye"}, BYE)


async def test_without_a_phone_line_the_transfer_never_claims_to_connect() -> None:
    engine = FlowEngine(handoff_flow(), tools=Tools())  # a web or text conversation: no line
    state = run_state(engine)
    await engine.start(state)
    turn = await engine.handle(state, "a person please")
    assert turn.text == "Sorry, I cannot connect you right now. What else?"
    assert "connecting" not in " ".join(t.text for t in state.transcript)
    assert state.status == "active" and state.current_node == "back"
    assert state.transfer is not None and state.transfer.status == "unavailable"
    assert any(s.type == "transfer_failed" for s in state.signals)

    alone = FlowEngine(handoff_flow(next=None), tools=Tools())
    state = run_state(alone)
    await alone.start(state)
    turn = await alone.handle(state, "a person please")
    assert turn.text == "Sorry, I cannot connect you right now."
    assert (state.status, state.outcome, state.end_reason) == ("ended", "failed", "transfer_failed")


async def test_a_provider_failure_is_an_apology_and_the_flow_goes_on() -> None:
    line = Line("failed", reason="Twilio refused the transfer: HTTP 503")
    engine = FlowEngine(handoff_flow(), tools=Tools(), calls=line)
    state = run_state(engine, language="de")
    await engine.start(state)
    turn = await engine.handle(state, "Mitarbeiter bitte")
    assert turn.text == "Entschuldigung, ich kann Sie gerade nicht verbinden. What else?"
    assert line.asked == [("+4930999999", "I am connecting you with a colleague.", "de")]
    signal = next(s for s in state.signals if s.type == "transfer_failed")
    assert signal.details["reason"].startswith("Twilio refused")


async def test_a_dialling_transfer_waits_then_comes_back_on_busy() -> None:
    engine = FlowEngine(handoff_flow(), tools=Tools(), calls=Line("dialing"))
    state = run_state(engine)
    await engine.start(state)
    turn = await engine.handle(state, "a person please")
    assert turn.text == ""  # the line says the message before it dials
    assert [e.data["status"] for e in turn.events if e.type == "transfer"] == ["dialing"]
    assert state.transferring and state.status == "active" and state.waiting
    assert state.transcript[-1].text == "I am connecting you with a colleague."
    # nothing the caller sends moves the flow while the target rings
    assert (await engine.handle(state, "hello?")).events == []
    assert state.transferring

    back = await engine.transfer_ended(state, "busy")
    assert back.text == "Sorry, that line is busy right now. I am back with you. What else?"
    assert state.transfer is not None and state.transfer.status == "busy"
    assert state.current_node == "back" and state.waiting and not state.transferring
    assert state.opening_lines() == ["Sorry, that line is busy right now. I am back with you.", "What else?"]
    assert (await engine.transfer_ended(state, "busy")).events == []  # reported twice: nothing
    assert (await engine.handle(state, "nothing")).text == "Goodbye."
    assert state.outcome == "completed" and state.transferred_to is None


async def test_an_answered_dial_ends_the_conversation_as_transferred() -> None:
    engine = FlowEngine(handoff_flow(), tools=Tools(), calls=Line("dialing"))
    state = run_state(engine)
    await engine.start(state)
    await engine.handle(state, "a person please")
    done = await engine.transfer_ended(state, "completed")
    assert [e.type for e in done.events] == ["end"]
    assert (state.status, state.outcome, state.transferred_to) == ("ended", "transferred", "+4930999999")
    assert state.transferred_at is not None and state.transfer is not None
    assert state.transfer.status == "transferred"


async def test_the_end_session_tool_ends_the_conversation() -> None:
    tools = Tools(
        ToolOutcome(
            "ok",
            tool_id="tool_1",
            tool_name="hang_up",
            result={"action": "end_session", "performed": False},
            action={"action": "end_session", "message": "Bye {{ q }}.", "reason": "done"},
        )
    )
    engine = FlowEngine(
        flow(
            {**ASK, "next": "stop"},
            {"id": "stop", "type": "tool", "tool": "hang_up", "arguments": {}, "next": "bye"},
            BYE,
        ),
        tools=tools,
    )
    state = run_state(engine)
    await engine.start(state)
    turn = await engine.handle(state, "Anna")
    assert turn.text == "Bye Anna."  # the end node after it never runs
    assert (state.status, state.outcome, state.end_reason) == ("ended", "completed", "ended_by_agent")
    assert state.tool_calls[-1].result == {"action": "end_session", "ended": True}


async def test_the_model_transfers_with_the_transfer_tool_and_waits() -> None:
    tools = Tools(
        ToolOutcome(
            "ok",
            tool_id="tool_2",
            tool_name="to_human",
            action={"action": "transfer", "to": "+4930999999", "message": "One moment."},
        )
    )
    llm = ScriptedLlm(
        LlmReply(None, [LlmToolCall("c1", "to_human", "{}")]),
        LlmReply("This is never asked for."),
    )
    engine = FlowEngine(
        flow({"id": "chat", "type": "llm", "tools": ["to_human"], "next": "bye"}, BYE),
        tools=tools,
        llm=llm,
        calls=Line("dialing"),
    )
    state = run_state(engine)
    await engine.start(state)
    turn = await engine.handle(state, "get me a human")
    assert [e.data.get("status") for e in turn.events if e.type == "transfer"] == ["dialing"]
    assert len(llm.seen) == 1 and state.transferring
    assert state.tool_calls[-1].result == {"action": "transfer", "to": "+4930999999", "status": "dialing"}
    back = await engine.transfer_ended(state, "no-answer")
    assert back.text == "Sorry, nobody is answering right now. I am back with you."
    assert state.current_node == "chat" and state.waiting


async def test_a_transfer_tool_without_a_line_is_a_tool_error_with_a_spoken_line() -> None:
    tools = Tools(
        ToolOutcome(
            "ok", action={"action": "transfer", "to": "+4930999999"}, tool_id="tool_2", tool_name="to_human"
        )
    )
    engine = FlowEngine(
        flow(
            {**ASK, "next": "move"},
            {
                "id": "move",
                "type": "tool",
                "tool": "to_human",
                "arguments": {},
                "on_error": "back",
                "next": "bye",
            },
            {**BACK, "next": "bye"},
            BYE,
        ),
        tools=tools,
    )
    state = run_state(engine)
    await engine.start(state)
    turn = await engine.handle(state, "a person")
    assert turn.text == "Sorry, that did not work just now. What else?"
    assert state.tool_calls[-1].status == "error" and "no phone line" in (state.tool_calls[-1].error or "")


async def test_the_line_hangs_up_when_the_flow_ends_but_not_after_a_transfer() -> None:
    line = Line("dialing")
    engine = FlowEngine(handoff_flow(), tools=Tools(), calls=line)
    state = run_state(engine)
    await engine.start(state)
    await engine.handle(state, "a person please")
    await engine.transfer_ended(state, "failed")
    assert line.hung_up == 0  # back in the flow, still talking
    await engine.handle(state, "nothing")
    assert state.outcome == "completed" and line.hung_up == 1

    transferred = Line("transferred")
    engine = FlowEngine(handoff_flow(), tools=Tools(), calls=transferred)
    state = run_state(engine)
    await engine.start(state)
    await engine.handle(state, "a person please")
    assert state.outcome == "transferred" and transferred.hung_up == 0
