"""Transfers on LiveKit SIP (``TransferSIPParticipant`` against the local Twirp server), transfer
targets refused at flow validation, and a session without a phone line."""

from __future__ import annotations

from typing import Any

from parley.sessions.models import ConversationSession
from tests.telephony.conftest import Org, Stub

TARGET = "+4930999999"
FROM = "+4930888000"
CONNECTING = "I am connecting you with a colleague."

HANDOFF = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "wish", "kind": "free_text", "prompt": "How can I help?",
         "next": "human"},
        {"id": "human", "type": "transfer", "phone_number": TARGET, "message": CONNECTING, "next": "back"},
        {"id": "back", "type": "collect", "variable": "more", "kind": "free_text", "prompt": "What else?",
         "next": "bye"},
        {"id": "bye", "type": "end", "text": "Goodbye."},
    ],
}  # fmt: skip


async def _handoff_flow(org: Org) -> str:
    flow = await org.make("/api/flows", {"name": "Handoff", "definition": HANDOFF})
    assert (await org.post(f"/api/flows/{flow['id']}/publish")).status_code == 200
    return str(flow["id"])


async def _livekit_call(org: Org, flow_id: str) -> str:
    """An outbound LiveKit call on the flow: its SIP participant is in the room parley-<session>."""
    await org.make("/api/telephony/numbers", {"number": FROM, "provider": "livekit"})
    await org.make(
        "/api/telephony/trunks",
        {"name": "Out", "direction": "outbound", "numbers": [FROM], "address": "sip.carrier.example"},
    )
    assert (await org.sync()).status_code == 200
    placed = await org.post(
        "/api/calls/outbound", {"flow_id": flow_id, "to": "+491701234567", "from_number": FROM}
    )
    assert placed.status_code == 200, placed.text
    return str(placed.json()["session_id"])


async def _call_of(org: Org, session_id: str) -> dict[str, Any]:
    items = (await org.get("/api/calls?limit=100")).json()["items"]
    for item in items:
        full = (await org.get(f"/api/calls/{item['id']}")).json()
        if full["session_id"] == session_id:
            return dict(full)
    raise AssertionError(f"no call record for {session_id}")


async def test_a_livekit_call_is_transferred_with_a_sip_transfer(connected: Org, livekit: Stub) -> None:
    session_id = await _livekit_call(connected, await _handoff_flow(connected))
    turn = await connected.post(f"/api/sessions/{session_id}/messages", {"text": "a person please"})
    assert turn.status_code == 200, turn.text
    body = turn.json()
    assert (body["status"], body["outcome"]) == ("ended", "transferred")
    (transfer,) = livekit.state.transfers
    assert (transfer.room_name, transfer.participant_identity) == (
        f"parley-{session_id}",
        f"phone-{session_id}",
    )
    assert transfer.transfer_to == f"tel:{TARGET}" and transfer.ringing_timeout.seconds == 30
    call = await _call_of(connected, session_id)
    assert (call["outcome"], call["transferred_to"], call["transfer_status"]) == (
        "transferred",
        TARGET,
        "transferred",
    )
    assert call["transferred_at"] is not None
    assert CONNECTING in [t["text"] for t in call["transcript"]]


async def test_a_busy_sip_target_is_an_apology_and_the_failure_branch(connected: Org, livekit: Stub) -> None:
    livekit.state.busy.add(TARGET)
    session_id = await _livekit_call(connected, await _handoff_flow(connected))
    turn = (await connected.post(f"/api/sessions/{session_id}/messages", {"text": "a person please"})).json()
    assert turn["reply"] == "Sorry, I cannot connect you right now. What else?"
    assert turn["status"] == "active" and turn["current_node"] == "back"
    (event,) = [e for e in turn["events"] if e["type"] == "transfer"]
    assert event["data"]["status"] == "failed" and "486 Busy Here" in event["data"]["reason"]
    assert len(livekit.state.transfers) == 1

    livekit.state.busy.clear()
    livekit.state.outage = True  # LiveKit down: the same, never a 500
    bye = (await connected.post(f"/api/sessions/{session_id}/messages", {"text": "nothing"})).json()
    assert bye["outcome"] == "completed"
    call = await _call_of(connected, session_id)
    assert call["transfer_status"] == "failed" and call["transferred_to"] is None
    assert "transfer_failed" in call["signal_types"]


