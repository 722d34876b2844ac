"""The knowledge node without an LLM, through the HTTP API over a real ingested Markdown document:
clean sentences, only the agent's language, and "nothing found" below the relevance threshold."""

from __future__ import annotations

import re
from typing import Any

from tests.knowledge.helpers import upload_file
from tests.sessions.conftest import Platform

BILINGUAL = """# Werkstatt Müller / Müller Garage

## Öffnungszeiten

Wir haben **montags bis freitags** von 7:30 bis 18:00 Uhr geöffnet, samstags von 8 bis 12 Uhr.

## Opening hours

We are open *Monday to Friday* from 7:30 am to 6 pm and on Saturdays from 8 am to noon.

## Garantie

- Auf jede Reparatur geben wir zwei Jahre Garantie.
- Die Garantie gilt auch für Teile, siehe [Bedingungen](https://example.com/agb).

## Warranty

- Every repair comes with a two-year warranty.
- The warranty also covers parts, see [terms](https://example.com/terms).

| Leistung | Preis |
|---|---|
| Ölwechsel | 89 Euro |
"""

MARKDOWN = re.compile(r"[#*_|\[\]()`]|https?://|^\s*- ", re.M)


def knowledge_flow(language: str, **node: Any) -> dict[str, Any]:
    return {
        "language": language,
        "start_node": "ask",
        "nodes": [
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "?", "next": "k"},
            {"id": "k", "type": "knowledge", "result_variable": "found", "next": "ask", **node},
        ],
    }


async def answer(platform: Platform, flow_id: str, question: str) -> str:
    session = await platform.start(flow_id)
    turn = await platform.say(session["id"], question)
    text = str(turn["reply"]).removesuffix(" ?")
    assert not MARKDOWN.search(text), text
    return text


async def test_the_knowledge_node_speaks_clean_sentences_in_its_language(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    document = await upload_file(
        platform.client, platform.app, platform.headers, "werkstatt.md", BILINGUAL.encode()
    )
    assert document["status"] == "ready", document
    german = await platform.flow(knowledge_flow("de"), name="Wissen")
    english = await platform.flow(knowledge_flow("en"), name="Knowledge")

    assert await answer(platform, german, "Wann habt ihr samstags geöffnet?") == (
        "Wir haben montags bis freitags von 7:30 bis 18:00 Uhr geöffnet, samstags von 8 bis 12 Uhr."
    )
    assert await answer(platform, english, "When are you open on Saturdays?") == (
        "We are open Monday to Friday from 7:30 am to 6 pm and on Saturdays from 8 am to noon."
    )
    assert await answer(platform, german, "Wie lange gilt die Garantie?") == (
        "Auf jede Reparatur geben wir zwei Jahre Garantie. Die Garantie gilt auch für Teile, siehe Bedingungen."
    )
    assert await answer(platform, english, "What does the warranty cover?") == (
        "Every repair comes with a two-year warranty. The warranty also covers parts, see terms."
    )
    assert await answer(platform, german, "Was kostet ein Ölwechsel?") == "Ölwechsel: 89 Euro."

    # Nothing about courtesy cars: said so, not the same chunk for every question.
    assert await answer(platform, german, "Was kostet ein Leihwagen?") == (
        "Dazu habe ich leider keine Information gefunden."
    )
    assert await answer(platform, english, "Do you have a courtesy car?") == (
        "Sorry, I found no information about that."
    )
    # German words only: an English agent does not read the German chunk.
    assert await answer(platform, english, "Ölwechsel Preis") == "Sorry, I found no information about that."


async def test_the_threshold_and_the_sentence_are_the_nodes(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    await upload_file(platform.client, platform.app, platform.headers, "werkstatt.md", BILINGUAL.encode())
    strict = await platform.flow(
        knowledge_flow("de", min_relevance=1.0, not_found="Das weiß ich nicht; ich verbinde Sie gern."),
        name="Streng",
    )
    # "habt" is not in the document: 2 of 3 words are not enough for this node
    assert await answer(platform, strict, "Wann habt ihr samstags geöffnet?") == (
        "Das weiß ich nicht; ich verbinde Sie gern."
    )
    assert (await answer(platform, strict, "samstags geöffnet")).startswith("Wir haben montags")
