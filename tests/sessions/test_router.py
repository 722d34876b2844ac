"""Sessions API: creation rules, llm nodes, serialized messages, limits, idle timeout, voice, streaming."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.calls.models import Call
from parley.kit.db import Database, utcnow
from parley.kit.errors import Conflict
from parley.llm.models import LLMUsage
from parley.runtime.state import ConversationState, TransferState
from parley.sessions import service
from parley.sessions.service import sweep_idle
from tests.conftest import auth, make_token
from tests.sessions.conftest import Platform
from tests.stubs.openai import StubState

ECHO = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "said", "prompt": "Say something.", "next": "echo"},
        {"id": "echo", "type": "say", "text": "Echo {{ said }}.", "next": "ask"},
    ],
}


async def test_sessions_need_a_published_flow_or_the_test_channel(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    flow_id = await platform.flow(ECHO, publish=False)
    refused = await platform.post("/api/sessions", {"flow_id": flow_id})
    assert refused.status_code == 409 and "no published version" in refused.json()["detail"]
    draft = await platform.start(flow_id, channel="test")
    assert draft["reply"] == "Say something." and draft["flow_version"] is None
    assert (await platform.post("/api/sessions", {"flow_id": "flow_missing"})).status_code == 404
    assert (await platform.post("/api/sessions", {"flow_id": flow_id, "draft": True})).status_code == 409
    await platform.post(f"/api/flows/{flow_id}/publish")
    assert (await platform.post("/api/sessions", {"flow_id": flow_id, "version": 2})).status_code == 404
    published = await platform.start(flow_id, version=1)
    assert published["flow_version"] == 1

    other: Platform = await make_platform()
    assert (await other.get(f"/api/sessions/{published['id']}")).status_code == 404
    assert (await other.post("/api/sessions", {"flow_id": flow_id})).status_code == 404


async def test_parallel_messages_are_answered_one_by_one(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    texts = [f"message {i}" for i in range(10)]
    turns = await asyncio.gather(*(platform.say(session["id"], text) for text in texts))
    for text, turn in zip(texts, turns, strict=True):
        assert turn["reply"] == f"Echo {text}. Say something."
    state = (await platform.get(f"/api/sessions/{session['id']}")).json()
    caller = [t["text"] for t in state["transcript"] if t["speaker"] == "caller"]
    assert sorted(caller) == sorted(texts)
    transcript = state["transcript"]
    for index, turn in enumerate(transcript):
        if turn["speaker"] == "caller":
            assert transcript[index + 1]["text"] == f"Echo {turn['text']}."


async def test_message_limits(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    url = f"/api/sessions/{session['id']}/messages"
    assert (await platform.post(url, {"text": "x" * 4001})).status_code == 422
    assert (await platform.post(url, {"text": ""})).status_code == 422
    assert (await platform.post(url, {"text": "hi", "extra": 1})).status_code == 422
    assert (await platform.post("/api/sessions/ses_unknown/messages", {"text": "hi"})).status_code == 404
    accepted = await platform.say(session["id"], "y" * 4000)
    assert accepted["status"] == "active"
    too_big = await platform.post(
        "/api/sessions", {"flow_id": session["flow_id"], "variables": {"x": "y" * 70_000}}
    )
    assert too_big.status_code == 422 and too_big.json()["detail"][0]["loc"] == ["body", "variables"]


async def test_a_knowledge_node_without_documents_says_it_found_nothing(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    definition = {
        "language": "de",
        "start_node": "ask",
        "nodes": [
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "Ihre Frage?", "next": "k"},
            {"id": "k", "type": "knowledge", "result_variable": "found", "next": "ask"},
        ],
    }
    session = await platform.start(await platform.flow(definition))
    turn = await platform.say(session["id"], "Wann haben Sie geöffnet?")
    nothing = "Dazu habe ich leider keine Information gefunden."
    assert turn["reply"] == f"{nothing} Ihre Frage?"
    assert turn["variables"]["found"] == {"answer": nothing, "hits": []}


async def test_idle_sessions_end_with_their_call_record(
    make_platform: Any, database: Database, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    live = (await platform.get("/api/monitoring/sessions/live")).json()["items"]
    assert [s["id"] for s in live] == [session["id"]]
    assert await sweep_idle(database, 300) == 0
    assert await sweep_idle(database, 300, now=utcnow() + timedelta(seconds=301)) == 1
    state = (await platform.get(f"/api/sessions/{session['id']}")).json()
    assert (state["status"], state["outcome"], state["end_reason"]) == ("ended", "abandoned", "idle_timeout")
    assert (await platform.post(f"/api/sessions/{session['id']}/messages", {"text": "hi"})).status_code == 409
    assert (await platform.get("/api/monitoring/sessions/live")).json()["items"] == []
    call = await db_session.scalar(select(Call).where(Call.session_id == session["id"]))
    assert call is not None and call.outcome == "abandoned"


async def test_voice_toggle(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO), voiced=False)
    url = f"/api/sessions/{session['id']}/voice"
    on = await platform.post(url, {"voiced": True})
    assert on.status_code == 200 and on.json()["voiced"] is True and on.json()["status"] == "active"
    as_form = await platform.client.post(url, data={"voiced": "false"}, headers=platform.headers)
    assert as_form.status_code == 200 and as_form.json()["voiced"] is False
    assert (await platform.post("/api/sessions/ses_nope/voice", {"voiced": True})).status_code == 404
    viewer = await platform.client.post(
        url, json={"voiced": True}, headers=auth(make_token("nobody"), platform.org)
    )
    assert viewer.status_code == 404
    ended = await platform.post(f"/api/sessions/{session['id']}/end")
    assert ended.status_code == 200 and ended.json()["outcome"] == "abandoned"
    assert (await platform.post(url, {"voiced": True})).status_code == 409
    assert (await platform.post(f"/api/sessions/{session['id']}/end")).status_code == 409


async def test_replies_as_server_sent_events(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    response = await platform.post(
        f"/api/sessions/{session['id']}/messages", {"text": "hi"}, headers={"Accept": "text/event-stream"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [block.split("\n")[0] for block in response.text.strip().split("\n\n")]
    assert events == ["event: say", "event: say", "event: done"]
    assert '"text": "Echo hi."' in response.text
    query = await platform.post(f"/api/sessions/{session['id']}/messages?stream=true", {"text": "again"})
    assert query.headers["content-type"].startswith("text/event-stream")


def _llm_flow(model_next: str | None = None) -> dict[str, Any]:
    return {
        "language": "en",
        "prompt": "You are the assistant of {{ shop }}.",
        "variables": {"shop": "Autohaus Demo"},
        "start_node": "hello",
        "nodes": [
            {"id": "hello", "type": "say", "text": "Hello, how can I help?", "next": "chat"},
            {
                "id": "chat",
                "type": "llm",
                "system_prompt": "Answer briefly.",
                "tools": ["order_lookup"],
                "transitions": [{"name": "goodbye", "description": "The caller is done.", "next": "bye"}],
                "max_turns": 5,
                "next": model_next,
            },
            {"id": "bye", "type": "end", "text": "Goodbye!"},
        ],
    }


async def _llm_platform(
    make_platform: Any, connector: dict[str, str], llm_stub: tuple[str, StubState], model: str
) -> Platform:
    platform: Platform = await make_platform(connector_url=connector["url"])
    await platform.tool(
        {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}}
    )
    configured = await platform.client.put(
        "/api/providers/openai/config",
        json={"api_key": "sk-test-stub-key", "base_url": f"{llm_stub[0]}/v1", "model": model},
        headers=platform.headers,
    )
    assert configured.status_code == 200, configured.text
    return platform


async def test_llm_node_calls_the_order_tool_and_answers(
    make_platform: Any,
    connector: dict[str, str],
    llm_stub: tuple[str, StubState],
    db_session: AsyncSession,
) -> None:
    platform = await _llm_platform(make_platform, connector, llm_stub, "stub-model")
    session = await platform.start(await platform.flow(_llm_flow()))
    assert session["reply"] == "Hello, how can I help?" and session["waiting"] is True
    turn = await platform.say(session["id"], "Where is my order 7?")
    assert turn["reply"] == "You said: Where is my order 7?"
    tool_events = [e for e in turn["events"] if e["type"] == "tool_call"]
    assert tool_events and tool_events[0]["data"]["status"] == "ok"
    sent = llm_stub[1].requests[-1]
    assert sent["messages"][0] == {
        "role": "system",
        "content": "You are the assistant of Autohaus Demo.\n\nAnswer briefly.",
    }
    tool_messages = [m for m in sent["messages"] if m["role"] == "tool"]
    assert tool_messages and '"id": 7' in tool_messages[0]["content"]
    second = await platform.say(session["id"], "thanks")
    assert second["reply"] == "You said: thanks"
    ended = await platform.post(f"/api/sessions/{session['id']}/end")
    assert ended.status_code == 200
    call = await db_session.scalar(select(Call).where(Call.session_id == session["id"]))
    assert call is not None and call.llm_prompt_tokens > 0 and call.llm_completion_tokens > 0
    assert call.tool_calls[0]["arguments"] == {"order_id": 7}
    usage = (await db_session.scalars(select(LLMUsage).where(LLMUsage.organization_id == platform.org))).all()
    assert usage and {u.source for u in usage} == {"session"}


async def test_llm_failure_says_the_fallback(
    make_platform: Any, connector: dict[str, str], llm_stub: tuple[str, StubState], db_session: AsyncSession
) -> None:
    platform = await _llm_platform(make_platform, connector, llm_stub, "error-500")
    session = await platform.start(await platform.flow(_llm_flow()))
    turn = await platform.say(session["id"], "hello?")
    assert turn["reply"] == "Sorry, that did not work just now."
    assert (turn["status"], turn["outcome"]) == ("ended", "failed")
    # The failure's path leads straight to the goodbye: the call ended because of it, so it failed.
    recovering = await platform.start(await platform.flow(_llm_flow(model_next="bye"), name="Second"))
    turn = await platform.say(recovering["id"], "hello?")
    assert turn["reply"] == "Sorry, that did not work just now. Goodbye!"
    assert (turn["outcome"], turn["end_reason"]) == ("failed", "llm_failure")
    # ... and the reports and the history count both calls as failed.
    days = (await platform.get("/api/reporting/calls/summary")).json()["days"]
    assert sum(d["outcomes"]["failed"] for d in days) == 2
    assert sum(d["outcomes"]["completed"] for d in days) == 0
    failed = (await platform.get("/api/monitoring/calls/history", params={"outcome": "failed"})).json()
    assert [c["outcome"] for c in failed["items"]] == ["failed", "failed"]


async def test_llm_node_without_a_provider_still_answers(
    make_platform: Any, connector: dict[str, str]
) -> None:
    platform: Platform = await make_platform(connector_url=connector["url"])
    await platform.tool(
        {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}}
    )
    session = await platform.start(await platform.flow(_llm_flow(model_next="bye")))
    turn = await platform.say(session["id"], "hello?")
    assert turn["reply"] == "Sorry, that did not work just now. Goodbye!"


async def test_a_write_from_another_process_in_between_is_refused(
    make_platform: Any, database: Database
) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    async with database.sessionmaker() as first, database.sessionmaker() as second:
        row = await service.get_session(first, platform.org, session["id"], lock=True)
        state = ConversationState.from_json(row.state)
        other = await service.get_session(second, platform.org, session["id"])
        other.voiced = True  # another process writes between this one's read and write
        await second.flush()
        await second.commit()
        state.variables["said"] = "late"
        with pytest.raises(Conflict):
            await service._save(first, row, state, None)
        await first.rollback()


async def test_get_answers_the_session_as_its_turns_did(make_platform: Any) -> None:
    """GET reads the session as a plain row (no ORM object): the same fields as the turn's answer, and
    another organization's id is a 404."""
    platform: Platform = await make_platform()
    flow_id = await platform.flow(ECHO)
    started = await platform.start(flow_id)
    turn = await platform.say(started["id"], "hallo")
    got = (await platform.get(f"/api/sessions/{started['id']}")).json()
    assert got == {name: value for name, value in turn.items() if name not in ("events", "reply")}
    assert "Echo hallo." in [line["text"] for line in got["transcript"]]
    other: Platform = await make_platform()
    assert (await other.get(f"/api/sessions/{started['id']}")).status_code == 404