async def test_a_web_conversation_cannot_be_transferred(connected: Org, database: Any) -> None:
    flow_id = await _handoff_flow(connected)
    started = (await connected.post("/api/sessions", {"flow_id": flow_id, "channel": "web"})).json()
    turn = (await connected.post(f"/api/sessions/{started['id']}/messages", {"text": "a person"})).json()
    assert turn["reply"] == "Sorry, I cannot connect you right now. What else?"
    assert [e["data"]["status"] for e in turn["events"] if e["type"] == "transfer"] == ["unavailable"]
    async with database.sessionmaker() as session:
        row = await session.get(ConversationSession, started["id"])
        assert row is not None and row.state["transfer"]["status"] == "unavailable"


async def test_a_transfer_target_that_is_not_e164_is_refused_at_validation(connected: Org) -> None:
    for bad in ("030 9999999", "+0309999999", "4930999999", "+49309999999999999"):
        nodes = [dict(n) for n in HANDOFF["nodes"]]  # type: ignore[union-attr]
        nodes[1]["phone_number"] = bad
        definition = {**HANDOFF, "nodes": nodes}
        created = await connected.post("/api/flows", {"name": "Bad", "definition": definition})
        assert created.status_code == 422, created.text
        (problem,) = created.json()["detail"]
        assert problem["loc"][-1] == "phone_number" and "E.164" in problem["msg"], problem
        checked = await connected.post("/api/flows/validate", {"definition": definition})
        assert "E.164" in checked.text, checked.text


async def test_the_transfer_and_end_session_tools_act(connected: Org, livekit: Stub) -> None:
    await connected.make(
        "/api/tools",
        {
            "name": "to_human",
            "type": "transfer",
            "config": {"phone_number": TARGET, "message": "Connecting."},
        },
    )
    await connected.make(
        "/api/tools", {"name": "hang_up", "type": "end_session", "config": {"message": "Bye!"}}
    )

    def tool_flow(tool: str) -> dict[str, Any]:
        return {
            "language": "en",
            "start_node": "ask",
            "nodes": [
                {"id": "ask", "type": "collect", "variable": "wish", "kind": "free_text", "prompt": "Yes?",
                 "next": "act"},
                {"id": "act", "type": "tool", "tool": tool, "arguments": {}, "on_error": "bye", "next": "bye"},
                {"id": "bye", "type": "end", "text": "The flow's own goodbye."},
            ],
        }  # fmt: skip

    transfer_flow = await connected.make("/api/flows", {"name": "T", "definition": tool_flow("to_human")})
    assert (await connected.post(f"/api/flows/{transfer_flow['id']}/publish")).status_code == 200
    session_id = await _livekit_call(connected, str(transfer_flow["id"]))
    turn = (await connected.post(f"/api/sessions/{session_id}/messages", {"text": "a person"})).json()
    assert (turn["status"], turn["outcome"]) == ("ended", "transferred")
    assert [t.transfer_to for t in livekit.state.transfers] == [f"tel:{TARGET}"]
    call = await _call_of(connected, session_id)
    (tool_call,) = call["tool_calls"]
    assert tool_call["status"] == "ok"
    assert tool_call["result"] == {"action": "transfer", "to": TARGET, "status": "transferred"}

    end_flow = await connected.make("/api/flows", {"name": "E", "definition": tool_flow("hang_up")})
    assert (await connected.post(f"/api/flows/{end_flow['id']}/publish")).status_code == 200
    started = (await connected.post("/api/sessions", {"flow_id": end_flow["id"], "channel": "web"})).json()
    turn = (await connected.post(f"/api/sessions/{started['id']}/messages", {"text": "that's all"})).json()
    assert turn["reply"] == "Bye!"  # the flow's own end node never runs
    assert (turn["status"], turn["outcome"], turn["end_reason"]) == ("ended", "completed", "ended_by_agent")


async def test_when_the_flow_ends_a_livekit_call_its_sip_participant_is_hung_up(
    connected: Org, livekit: Stub
) -> None:
    session_id = await _livekit_call(connected, await _handoff_flow(connected))
    room, identity = f"parley-{session_id}", f"phone-{session_id}"
    livekit.state.busy.add(TARGET)
    await connected.post(f"/api/sessions/{session_id}/messages", {"text": "a person"})
    assert livekit.state.removed == []  # still talking
    bye = (await connected.post(f"/api/sessions/{session_id}/messages", {"text": "nothing"})).json()
    assert bye["outcome"] == "completed"
    assert livekit.state.removed == [(room, identity)]
    assert (room, identity) not in livekit.state.in_rooms


async def test_a_transferred_livekit_call_is_not_hung_up(connected: Org, livekit: Stub) -> None:
    session_id = await _livekit_call(connected, await _handoff_flow(connected))
    turn = (await connected.post(f"/api/sessions/{session_id}/messages", {"text": "a person"})).json()
    assert turn["outcome"] == "transferred"
    assert livekit.state.removed == [] and "RemoveParticipant" not in livekit.state.calls
