from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.config import Settings
from tests.assets import files
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, BOB, create_org


async def setup_org(client: httpx.AsyncClient) -> dict[str, str]:
    org = await create_org(client)
    return auth(ALICE, str(org["id"]))


async def upload(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    data: bytes,
    filename: str = "file.bin",
    client_type: str = "application/octet-stream",
    **form: str,
) -> httpx.Response:
    return await client.post(
        "/api/assets", files={"file": (filename, data, client_type)}, data=form, headers=headers
    )


async def create(client: httpx.AsyncClient, headers: dict[str, str], data: bytes, **kwargs: Any) -> Any:
    response = await upload(client, headers, data, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    ("data", "content_type", "kind"),
    [
        (files.wav_bytes(), "audio/wav", "audio"),
        (files.MP3, "audio/mpeg", "audio"),
        (files.OGG, "audio/ogg", "audio"),
        (files.image_bytes("PNG"), "image/png", "image"),
        (files.image_bytes("JPEG"), "image/jpeg", "image"),
        (files.image_bytes("WEBP"), "image/webp", "image"),
        (files.image_bytes("GIF"), "image/gif", "image"),
        (files.PDF, "application/pdf", "document"),
        ("Grüße aus der Werkstatt\n".encode(), "text/plain; charset=utf-8", "document"),
    ],
    ids=["wav", "mp3", "ogg", "png", "jpeg", "webp", "gif", "pdf", "text"],
)
async def test_upload_detects_the_real_type(
    client: httpx.AsyncClient, data: bytes, content_type: str, kind: str
) -> None:
    headers = await setup_org(client)
    # The client's name and Content-Type claim something else: only the bytes count.
    asset = await create(
        client, headers, data, filename="claimed.exe", client_type="application/x-msdownload"
    )
    assert asset["content_type"] == content_type
    assert asset["kind"] == kind
    assert asset["size"] == len(data)
    assert asset["sha256"] == hashlib.sha256(data).hexdigest()
    assert asset["id"].startswith("ast_")
    assert asset["url"] == f"/api/assets/{asset['id']}/content"
    assert asset["original_filename"] == "claimed.exe"


@pytest.mark.parametrize(
    "data",
    [files.EXE, files.ELF, files.SCRIPT, files.ZIP, bytes(range(256)) * 4],
    ids=["exe", "elf", "script", "zip", "binary"],
)
async def test_executables_and_unknown_binary_are_415(client: httpx.AsyncClient, data: bytes) -> None:
    headers = await setup_org(client)
    response = await upload(client, headers, data, filename="photo.png", client_type="image/png")
    assert response.status_code == 415, response.text
    assert response.json()["code"] == "unsupported_media_type"
    assert (await client.get("/api/assets", headers=headers)).json()["items"] == []


