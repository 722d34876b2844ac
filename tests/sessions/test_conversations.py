"""Whole conversations through the HTTP API, against the real order connector on loopback."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.models import BrainSignal
from parley.calls.models import Call
from tests.sessions.conftest import Platform, closed_port_url, order_status_flow


def spoken_date(iso: str, language: str) -> str:
    months = {
        "de": ["Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober"],
        "en": [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
        ],
    }
    months["de"] += ["November", "Dezember"]
    months["en"] += ["November", "December"]
    day, month = int(iso[8:10]), months[language][int(iso[5:7]) - 1]
    return f"{day}. {month}" if language == "de" else f"{day} {month}"


async def call_of(db_session: AsyncSession, session_id: str) -> Call:
    call = await db_session.scalar(select(Call).where(Call.session_id == session_id))
    assert call is not None, "the ended session left no call record"
    return call


def said(turn: dict[str, Any]) -> str:
    return str(turn["reply"])


async def test_order_status_in_german_with_spoken_digits(
    shop: tuple[Platform, str], db_session: AsyncSession
) -> None:
    platform, flow_id = shop
    opening = await platform.start(flow_id, channel="phone", caller="+4917612345678")
    assert opening["status"] == "active" and opening["waiting"] is True
    assert opening["flow_version"] == 1
    assert "Guten Tag, hier ist der Auftragsservice von Autohaus Demo." in said(opening)
    assert "Bitte nennen Sie mir Ihre Auftragsnummer." in said(opening)

    status = await platform.say(opening["id"], "eins zwei")
    order = status["variables"]["order"]["order"]
    assert status["variables"]["order_number"] == "12" and order["id"] == 12
    # short: status and ready date; the cost only on request
    assert said(status) == (
        f"Ihr {order['manufacturer_name']} {order['model_name']}: {order['project_status']}, "
        f"fertig am {spoken_date(order['finish_date'], 'de')}. "
        "Möchten Sie die Kosten wissen?"
    )
    assert [e["type"] for e in status["events"]][:2] == ["tool_call", "say"]
    cost = await platform.say(opening["id"], "ja")
    assert said(cost) == (
        f"{order['total_gross_cost']} Euro brutto; Teile: {order['parts_status']}. Möchten Sie einen Rückruf?"
    )

    goodbye = await platform.say(opening["id"], "nein danke")
    assert said(goodbye) == "Vielen Dank für Ihren Anruf. Auf Wiederhören!"
    assert (goodbye["status"], goodbye["outcome"], goodbye["waiting"]) == ("ended", "completed", False)
    assert goodbye["events"][-1]["type"] == "end"

    call = await call_of(db_session, opening["id"])
    assert (call.outcome, call.channel, call.caller, call.flow_version) == (
        "completed",
        "phone",
        "+4917612345678",
        1,
    )
    assert [t["speaker"] for t in call.transcript][:3] == ["agent", "agent", "caller"]
    assert call.tool_calls[0]["status"] == "ok" and call.tool_calls[0]["http_status"] == 200
    assert call.tool_calls[0]["arguments"] == {"order_id": "12"}
    ended = await platform.post(f"/api/sessions/{opening['id']}/messages", {"text": "hallo?"})
    assert ended.status_code == 409 and ended.json()["code"] == "session_ended"


async def test_order_status_in_english_with_a_callback(
    shop: tuple[Platform, str], db_session: AsyncSession
) -> None:
    platform, flow_id = shop
    opening = await platform.start(flow_id, variables={"language": "en"}, caller="+4930555000")
    assert (
        said(opening)
        == "Hello, this is the order service of Autohaus Demo. Please tell me your order number."
    )

    status = await platform.say(opening["id"], "it is four")
    order = status["variables"]["order"]["order"]
    assert order["id"] == 4
    in_english = status["variables"]["in_english"]
    assert said(status) == (
        f"Your {order['manufacturer_name']} {order['model_name']}: {in_english[order['project_status']]}, "
        f"ready on {spoken_date(order['finish_date'], 'en')}. "
        "Would you like to know the cost?"
    )
    no_cost = await platform.say(opening["id"], "no")
    assert said(no_cost) == "Would you like a call back?"

    unclear = await platform.say(opening["id"], "hmm, maybe")
    assert said(unclear) == "Would you like a call back?"  # asked again
    goodbye = await platform.say(opening["id"], "yes please")
    assert said(goodbye) == "We will call you back. Goodbye!"
    assert goodbye["outcome"] == "completed"

    call = await call_of(db_session, opening["id"])
    assert call.language == "en"
    rows = (await db_session.scalars(select(BrainSignal).where(BrainSignal.call_id == call.id))).all()
    signals = [r for r in rows if r.type == "callback_requested"]
    assert signals and signals[0].details["order_number"] == "4"


async def test_digits_with_spaces_and_a_reprompt(shop: tuple[Platform, str]) -> None:
    platform, flow_id = shop
    opening = await platform.start(flow_id)
    reprompt = await platform.say(opening["id"], "keine Ahnung")
    assert said(reprompt) == "Bitte sagen Sie die Ziffern einzeln."
    status = await platform.say(opening["id"], "1 5")
    assert status["variables"]["order"]["order"]["id"] == 15


async def test_unknown_order_goes_the_not_found_path(
    shop: tuple[Platform, str], db_session: AsyncSession
) -> None:
    platform, flow_id = shop
    opening = await platform.start(flow_id, variables={"language": "en"})
    first = await platform.say(opening["id"], "999999")
    assert said(first) == "I could not find order 999999. Please tell me your order number."
    assert first["variables"]["attempts"] == 1
    # The lookup worked and found nothing: neither ok nor a failure.
    assert [e["data"]["status"] for e in first["events"] if e["type"] == "tool_call"] == ["not_found"]
    second = await platform.say(opening["id"], "9 9 9 9 9 8")
    # A text conversation has no phone line: the transfer node never claims to connect; it says so and
    # takes its failure branch (here: goodbye).
    assert said(second) == "Sorry, I cannot connect you right now. Thank you for calling. Goodbye!"
    assert [e["data"]["status"] for e in second["events"] if e["type"] == "transfer"] == ["unavailable"]
    assert (second["status"], second["outcome"]) == ("ended", "completed")
    call = await call_of(db_session, opening["id"])
    assert call.transferred_to is None and call.transfer_status == "unavailable"
    assert "transfer_failed" in call.signal_types
    assert [(c["status"], c["http_status"]) for c in call.tool_calls] == [("not_found", 404)] * 2
    # One signal per unknown order: the flow's own; the built-in rule does not repeat it.
    rows = (await db_session.scalars(select(BrainSignal).where(BrainSignal.call_id == call.id))).all()
    assert (
        sorted((r.type, r.source) for r in rows if r.type == "order_not_found")
        == [("order_not_found", "flow")] * 2
    )
    assert "tool_failure" not in call.signal_types


async def test_connector_down_says_the_fallback_and_carries_on(
    make_platform: Any, connector: dict[str, str], db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform(connector_url=closed_port_url())
    await platform.tool(
        {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}}
    )
    flow_id = await platform.flow(order_status_flow())
    opening = await platform.start(flow_id, variables={"language": "en"})
    turn = await platform.say(opening["id"], "7")
    assert said(turn) == (
        "Sorry, that did not work just now. Sorry, I cannot connect you right now. "
        "Thank you for calling. Goodbye!"
    )
    assert (turn["outcome"], turn["end_reason"]) == ("failed", "tool_failure")
    call = await call_of(db_session, opening["id"])
    assert call.tool_calls[0]["status"] == "error" and call.tool_calls[0]["error"]
    rows = (await db_session.scalars(select(BrainSignal).where(BrainSignal.call_id == call.id))).all()
    assert [(r.type, r.source) for r in rows if r.type == "tool_failure"] == [("tool_failure", "flow")]
    german = await platform.start(flow_id)
    turn = await platform.say(german["id"], "7")
    assert said(turn).startswith(
        "Entschuldigung, das hat gerade nicht geklappt. Entschuldigung, ich kann Sie gerade nicht verbinden."
    )


def _http_flow(path: str) -> dict[str, Any]:
    return {
        "language": "en",
        "variables": {"result": None, "fallback": "One moment, our system is slow today."},
        "start_node": "ask",
        "nodes": [
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "What do you need?", "next": "call"},
            {
                "id": "call",
                "type": "tool",
                "tool": "upstream",
                "arguments": {},
                "result_variable": "result",
                "on_error": "sorry",
                "next": "check",
            },
            {
                "id": "check",
                "type": "branch",
                "conditions": [{"when": "result.success", "next": "ok"}],
                "default": "unclear",
            },
            {"id": "ok", "type": "end", "text": "Status {{ result.order.project_status }}."},
            {"id": "unclear", "type": "say", "text": "I got an answer I do not understand.", "next": "ask"},
            {"id": "sorry", "type": "say", "text": "Let me note that.", "next": "ask"},
        ],
    }


async def _http_tool(platform: Platform, url: str, timeout: float = 5.0) -> None:
    await platform.tool(
        {
            "name": "upstream",
            "type": "http",
            "config": {"method": "GET", "url": url, "timeout_seconds": timeout},
        }
    )


async def test_a_tool_timeout_says_the_configured_fallback(
    make_platform: Any, upstream: str, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform()
    await _http_tool(platform, f"{upstream}/slow", timeout=0.3)
    flow_id = await platform.flow(_http_flow("/slow"))
    opening = await platform.start(flow_id)
    turn = await platform.say(opening["id"], "status please")
    assert said(turn) == "One moment, our system is slow today. Let me note that. What do you need?"
    assert turn["status"] == "active"
    assert turn["variables"]["result"]["success"] is False
    ended = await platform.post(f"/api/sessions/{opening['id']}/end")
    assert ended.status_code == 200 and ended.json()["outcome"] == "abandoned"
    call = await call_of(db_session, opening["id"])
    assert call.tool_calls[0]["status"] == "timeout"


async def test_a_tool_answer_that_is_not_json(make_platform: Any, upstream: str) -> None:
    platform: Platform = await make_platform()
    await _http_tool(platform, f"{upstream}/text")
    flow_id = await platform.flow(_http_flow("/text"))
    opening = await platform.start(flow_id)
    turn = await platform.say(opening["id"], "status please")
    assert said(turn) == "I got an answer I do not understand. What do you need?"
    assert turn["status"] == "active"


async def test_a_json_tool_answer(make_platform: Any, upstream: str) -> None:
    platform: Platform = await make_platform()
    await _http_tool(platform, f"{upstream}/json")
    flow_id = await platform.flow(_http_flow("/json"))
    opening = await platform.start(flow_id)
    turn = await platform.say(opening["id"], "status please")
    assert said(turn) == "Status fertig." and turn["outcome"] == "completed"
