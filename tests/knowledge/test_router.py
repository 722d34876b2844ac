from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.knowledge.models import KnowledgeChunk, KnowledgeDocument
from tests.conftest import auth, make_token
from tests.knowledge.files import make_docx, make_pdf
from tests.knowledge.helpers import upload_file, upload_text, wait_for_document
from tests.organizations.test_router import ALICE, BOB, create_org

CAROL = make_token("carol", name="Carol")


@pytest.fixture
async def org(client: httpx.AsyncClient) -> dict[str, Any]:
    return await create_org(client)


@pytest.fixture
def headers(org: dict[str, Any]) -> dict[str, str]:
    return auth(ALICE, str(org["id"]))


async def test_upload_text_becomes_ready_with_chunks(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    text = "\n\n".join(
        f"Absatz {i}: Die Werkstatt prüft Bremsen, Öl und Licht gründlich." * 4 for i in range(8)
    )
    response = await client.post(
        "/api/knowledge/documents", json={"title": "Prüfumfang", "text": text}, headers=headers
    )
    assert response.status_code == 200, response.text
    created = response.json()
    assert created["id"].startswith("doc_")
    assert created["status"] == "pending"
    assert created["source"] == "text"
    assert created["chunk_count"] == 0
    assert created["text"] is None

    ready = await wait_for_document(client, app, headers, created["id"])
    assert ready["status"] == "ready"
    assert ready["error"] is None
    assert ready["chunk_count"] >= 3
    assert ready["indexed_at"] is not None
    assert ready["text"] is None

    with_text = await client.get(
        f"/api/knowledge/documents/{created['id']}", params={"include_text": "true"}, headers=headers
    )
    assert with_text.json()["text"].startswith("Absatz 0: Die Werkstatt prüft Bremsen")


async def test_text_body_as_multipart_fields_and_text_plain(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    form = await client.post(
        "/api/knowledge/documents",
        files={"title": (None, "Formular"), "text": (None, "Text aus einem Formular.")},
        headers=headers,
    )
    assert form.status_code == 200, form.text
    assert (await wait_for_document(client, app, headers, form.json()["id"]))["status"] == "ready"
    plain = await client.post(
        "/api/knowledge/documents",
        content=b'{"title": "Plain", "text": "Als text/plain gesendet."}',
        headers={**headers, "Content-Type": "text/plain"},
    )
    assert plain.status_code == 200, plain.text
    assert (await wait_for_document(client, app, headers, plain.json()["id"]))["title"] == "Plain"


@pytest.mark.parametrize(
    ("filename", "data", "content_type", "expected"),
    [
        (
            "notes.txt",
            "Ölwechsel kostet 89 Euro inklusive Filter.".encode(),
            "text/plain",
            "Ölwechsel kostet 89 Euro",
        ),
        ("faq.md", b"# FAQ\n\nWe open at **8 am**.", "text/markdown", "We open at **8 am**."),
        (
            "page.html",
            b"<html><head><script>var secret = 'tracking';</script><style>p{color:red}</style></head>"
            b"<body><h1>Hours</h1><p>Open Monday to Friday &amp; Saturday.</p></body></html>",
            "text/html",
            "Hours\n\nOpen Monday to Friday & Saturday.",
        ),
        (
            "scan.pdf",
            make_pdf("Warranty: 24 months on all repairs"),
            "application/pdf",
            "Warranty: 24 months",
        ),
        (
            "info.docx",
            make_docx("Ersatzwagen sind kostenlos.", "Bitte Führerschein mitbringen."),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "Ersatzwagen sind kostenlos.\n\nBitte Führerschein mitbringen.",
        ),
        # The content decides, not the name: a PDF called .txt is read as a PDF.
        ("misnamed.txt", make_pdf("Really a PDF"), "application/pdf", "Really a PDF"),
        ("latin1.txt", "Grüße aus München".encode("cp1252"), "text/plain", "Grüße aus München"),
    ],
)
async def test_upload_each_file_type(
    client: httpx.AsyncClient,
    app: Any,
    headers: dict[str, str],
    filename: str,
    data: bytes,
    content_type: str,
    expected: str,
) -> None:
    document = await upload_file(client, app, headers, filename, data)
    assert document["status"] == "ready", document
    assert document["content_type"] == content_type
    assert document["filename"] == filename
    assert document["size_bytes"] == len(data)
    assert document["title"] == filename.rsplit(".", 1)[0]
    text = (
        await client.get(f"/api/knowledge/documents/{document['id']}?include_text=true", headers=headers)
    ).json()["text"]
    assert expected in text
    assert "tracking" not in text and "color:red" not in text


async def test_file_upload_takes_a_title(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    document = await upload_file(client, app, headers, "x.txt", b"Some text.", title="Preisliste 2026")
    assert document["title"] == "Preisliste 2026"


@pytest.mark.parametrize(
    ("filename", "data", "status", "phrase"),
    [
        ("fake.pdf", b"This is not a PDF at all", 415, "not one"),
        ("fake.docx", b"plain text pretending", 415, "Word document"),
        ("archive.zip", b"PK\x03\x04" + b"\x00" * 40, 415, "ZIP archive"),
        ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), 415, "binary"),
        ("empty.txt", b"", 422, "empty"),
    ],
)
async def test_refused_uploads(
    client: httpx.AsyncClient, headers: dict[str, str], filename: str, data: bytes, status: int, phrase: str
) -> None:
    response = await client.post(
        "/api/knowledge/documents", files={"file": (filename, data)}, headers=headers
    )
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    # 415 has a sentence; a 422 has FastAPI's list, like every 422.
    assert phrase in (detail if status != 422 else detail[0]["msg"])
    listed = (await client.get("/api/knowledge/documents", headers=headers)).json()
    assert listed["items"] == []


async def test_invalid_text_bodies(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    missing = await client.post("/api/knowledge/documents", json={"title": "No text"}, headers=headers)
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "text"]
    extra = await client.post(
        "/api/knowledge/documents",
        files={"file": ("a.txt", b"x"), "status": (None, "ready")},
        headers=headers,
    )
    assert extra.status_code == 422
    assert extra.json()["detail"][0]["loc"] == ["body", "status"]


async def test_too_large_uploads(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    # Document uploads have their own body limit (20 MB plus form overhead), above the general 10 MiB...
    huge = b"a" * (20 * 1024 * 1024 + 1)
    response = await client.post(
        "/api/knowledge/documents", files={"file": ("huge.txt", huge)}, headers=headers
    )
    assert response.status_code == 413
    assert response.json() == {
        "detail": "Documents may have at most 20971520 bytes.",
        "code": "payload_too_large",
    }
    # ...and a body far beyond it is refused before it is read.
    response = await client.post(
        "/api/knowledge/documents", files={"file": ("bigger.txt", b"a" * (25 * 1024 * 1024))}, headers=headers
    )
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


async def test_corrupt_pdf_fails_with_a_reason(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    broken = b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R" + b" garbage" * 50
    document = await upload_file(client, app, headers, "broken.pdf", broken)
    assert document["status"] == "failed"
    assert document["error"] == "The PDF could not be read: the file is damaged or incomplete."
    assert document["chunk_count"] == 0
    failed = (
        await client.get("/api/knowledge/documents", params={"status": "failed"}, headers=headers)
    ).json()
    assert [d["id"] for d in failed["items"]] == [document["id"]]
    ready = (await client.get("/api/knowledge/documents", params={"status": "ready"}, headers=headers)).json()
    assert ready["items"] == []


async def test_pdf_without_text_fails_with_a_reason(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    document = await upload_file(client, app, headers, "scan.pdf", make_pdf())
    assert document["status"] == "failed"
    assert "contains no text" in document["error"]


async def test_list_paginates_newest_first(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    ids = [(await upload_text(client, app, headers, f"Doc {i}", f"Text {i}"))["id"] for i in range(3)]
    first = (await client.get("/api/knowledge/documents", params={"limit": 2}, headers=headers)).json()
    assert [d["id"] for d in first["items"]] == [ids[2], ids[1]]
    assert all(d["text"] is None for d in first["items"])
    second = (
        await client.get(
            "/api/knowledge/documents", params={"limit": 2, "cursor": first["next_cursor"]}, headers=headers
        )
    ).json()
    assert [d["id"] for d in second["items"]] == [ids[0]]
    assert second["next_cursor"] is None


async def test_delete_removes_chunks_blob_and_row(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str], db_session: AsyncSession
) -> None:
    document = await upload_file(
        client, app, headers, "hours.txt", "Samstags geöffnet von 8 bis 12 Uhr.".encode()
    )
    assert document["chunk_count"] == 1
    row = await db_session.get(KnowledgeDocument, document["id"])
    assert row is not None and row.blob_key
    blob_key = row.blob_key
    assert await app.state.blobs.exists(blob_key)
    found = await client.post("/api/knowledge/search", json={"query": "samstags"}, headers=headers)
    assert [h["document_id"] for h in found.json()["results"]] == [document["id"]]

    response = await client.delete(f"/api/knowledge/documents/{document['id']}", headers=headers)
    assert response.status_code == 200
    assert response.json() == {"id": document["id"], "deleted": True}

    assert (
        await client.get(f"/api/knowledge/documents/{document['id']}", headers=headers)
    ).status_code == 404
    chunks = await db_session.scalar(
        select(func.count()).select_from(KnowledgeChunk).where(KnowledgeChunk.document_id == document["id"])
    )
    assert chunks == 0
    assert not await app.state.blobs.exists(blob_key)
    found = await client.post("/api/knowledge/search", json={"query": "samstags"}, headers=headers)
    assert found.json()["results"] == []
    again = await client.delete(f"/api/knowledge/documents/{document['id']}", headers=headers)
    assert again.status_code == 404


async def test_another_organizations_documents_are_invisible(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    mine = await upload_text(client, app, headers, "Lack", "Smart Repair für Kratzer im Lack.")
    other_org = await create_org(client, BOB, name="Other Shop")
    bob = auth(BOB, str(other_org["id"]))
    theirs = await upload_text(client, app, bob, "Lack bei Bob", "Lackierung und Kratzer bei Bob.")

    assert (await client.get(f"/api/knowledge/documents/{theirs['id']}", headers=headers)).status_code == 404
    assert (
        await client.delete(f"/api/knowledge/documents/{theirs['id']}", headers=headers)
    ).status_code == 404
    results = (
        await client.post("/api/knowledge/search", json={"query": "Kratzer Lack"}, headers=headers)
    ).json()
    assert [h["document_id"] for h in results["results"]] == [mine["id"]]
    # Naming the other organization's document explicitly does not reveal it either.
    scoped = await client.post(
        "/api/knowledge/search", json={"query": "Kratzer", "document_ids": [theirs["id"]]}, headers=headers
    )
    assert scoped.json()["results"] == []
    listed = (await client.get("/api/knowledge/documents", headers=headers)).json()
    assert [d["id"] for d in listed["items"]] == [mine["id"]]


async def test_viewer_reads_but_cannot_write(
    client: httpx.AsyncClient, app: Any, org: dict[str, Any], headers: dict[str, str]
) -> None:
    added = await client.post(
        f"/api/organizations/{org['id']}/members",
        json={"subject": "carol", "role": "viewer"},
        headers=headers,
    )
    assert added.status_code == 200, added.text
    document = await upload_text(client, app, headers, "Hours", "We open at eight.")
    viewer = auth(CAROL, str(org["id"]))
    denied = await client.post("/api/knowledge/documents", json={"title": "T", "text": "x"}, headers=viewer)
    assert denied.status_code == 403
    denied = await client.delete(f"/api/knowledge/documents/{document['id']}", headers=viewer)
    assert denied.status_code == 403
    assert (await client.get(f"/api/knowledge/documents/{document['id']}", headers=viewer)).status_code == 200
    searched = await client.post("/api/knowledge/search", json={"query": "open"}, headers=viewer)
    assert [h["document_id"] for h in searched.json()["results"]] == [document["id"]]


async def test_search_validates_its_body(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    for body in ({"query": ""}, {"query": "x", "top_k": 0}, {"query": "x", "top_k": 21}, {"q": "x"}):
        response = await client.post("/api/knowledge/search", json=body, headers=headers)
        assert response.status_code == 422, body
