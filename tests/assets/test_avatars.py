from __future__ import annotations

import io

import httpx
import pytest
from PIL import Image
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.models import User
from tests.assets import files
from tests.conftest import auth
from tests.organizations.test_router import ALICE, BOB, create_org


async def setup_org(client: httpx.AsyncClient) -> dict[str, str]:
    org = await create_org(client)
    return auth(ALICE, str(org["id"]))


async def upload_avatar(
    client: httpx.AsyncClient, headers: dict[str, str], data: bytes, filename: str = "me.png", **form: str
) -> httpx.Response:
    return await client.post(
        "/api/uploads/avatar", files={"file": (filename, data, "image/png")}, data=form, headers=headers
    )


@pytest.mark.parametrize(
    ("fmt", "content_type", "size", "expected"),
    [
        ("PNG", "image/png", (64, 48), (64, 48)),
        ("JPEG", "image/jpeg", (2000, 1000), (512, 256)),
        ("WEBP", "image/webp", (600, 900), (341, 512)),
    ],
)
async def test_avatar_is_reencoded_and_shrunk(
    client: httpx.AsyncClient,
    db_session: AsyncSession,
    fmt: str,
    content_type: str,
    size: tuple[int, int],
    expected: tuple[int, int],
) -> None:
    headers = await setup_org(client)
    original = files.image_bytes(fmt, size, exif=True)
    response = await upload_avatar(client, headers, original)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["content_type"] == content_type
    assert (body["width"], body["height"]) == expected
    assert body["url"] == f"/api/assets/{body['asset_id']}/content"

    content = await client.get(body["url"], headers=headers)
    assert content.status_code == 200
    assert content.headers["content-type"] == content_type
    stored = Image.open(io.BytesIO(content.content))
    assert stored.format == fmt
    assert stored.size == expected
    assert len(stored.getexif()) == 0
    assert b"SecretCam" not in content.content

    asset = (await client.get(f"/api/assets/{body['asset_id']}", headers=headers)).json()
    assert asset["kind"] == "image"

    user = await db_session.scalar(select(User).where(User.subject == "alice"))
    assert user is not None
    await db_session.refresh(user)
    assert user.avatar_url == body["url"]


async def test_png_transparency_is_kept(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    response = await upload_avatar(client, headers, files.image_bytes("PNG", mode="RGBA"))
    assert response.status_code == 200
    content = await client.get(response.json()["url"], headers=headers)
    assert Image.open(io.BytesIO(content.content)).mode == "RGBA"


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize(
    ("data", "status"),
    [
        (files.image_bytes("GIF"), 415),
        (b"this is just text, not a picture\n", 415),
        (files.PDF, 415),
        (files.png_bomb(), 413),
        (files.png_bomb(6000, 6000), 413),  # over the limit, under Pillow's own error threshold
        (files.image_bytes("PNG", (300, 300))[:400], 422),  # truncated
        (files.image_bytes("JPEG", (300, 300))[:600], 422),
        (b"", 422),
    ],
    ids=["gif", "text", "pdf", "bomb", "over-limit", "truncated-png", "truncated-jpeg", "empty"],
)
async def test_bad_images_are_refused(client: httpx.AsyncClient, data: bytes, status: int) -> None:
    headers = await setup_org(client)
    response = await upload_avatar(client, headers, data, filename="avatar.png")
    assert response.status_code == status, response.text
    assert (await client.get("/api/assets", headers=headers)).json()["items"] == []


async def test_avatar_file_size_limit(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    response = await upload_avatar(client, headers, b"\x89PNG\r\n\x1a\n" + b"\x00" * (5 * 1024 * 1024))
    assert response.status_code == 413


async def test_organization_avatar_needs_admin(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    org_id = headers["X-Organization-Id"]
    await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "member"}, headers=headers
    )
    bob = auth(BOB, org_id)
    png = files.image_bytes("PNG")
    response = await upload_avatar(client, bob, png, target="organization")
    assert response.status_code == 403
    assert (await upload_avatar(client, bob, png)).status_code == 200  # his own avatar is fine

    response = await upload_avatar(client, headers, png, target="organization")
    assert response.status_code == 200
    url = response.json()["url"]
    org = (await client.get(f"/api/organizations/{org_id}", headers=headers)).json()
    assert org["avatar_url"] == url

    # Deleting the asset clears the avatar instead of leaving a broken link.
    await client.delete(f"/api/assets/{response.json()['asset_id']}", headers=headers)
    org = (await client.get(f"/api/organizations/{org_id}", headers=headers)).json()
    assert org["avatar_url"] is None

    assert (await upload_avatar(client, headers, png, target="nobody")).status_code == 422


async def test_api_key_has_no_user_avatar(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    key = (
        await client.post("/api/api-keys", json={"name": "k", "scopes": ["admin"]}, headers=headers)
    ).json()
    key_headers = {"Authorization": f"Bearer {key['secret']}"}
    png = files.image_bytes("PNG")
    assert (await upload_avatar(client, key_headers, png)).status_code == 403
    assert (await upload_avatar(client, key_headers, png, target="organization")).status_code == 200


async def test_a_viewer_cannot_create_organization_assets_through_the_avatar_upload(
    client: httpx.AsyncClient,
) -> None:
    """Issue 18: every avatar is an organization asset, and viewers may not create assets."""
    headers = await setup_org(client)
    org_id = headers["X-Organization-Id"]
    await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "viewer"}, headers=headers
    )
    viewer = auth(BOB, org_id)
    png = files.image_bytes("PNG")
    for target in ("user", "organization"):
        response = await upload_avatar(client, viewer, png, target=target)
        assert response.status_code == 403, response.text
        assert "member role or higher" in response.json()["detail"]
    assets = await client.get("/api/assets", headers=headers)
    assert assets.status_code == 200 and assets.json()["items"] == []
    me = (await client.get("/api/me", headers=viewer)).json()
    assert me.get("avatar_url") is None