async def test_a_voice_legs_late_end_leaves_a_session_handed_to_a_transfer_during_it(
    make_platform: Any, database: Database
) -> None:
    """A Twilio leg stops when the call is handed to a dial; when the target is busy the caller comes
    back on a new leg. The first leg's teardown may run after that: it must not end the session."""
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    first_leg_began = utcnow()
    async with database.sessionmaker() as db:
        row = await service.get_session(db, platform.org, session["id"], lock=True)
        state = ConversationState.from_json(row.state)
        state.transfer = TransferState(
            to="+4930123456", node_id="ask", status="busy", requested_at=utcnow(), resume_index=1
        )
        await service._save(db, row, state, None)
        await db.commit()
    second_leg_began = utcnow()

    async def end_leg(began_at: datetime) -> None:
        async with database.sessionmaker() as db:
            await service.end_session(
                db,
                platform.org,
                session["id"],
                outcome="abandoned",
                reason="caller_hung_up",
                unless_handed_over_since=began_at,
            )
            await db.commit()

    await end_leg(first_leg_began)
    assert (await platform.get(f"/api/sessions/{session['id']}")).json()["status"] == "active"
    await end_leg(second_leg_began)  # the leg that took the caller back ends it
    ended = (await platform.get(f"/api/sessions/{session['id']}")).json()
    assert (ended["status"], ended["end_reason"]) == ("ended", "caller_hung_up")


