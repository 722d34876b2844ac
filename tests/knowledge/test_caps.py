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
