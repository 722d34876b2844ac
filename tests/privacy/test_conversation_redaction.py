"""With redaction on, a whole conversation through the HTTP API leaves no original in the database:
not in the session's state, the call record's transcript, tool calls (arguments and results) or
variables, nor in any other table. With it off, the same conversation stores them (the check can fail)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from parley.calls.models import Call
from parley.kit.db import Base
from tests.live import serve_in_thread
from tests.sessions.conftest import Platform, make_platform

__all__ = ["make_platform"]

SAID = (
    "Bitte rufen Sie mich unter 0171 9876543 an oder schreiben Sie an max.muster@example.de, "
    "meine IBAN ist DE89 3704 0044 0532 0130 00 und mein Auftrag 12345678"
)
ORIGINALS = ("9876543", "max.muster@example.de", "3704 0044", "kunde@example.org", "5556677", "4111 1111")


async def _contact(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "success": True,
            "note": request.query_params.get("note", ""),
            "contact": {
                "email": "kunde@example.org",
                "phone": "+49 30 5556677",
                "card": "4111 1111 1111 1111",
            },
        }
    )


@pytest.fixture(scope="module")
def crm() -> Iterator[str]:
    with serve_in_thread(Starlette(routes=[Route("/contact", _contact)])) as url:
        yield url


FLOW: dict[str, Any] = {
    "language": "de",
    "variables": {"result": None},
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "q",
            "kind": "free_text",
            "prompt": "Was kann ich tun?",
            "next": "note",
        },
        {
            "id": "note",
            "type": "tool",
            "tool": "crm",
            "arguments": {"note": "{{ q }}"},
            "result_variable": "result",
            "next": "bye",
        },
        {
            "id": "bye",
            "type": "end",
            "text": "Notiert: {{ q }}. Wir melden uns unter {{ result.contact.phone }}.",
        },
    ],
}


async def _converse(platform: Platform, crm: str) -> tuple[str, dict[str, Any]]:
    await platform.tool(
        {
            "name": "crm",
            "type": "http",
            "config": {"method": "GET", "url": f"{crm}/contact", "query": {"note": "{{ note }}"}},
        }
    )
    flow_id = await platform.flow(FLOW)
    opening = await platform.start(flow_id, channel="phone", caller="+4930123456")
    turn = await platform.say(opening["id"], SAID)
    assert turn["status"] == "ended", turn
    return opening["id"], turn


async def _everything(db: AsyncSession) -> str:
    """Every row of every table, as text."""
    dump = []
    for table in Base.metadata.sorted_tables:
        dump += [repr(tuple(row)) for row in (await db.execute(select(table))).all()]
    return "\n".join(dump)


async def test_with_redaction_on_the_database_never_holds_the_original(
    make_platform: Any, crm: str, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform()
    response = await platform.client.patch(
        "/api/privacy/settings", json={"redaction_enabled": True}, headers=platform.headers
    )
    assert response.status_code == 200, response.text
    session_id, turn = await _converse(platform, crm)
    # the caller is answered with what the flow says; only what is stored is redacted
    assert "5556677" in turn["reply"]

    call = await db_session.scalar(select(Call).where(Call.session_id == session_id))
    assert call is not None
    caller_turn = next(t for t in call.transcript if t["speaker"] == "caller")
    assert caller_turn["text"] == (
        "Bitte rufen Sie mich unter [phone] an oder schreiben Sie an [email], "
        "meine IBAN ist [iban] und mein Auftrag 12345678"
    )
    (tool_call,) = call.tool_calls
    assert tool_call["status"] == "ok" and "[phone]" in tool_call["arguments"]["note"]
    assert tool_call["result"]["contact"] == {"email": "[email]", "phone": "[phone]", "card": "[card]"}
    assert call.variables["q"].endswith("mein Auftrag 12345678")
    assert "Wir melden uns unter [phone]." in call.transcript[-1]["text"]

    everything = await _everything(db_session)
    for original in ORIGINALS:
        assert original not in everything, original
    assert "12345678" in everything  # the order number the agent needs is kept


async def test_with_redaction_off_the_same_conversation_is_stored_as_said(
    make_platform: Any, crm: str, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform()
    await _converse(platform, crm)
    everything = await _everything(db_session)
    for original in ORIGINALS:
        assert original in everything, original
