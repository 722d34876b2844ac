"""Post-call analysis: with the organization's model (the local OpenAI-compatible server), without one
(deterministically from the flow's variables), when the model fails; the call list filter; and the
flow's analysis block validated with clear errors."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.llm.models import LLMUsage
from tests.notifications.conftest import Receiver
from tests.stubs.openai import StubState
from tests.webhooks.conftest import CALLBACK_FLOW, Platform, unique


async def test_without_a_model_the_fields_come_from_the_flow_variables(platform: Platform) -> None:
    flow_id = await platform.flow(CALLBACK_FLOW)
    call = await platform.call_of(await platform.converse(flow_id, "ja gerne", "Freitag nachmittag"))
    assert call["analysis_status"] == "done" and call["analysis_method"] == "variables"
    assert call["extracted"] == {
        "callback_requested": True,
        "preferred_time": "Freitag nachmittag",
        "topic": None,
    }
    summary = call["summary"]
    assert summary.startswith("Inbound phone call") and "outcome completed" in summary
    assert 'The caller first said: "ja gerne"' in summary
    assert "callback_requested=True" in summary and call["analyzed_at"] is not None


async def test_with_the_model_the_summary_and_fields_come_from_it(
    platform: Platform, llm: tuple[str, StubState], db_session: AsyncSession, receiver: Receiver
) -> None:
    url, _state = llm
    await platform.configure_llm(url)
    path = unique("analyzed")
    await platform.subscribe(f"{receiver.url}{path}", "call.analyzed")
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await platform.converse(flow_id, "nein", "Es geht um delivery, bitte Rückruf heute")
    call = await platform.call_of(session_id)
    assert call["analysis_method"] == "llm"
    assert call["summary"] == "The caller said: nein"
    # The model heard the request for a call back although the yes/no question was answered "nein".
    assert call["extracted"] == {
        "callback_requested": True,
        "preferred_time": "Es geht um delivery, bitte Rückruf heute",
        "topic": "delivery",
    }
    usage = await db_session.scalars(
        select(LLMUsage).where(LLMUsage.organization_id == platform.org, LLMUsage.source == "analysis")
    )
    assert len(list(usage)) == 1
    [received] = receiver.at(path)
    assert b'"analysis_method":"llm"' in received.body


async def test_a_failing_model_leaves_the_analysis_to_the_variables(
    platform: Platform, llm: tuple[str, StubState]
) -> None:
    url, _state = llm
    await platform.configure_llm(url, model="error-500")
    flow_id = await platform.flow(CALLBACK_FLOW)
    call = await platform.call_of(await platform.converse(flow_id, "nein", "egal"))
    assert call["analysis_status"] == "done" and call["analysis_method"] == "variables"
    assert call["extracted"]["callback_requested"] is False


async def test_a_model_answer_without_the_summary_is_not_trusted(
    platform: Platform, llm: tuple[str, StubState]
) -> None:
    url, _state = llm
    await platform.configure_llm(url)
    flow_id = await platform.flow(CALLBACK_FLOW)
    call = await platform.call_of(await platform.converse(flow_id, "ja", "no-summary bitte"))
    assert call["analysis_method"] == "variables" and call["summary"].startswith("Inbound")


async def test_a_flow_without_analysis_is_not_analysed(platform: Platform) -> None:
    definition = {k: v for k, v in CALLBACK_FLOW.items() if k != "analysis"}
    call = await platform.call_of(await platform.converse(await platform.flow(definition), "ja", "bald"))
    assert call["analysis_status"] is None and call["summary"] is None and call["extracted"] is None


async def test_the_call_list_filters_by_an_extracted_field(platform: Platform) -> None:
    flow_id = await platform.flow(CALLBACK_FLOW)
    yes = await platform.call_of(await platform.converse(flow_id, "ja", "Montag"))
    no = await platform.call_of(await platform.converse(flow_id, "nein", "nie"))

    async def ids(**params: Any) -> list[str]:
        response = await platform.get("/api/calls", **params)
        assert response.status_code == 200, response.text
        return [c["id"] for c in response.json()["items"]]

    assert await ids(**{"analysis.callback_requested": "true"}) == [yes["id"]]
    assert await ids(**{"analysis.callback_requested": "false"}) == [no["id"]]
    assert await ids(**{"analysis.preferred_time": "MONTAG"}) == [yes["id"]]
    assert await ids(**{"analysis.preferred_time": "montag", "analysis.callback_requested": "false"}) == []
    assert await ids(**{"analysis.topic": "billing"}) == []
    listed = await platform.get("/api/calls", **{"analysis.callback_requested": "true"})
    assert listed.json()["items"][0]["extracted"]["callback_requested"] is True
    for bad in ({"analysis.": "x"}, {"analysis.no-such field": "x"}, {"analysis.callback_requested": " "}):
        response = await platform.get("/api/calls", **bad)
        assert response.status_code == 400, response.text
        assert "analysis" in response.json()["detail"]


def _flow(analysis: Any) -> dict[str, Any]:
    return {**CALLBACK_FLOW, "analysis": analysis}


@pytest.mark.parametrize(
    ("analysis", "where", "words"),
    [
        ({"fields": {"topic": {"type": "enum"}}}, ["analysis", "fields", "topic", "values"], "needs a list"),
        (
            {"fields": {"ok": {"type": "bool", "values": ["a"]}}},
            ["analysis", "fields", "ok", "values"],
            "only applies to enum",
        ),
        (
            {"fields": {"t": {"type": "enum", "values": ["a", "a"]}}},
            ["analysis", "fields", "t", "values"],
            "more than once",
        ),
        ({"summary": False}, ["analysis"], "asks for nothing"),
        ({"fields": {"x": {"type": "date"}}}, ["analysis", "fields", "x", "type"], "bool"),
        ({"fields": {"1bad": {"type": "str"}}}, ["analysis", "fields", "1bad", "[key]"], "pattern"),
    ],
)
async def test_a_bad_analysis_block_is_refused_with_a_clear_error(
    platform: Platform, analysis: Any, where: list[str], words: str
) -> None:
    response = await platform.post("/api/flows", {"name": "Kaputt", "definition": _flow(analysis)})
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    matching = [e for e in errors if [str(p) for p in e["loc"]][-len(where) :] == where]
    assert matching, errors
    assert words in matching[0]["msg"]