async def test_a_voice_legs_late_teardown_leaves_the_mark_of_the_leg_that_took_the_caller_back(
    make_platform: Any, database: Database
) -> None:
    """While the provider dials, the first leg's teardown clears the voice mark (call.ended then goes
    out at once). Once the dial is over and the caller is back on a new leg that set the mark, the
    first leg's late teardown leaves it: the new leg's voice facts still reach call.ended."""
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    first_leg_began = utcnow()

    async def set_transfer(status: str) -> None:
        async with database.sessionmaker() as db:
            row = await service.get_session(db, platform.org, session["id"], lock=True)
            state = ConversationState.from_json(row.state)
            state.transfer = TransferState(
                to="+4930123456", node_id="ask", status=status, requested_at=utcnow(), resume_index=1
            )
            await service._save(db, row, state, None)
            await db.commit()

    async def mark(connected: bool, leg_began: datetime | None = None) -> bool:
        async with database.sessionmaker() as db:
            await service.mark_voice_connected(
                db, platform.org, session["id"], connected, unless_handed_over_since=leg_began
            )
            await db.commit()
            row = await service.get_session(db, platform.org, session["id"])
            return bool(row.voice_connected)

    assert await mark(True) is True  # the first leg connects
    await set_transfer("dialing")
    assert await mark(False, first_leg_began) is False  # its stream stopped for the dial
    assert await mark(True) is True  # a leg that connects later sets it again
    await set_transfer("busy")  # the target was busy: the caller is back on a new leg
    assert await mark(True) is True
    assert await mark(False, first_leg_began) is True  # the first leg's late teardown leaves it
    assert await mark(False, utcnow()) is False  # the new leg's own teardown clears it
