"""Ingestion caps (issue 18): zip bombs, oversized text; a document over a cap fails with its reason."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import httpx
import pytest

from parley.knowledge import parsing
from tests.conftest import auth
from tests.knowledge.files import make_docx
from tests.knowledge.helpers import upload_file, upload_text
from tests.organizations.test_router import ALICE, create_org


@pytest.fixture
async def headers(client: httpx.AsyncClient) -> dict[str, str]:
    return auth(ALICE, str((await create_org(client))["id"]))


def docx_bomb(member: str, size: int) -> bytes:
    """A real .docx with one more part of ``size`` bytes that compresses about 1000:1 (zeros)."""
    source = zipfile.ZipFile(io.BytesIO(make_docx("Öffnungszeiten: Mo–Fr 8–18 Uhr.")))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for item in source.infolist():
            if item.filename != member:
                bomb.writestr(item, source.read(item))
        with bomb.open(member, "w", force_zip64=True) as part:
            block = b"\0" * (1024 * 1024)
            for _ in range(size // len(block)):
                part.write(block)
    return out.getvalue()


async def test_a_docx_expanding_beyond_the_size_cap_is_refused(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    data = docx_bomb("word/media/padding.bin", 40 * 1024 * 1024)
    assert len(data) < 200_000  # 40 MB inside, a small upload
    document = await upload_file(client, app, headers, "bomb.docx", data)
    assert document["status"] == "failed"
    assert "expands to" in document["error"] and f"{parsing.MAX_UNCOMPRESSED_BYTES:,}" in document["error"]
    assert document["chunk_count"] == 0


async def test_a_docx_part_compressed_beyond_the_ratio_is_refused(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    data = docx_bomb("word/document.xml", 8 * 1024 * 1024)  # under the size cap, 1000:1
    document = await upload_file(client, app, headers, "bomb.docx", data)
    assert document["status"] == "failed"
    assert "'word/document.xml' is compressed more than 100:1" in document["error"]


@pytest.mark.parametrize("how", ["json", "file"])
async def test_text_over_the_length_cap_is_refused(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str], how: str
) -> None:
    text = "Wir reparieren Lack und Blech. " * (parsing.MAX_TEXT_CHARS // 30 + 10)
    if how == "json":
        document = await upload_text(client, app, headers, "Zu lang", text)
    else:
        document = await upload_file(client, app, headers, "zu-lang.txt", text.encode())
    assert document["status"] == "failed"
    assert f"longer than {parsing.MAX_TEXT_CHARS:,} characters" in document["error"]
    assert document["chunk_count"] == 0


async def test_a_normal_docx_still_becomes_ready(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    document = await upload_file(client, app, headers, "ok.docx", make_docx("Samstags 9–13 Uhr geöffnet."))
    assert document["status"] == "ready", document


def many_page_pdf(pages: int) -> bytes:
    """A valid PDF of ``pages`` pages that all show one small content stream."""
    stream = b"BT /F1 12 Tf 72 720 Td (Seite) Tj ET"
    kids = " ".join(f"{5 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /Font << /F1 4 0 R >> >> >>"
    )
    objects += [page] * pages
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


async def test_a_pdf_over_the_page_cap_is_refused(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    document = await upload_file(client, app, headers, "lang.pdf", many_page_pdf(parsing.MAX_PDF_PAGES + 1))
    assert document["status"] == "failed"
    assert document["error"] == (
        f"The PDF has {parsing.MAX_PDF_PAGES + 1:,} pages; at most {parsing.MAX_PDF_PAGES:,} are accepted."
    )
    small = await upload_file(client, app, headers, "kurz.pdf", many_page_pdf(3))
    assert small["status"] == "ready", small


async def test_text_that_makes_too_many_chunks_is_refused(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str]
) -> None:
    # Under the length cap, but long and short sentences in turn make chunks of about 400 characters.
    text = ("A" * 690 + ". " + "b" * 90 + ". ") * 2300
    assert len(text) < parsing.MAX_TEXT_CHARS
    document = await upload_text(client, app, headers, "Viele Stücke", text)
    assert document["status"] == "failed"
    assert f"at most {parsing.MAX_CHUNKS:,} are indexed" in document["error"]
    assert document["chunk_count"] == 0