async def test_empty_file_is_422(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    response = await upload(client, headers, b"")
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == "The file is empty."
    assert response.json()["detail"][0]["loc"] == ["body", "file"]


async def test_missing_file_is_422(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    response = await client.post("/api/assets", data={"name": "x"}, headers=headers)
    assert response.status_code == 422
    response = await client.post("/api/assets", json={"name": "x"}, headers=headers)
    assert response.status_code == 422


async def test_size_limit_is_413(client: httpx.AsyncClient, settings: Settings) -> None:
    headers = await setup_org(client)
    limit = 25 * 1024 * 1024
    assert settings.asset_max_bytes == limit
    response = await upload(client, headers, b"a" * (limit + 1), filename="big.txt")
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert (await upload(client, headers, b"a" * limit, filename="big.txt")).status_code == 200


async def test_name_kind_and_filename_handling(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    asset = await create(
        client, headers, files.PDF, filename="../../etc/passwd.pdf", name="Price list", kind="document"
    )
    assert asset["name"] == "Price list"
    assert asset["original_filename"] == "passwd.pdf"
    asset = await create(client, headers, files.PDF, filename="C:\\Users\\x\\Angebot\u202e.pdf")
    assert asset["name"] == "Angebot.pdf"
    asset = await create(client, headers, files.PDF, kind="other")
    assert asset["kind"] == "other"
    response = await upload(client, headers, files.PDF, kind="audio")
    assert response.status_code == 422
    assert "PDF document" in response.json()["detail"][0]["msg"]
    response = await upload(client, headers, files.PDF, kind="video")
    assert response.status_code == 422


async def test_list_filter_and_pagination(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    audio = await create(client, headers, files.wav_bytes())
    image = await create(client, headers, files.image_bytes("PNG"))
    doc = await create(client, headers, files.PDF)
    listed = (await client.get("/api/assets", headers=headers)).json()
    assert [a["id"] for a in listed["items"]] == [doc["id"], image["id"], audio["id"]]
    only_images = (await client.get("/api/assets", params={"kind": "image"}, headers=headers)).json()
    assert [a["id"] for a in only_images["items"]] == [image["id"]]
    first = (await client.get("/api/assets", params={"limit": 2}, headers=headers)).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    second = (
        await client.get("/api/assets", params={"limit": 2, "cursor": first["next_cursor"]}, headers=headers)
    ).json()
    assert [a["id"] for a in second["items"]] == [audio["id"]] and second["next_cursor"] is None
    assert (await client.get(f"/api/assets/{doc['id']}", headers=headers)).json() == doc


async def test_content_download_headers(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    data = files.PDF
    asset = await create(client, headers, data, name='Rech"nung\r\nX-Evil: 1 ü')
    response = await client.get(f"/api/assets/{asset['id']}/content", headers=headers)
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-length"] == str(len(data))
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="Rech_nungX-Evil_1_u.pdf"')
    assert "\r" not in disposition and "\n" not in disposition
    assert "x-evil" not in response.headers


async def test_text_content_type_is_served_as_stored(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    asset = await create(client, headers, b"<html><script>alert(1)</script></html>", filename="page.html")
    response = await client.get(f"/api/assets/{asset['id']}/content", headers=headers)
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["content-disposition"].startswith('attachment; filename="page.txt"')


async def test_content_ranges(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    data = b"0123456789" * 10_000
    asset = await create(client, headers, data)
    url = f"/api/assets/{asset['id']}/content"

    async def get(range_header: str) -> httpx.Response:
        return await client.get(url, headers={**headers, "Range": range_header})

    response = await get("bytes=10-19")
    assert response.status_code == 206
    assert response.content == data[10:20]
    assert response.headers["content-range"] == f"bytes 10-19/{len(data)}"
    assert response.headers["content-length"] == "10"
    response = await get("bytes=99990-")
    assert response.status_code == 206 and response.content == data[99990:]
    response = await get("bytes=-5")
    assert response.status_code == 206 and response.content == data[-5:]
    response = await get("bytes=5-999999999")
    assert response.status_code == 206 and response.content == data[5:]
    for ignored in ("bytes=0-1,5-6", "items=0-5", "bytes=9-3", "bytes=abc", "bytes=-x"):
        response = await get(ignored)
        assert response.status_code == 200 and response.content == data
    response = await get(f"bytes={len(data)}-")
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{len(data)}"
    assert response.json()["code"] == "range_not_satisfiable"


async def test_delete_removes_row_and_blob(client: httpx.AsyncClient, settings: Settings) -> None:
    headers = await setup_org(client)
    asset = await create(client, headers, files.PDF)
    blob_files = [p for p in (settings.data_dir / "blobs").rglob("*") if p.is_file()]
    assert any(p.name == asset["id"] for p in blob_files)
    response = await client.delete(f"/api/assets/{asset['id']}", headers=headers)
    assert response.status_code == 200
    assert response.json() == {"id": asset["id"], "deleted": True}
    assert not any(p.name == asset["id"] for p in (settings.data_dir / "blobs").rglob("*"))
    assert (await client.get(f"/api/assets/{asset['id']}", headers=headers)).status_code == 404
    assert (await client.get(f"/api/assets/{asset['id']}/content", headers=headers)).status_code == 404
    assert (await client.delete(f"/api/assets/{asset['id']}", headers=headers)).status_code == 404


async def test_roles_and_tenancy(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    org_id = headers["X-Organization-Id"]
    asset = await create(client, headers, files.PDF)
    await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "viewer"}, headers=headers
    )
    bob = auth(BOB, org_id)
    assert (await client.get(f"/api/assets/{asset['id']}/content", headers=bob)).status_code == 200
    assert (await upload(client, bob, files.PDF)).status_code == 403
    assert (await client.delete(f"/api/assets/{asset['id']}", headers=bob)).status_code == 403

    carol = make_token("carol")
    other = await create_org(client, carol, name="Other")
    carol_headers = auth(carol, str(other["id"]))
    for path in (f"/api/assets/{asset['id']}", f"/api/assets/{asset['id']}/content"):
        assert (await client.get(path, headers=carol_headers)).status_code == 404
    assert (await client.delete(f"/api/assets/{asset['id']}", headers=carol_headers)).status_code == 404
    assert (await client.get("/api/assets", headers=carol_headers)).json()["items"] == []
    assert (await client.post("/api/assets", files={"file": ("a", b"x")})).status_code == 401


async def test_blob_missing_from_storage_is_404_not_500(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    headers = await setup_org(client)
    asset = await create(client, headers, files.PDF)
    for path in Path(settings.data_dir / "blobs").rglob(asset["id"]):
        path.unlink()
    response = await client.get(f"/api/assets/{asset['id']}/content", headers=headers)
    assert response.status_code == 404
    assert "missing from storage" in response.json()["detail"]
