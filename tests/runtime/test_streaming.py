"""The engine's text sink: an ``llm`` node's text piece by piece, and the turn's LLM timings."""

from __future__ import annotations

from typing import Any

from parley.runtime.engine import FlowEngine
from parley.runtime.ports import DeltaSink, LlmError, LlmReply, LlmToolCall, StreamingLlmPort
from tests.runtime.test_engine import ScriptedLlm, Tools, _llm_flow, run_state


class StreamingLlm:
    """Hands out each scripted reply word by word; an exception after its words breaks off."""

    def __init__(self, *replies: tuple[LlmReply, Exception | None]) -> None:
        self.replies = list(replies)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LlmReply:
        raise AssertionError("a streaming port is always streamed")

    async def stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> LlmReply:
        reply, failure = self.replies.pop(0)
        for word in (reply.content or "").split(" "):
            await on_delta(word + " ")
        if failure is not None:
            raise failure
        return reply


class Sink:
    def __init__(self) -> None:
        self.pieces: list[tuple[str, str]] = []

    async def __call__(self, node_id: str, piece: str) -> None:
        self.pieces.append((node_id, piece))

    @property
    def text(self) -> str:
        return "".join(piece for _, piece in self.pieces)


async def test_llm_text_goes_to_the_sink_piece_by_piece_with_timings() -> None:
    llm = StreamingLlm(
        (LlmReply("Let me look.", [LlmToolCall("c1", "lookup", '{"order_id": 7}')]), None),
        (LlmReply("Your order is ready."), None),
    )
    assert isinstance(llm, StreamingLlmPort)
    engine = FlowEngine(_llm_flow(), tools=Tools(), llm=llm)
    state = run_state(engine)
    await engine.start(state)
    sink = Sink()
    result = await engine.handle(state, "order 7?", on_text=sink)
    assert {node for node, _ in sink.pieces} == {"chat"} and len(sink.pieces) == 7
    # Text that comes with a tool call is said too, so the pieces make up the turn's text.
    assert [e.text for e in result.events if e.type == "say"] == ["Let me look.", "Your order is ready."]
    assert sink.text.split() == result.text.split()
    metrics = state.metrics[-1]
    assert metrics.llm_first_token_ms is not None and metrics.llm_total_ms is not None
    assert 0 < metrics.llm_first_token_ms <= metrics.llm_total_ms


async def test_a_stream_that_breaks_off_says_the_fallback_after_its_pieces() -> None:
    engine = FlowEngine(_llm_flow(), tools=Tools(), llm=StreamingLlm((LlmReply("Half an"), LlmError("cut"))))
    state = run_state(engine)
    await engine.start(state)
    sink = Sink()
    result = await engine.handle(state, "hello", on_text=sink)
    assert sink.text == "Half an "
    assert result.text == "Sorry, that did not work just now. Bye."
    assert any(s.type == "llm_failure" for s in state.signals)


async def test_a_port_without_streaming_hands_over_its_text_at_once() -> None:
    engine = FlowEngine(_llm_flow(), tools=Tools(), llm=ScriptedLlm(LlmReply("All at once.")))
    state = run_state(engine)
    await engine.start(state)
    sink = Sink()
    result = await engine.handle(state, "hello", on_text=sink)
    assert sink.pieces == [("chat", "All at once.")] and result.text == "All at once."
    assert state.metrics[-1].llm_first_token_ms is not None


async def test_turns_without_model_text_record_no_first_token() -> None:
    engine = FlowEngine(_llm_flow(), tools=Tools(), llm=ScriptedLlm(LlmError("down")))
    state = run_state(engine)
    await engine.start(state)
    await engine.handle(state, "hello", on_text=Sink())
    assert state.metrics[-1].llm_first_token_ms is None
