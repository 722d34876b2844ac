"""Ranking on a small repair-shop corpus (German and English), the same on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.knowledge.repository import query_terms
from tests.conftest import auth
from tests.knowledge.helpers import upload_file
from tests.organizations.test_router import ALICE, create_org

CORPUS = Path(__file__).parent / "corpus"

# Each question and a phrase of the chunk that answers it; that chunk must be among the top 3.
QUESTIONS = [
    ("Wann habt ihr am Samstag geöffnet?", "Samstags haben wir von 8:00 bis 12:00"),
    ("Kann ich das Auto nach Feierabend abgeben, wenn ihr geschlossen habt?", "Schlüsselbriefkasten"),
    ("Wie lange gilt die Garantie auf eine Reparatur?", "24 Monate Garantie"),
    (
        "Bekomme ich einen Ersatzwagen während der Reparatur?",
        "Für Reparaturen und Inspektionen ist der Ersatzwagen kostenlos",
    ),
    ("Can I pay by credit card or PayPal?", "We do not accept cheques"),
    ("Can I pay for the repair in monthly instalments?", "monthly instalments"),
    ("How long does the paint need to dry?", "heated spray booth"),
    ("Do you store my winter tyres?", "tyre hotel"),
    ("Is a courtesy car free of charge?", "courtesy car free of charge"),
]


@pytest.fixture
async def corpus(client: httpx.AsyncClient, app: Any) -> dict[str, str]:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    for path in sorted(CORPUS.iterdir()):
        document = await upload_file(client, app, headers, path.name, path.read_bytes())
        assert document["status"] == "ready", document
        assert document["chunk_count"] >= 2
    return headers


async def test_each_question_finds_its_answer_in_the_top_three(
    client: httpx.AsyncClient, corpus: dict[str, str]
) -> None:
    misses = []
    for question, phrase in QUESTIONS:
        response = await client.post(
            "/api/knowledge/search", json={"query": question, "top_k": 3}, headers=corpus
        )
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert len(results) <= 3
        if not any(phrase in hit["text"] for hit in results):
            misses.append((question, [hit["text"][:80] for hit in results]))
    assert misses == []


async def test_results_are_ranked_and_scoped(client: httpx.AsyncClient, corpus: dict[str, str]) -> None:
    response = await client.post(
        "/api/knowledge/search", json={"query": "Garantie Ersatzwagen Lack", "top_k": 20}, headers=corpus
    )
    results = response.json()["results"]
    scores = [hit["score"] for hit in results]
    assert scores == sorted(scores, reverse=True)
    assert all(hit["chunk_id"].startswith("chk_") and hit["document_title"] for hit in results)
    # Scripts in the HTML page were stripped: their words do not make it match other topics.
    titles = {hit["document_title"] for hit in results}
    assert "ersatzwagen" in titles
    only = [results[0]["document_id"]]
    scoped = await client.post(
        "/api/knowledge/search", json={"query": "Garantie Ersatzwagen", "document_ids": only}, headers=corpus
    )
    assert {hit["document_id"] for hit in scoped.json()["results"]} == set(only)


async def test_umlauts_and_case_do_not_matter(client: httpx.AsyncClient, corpus: dict[str, str]) -> None:
    for query in ("ÖFFNUNGSZEITEN", "offnungszeiten", "Führerschein", "fuhrerschein"):
        results = (await client.post("/api/knowledge/search", json={"query": query}, headers=corpus)).json()
        assert results["results"], query


async def test_no_match_and_stop_words_only(client: httpx.AsyncClient, corpus: dict[str, str]) -> None:
    none = await client.post(
        "/api/knowledge/search", json={"query": "Quantenphysik Raumfahrt"}, headers=corpus
    )
    assert none.json() == {"query": "Quantenphysik Raumfahrt", "results": []}
    punctuation = await client.post(
        "/api/knowledge/search", json={"query": "?!* ' \" OR AND"}, headers=corpus
    )
    assert punctuation.status_code == 200


def test_query_terms_fold_and_drop_stop_words() -> None:
    assert query_terms("Wann habt ihr am Samstag geöffnet?") == ["habt", "samstag", "geoffnet"]
    assert query_terms("Was ist das?") == ["was", "ist", "das"]  # only stop words: keep them
    assert query_terms("\"drop\" OR 'table' --") == ["drop", "table"]
