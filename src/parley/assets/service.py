"""Assets: files checked by their bytes, stored in blob storage, described by a row.

The blob is written before the row is flushed and removed again if the flush fails; a deleted asset's
blob is removed only once the deletion has committed, so a failed request never loses content.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from urllib.parse import quote

import anyio.to_thread
import structlog
from sqlalchemy import Select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.assets.images import ProcessedImage, process_avatar
from parley.assets.models import Asset
from parley.assets.schemas import AssetOut
from parley.assets.sniff import AssetKind, Sniffed, invalid_field, sniff
from parley.auth.models import Organization, User
from parley.auth.principal import OrgContext
from parley.auth.roles import Role
from parley.kit.blobs import BlobNotFound, BlobStore, BlobStoreError
from parley.kit.db import after_commit
from parley.kit.errors import (
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)
from parley.kit.ids import new_id
from parley.kit.ranges import Download, ranged_download
from parley.kit.tenancy import get_owned, scoped

log = structlog.get_logger("parley.assets")

MAX_NAME = 255


def content_url(asset_id: str) -> str:
    return f"/api/assets/{asset_id}/content"


def to_out(asset: Asset) -> AssetOut:
    return AssetOut(
        id=asset.id,
        name=asset.name,
        kind=asset.kind,
        content_type=asset.content_type,
        size=asset.size,
        sha256=asset.sha256,
        original_filename=asset.original_filename,
        url=content_url(asset.id),
        created_by=asset.created_by,
        created_at=asset.created_at,
    )


def _clean_text(value: str) -> str:
    """Printable text only: control and format characters (e.g. bidi overrides) are dropped."""
    return "".join(ch for ch in value if unicodedata.category(ch)[0] != "C").strip()


def display_filename(filename: str | None) -> str | None:
    """The uploaded file's base name, cleaned, for metadata only."""
    if not filename:
        return None
    base = re.split(r"[\\/]", filename)[-1]
    return _clean_text(base)[:MAX_NAME] or None


def safe_download_name(name: str, extension: str) -> str:
    """An ASCII file name for Content-Disposition that can never be a path or break the header."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_name).strip("._-")[:100] or "asset"
    if "." in stem:
        stem = stem.rsplit(".", 1)[0] or "asset"
    return f"{stem}.{extension}"


def content_disposition(asset: Asset, extension: str) -> str:
    fallback = safe_download_name(asset.name, extension)
    utf8 = quote(f"{_clean_text(asset.name).rsplit('.', 1)[0] or 'asset'}.{extension}", safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{utf8}"


def _resolve_kind(sniffed: Sniffed, requested: AssetKind | None) -> AssetKind:
    if requested is None or requested == "other" or requested == sniffed.kind:
        return requested or sniffed.kind
    raise invalid_field("kind", f"The file is a {sniffed.label}, which is not of kind {requested!r}.")


def _blob_key(organization_id: str, asset_id: str) -> str:
    return f"{organization_id}/assets/{asset_id}"


async def store_asset(
    session: AsyncSession,
    blobs: BlobStore,
    context: OrgContext,
    *,
    data: bytes,
    content_type: str,
    kind: AssetKind,
    name: str,
    original_filename: str | None,
) -> Asset:
    """Write the bytes to blob storage and add the row (flushed, not committed)."""
    asset_id = new_id("ast")
    key = _blob_key(context.organization_id, asset_id)
    try:
        await blobs.put(key, data, content_type)
    except BlobStoreError as exc:
        log.error("blob_write_failed", error=str(exc))
        raise ServiceUnavailable("The file storage is unavailable; the file was not stored.") from exc
    asset = Asset(
        id=asset_id,
        organization_id=context.organization_id,
        name=name[:MAX_NAME],
        kind=kind,
        content_type=content_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        original_filename=original_filename,
        blob_key=key,
        created_by=context.actor_user_id,
    )
    session.add(asset)
    try:
        await session.flush()
    except BaseException:
        await blobs.delete(key)
        raise
    return asset


async def create_asset(
    session: AsyncSession,
    blobs: BlobStore,
    context: OrgContext,
    *,
    data: bytes,
    filename: str | None,
    name: str | None,
    kind: AssetKind | None,
) -> Asset:
    if not data:
        raise invalid_field("file", "The file is empty.")
    sniffed = sniff(data)
    original = display_filename(filename)
    clean_name = _clean_text(name) if name is not None else ""
    return await store_asset(
        session,
        blobs,
        context,
        data=data,
        content_type=sniffed.content_type,
        kind=_resolve_kind(sniffed, kind),
        name=clean_name or original or f"{sniffed.kind}.{sniffed.extension}",
        original_filename=original,
    )


async def get_asset(session: AsyncSession, context: OrgContext, asset_id: str) -> Asset:
    return await get_owned(session, Asset, asset_id, context.organization_id, "Asset")


async def delete_asset(session: AsyncSession, blobs: BlobStore, context: OrgContext, asset_id: str) -> Asset:
    asset = await get_asset(session, context, asset_id)
    url = content_url(asset.id)
    # Avatars pointing at this asset fall back to none rather than to a broken link.
    await session.execute(
        update(Organization)
        .where(Organization.id == context.organization_id, Organization.avatar_url == url)
        .values(avatar_url=None)
    )
    await session.execute(update(User).where(User.avatar_url == url).values(avatar_url=None))
    await session.delete(asset)
    await session.flush()
    key = asset.blob_key

    async def remove_blob() -> None:
        try:
            await blobs.delete(key)
        except BlobStoreError as exc:  # the row is gone; an orphaned blob is only wasted space
            log.warning("blob_delete_failed", asset_id=asset_id, error=str(exc))

    after_commit(session, remove_blob)
    return asset


async def open_content(blobs: BlobStore, asset: Asset, extension: str, range_header: str | None) -> Download:
    try:
        size = await blobs.size(asset.blob_key)
    except BlobNotFound as exc:
        log.error("asset_blob_missing", asset_id=asset.id)
        raise NotFound(f"The content of asset {asset.id!r} is missing from storage.") from exc
    except BlobStoreError as exc:
        raise ServiceUnavailable("The file storage is unavailable; try again later.") from exc
    return ranged_download(
        blobs,
        asset.blob_key,
        size,
        range_header,
        "asset",
        {"Content-Disposition": content_disposition(asset, extension), "ETag": f'"{asset.sha256}"'},
    )


AVATAR_MAX_BYTES = 5 * 1024 * 1024


async def set_avatar(
    session: AsyncSession,
    blobs: BlobStore,
    context: OrgContext,
    *,
    data: bytes,
    filename: str | None,
    target: str,
) -> tuple[Asset, ProcessedImage]:
    """Re-encode the image, store it as an image asset and point the user's or organization's avatar at it."""
    principal = context.principal
    if not context.role.at_least(Role.member):
        # Every avatar is stored as one of the organization's assets, which viewers may not create.
        raise Forbidden(
            "Uploading an avatar stores an image among the organization's assets, which needs the member "
            f"role or higher; your role is {context.role.value}."
        )
    if target == "organization" and not context.role.at_least(Role.admin):
        raise Forbidden(
            f"Changing the organization's avatar needs the admin role or higher; your role is {context.role.value}."
        )
    if target == "user" and not principal.is_user:
        raise Forbidden("An API key has no user avatar; use a user's token, or target=organization.")
    if not data:
        raise invalid_field("file", "The file is empty.")
    if len(data) > AVATAR_MAX_BYTES:
        raise PayloadTooLarge(f"Avatar images may be at most {AVATAR_MAX_BYTES // (1024 * 1024)} MB.")
    image = await anyio.to_thread.run_sync(process_avatar, data)
    extension = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}[image.content_type]
    asset = await store_asset(
        session,
        blobs,
        context,
        data=image.data,
        content_type=image.content_type,
        kind="image",
        name=f"{target}-avatar.{extension}",
        original_filename=display_filename(filename),
    )
    url = content_url(asset.id)
    if target == "organization":
        organization = await session.get(Organization, context.organization_id)
        if organization is None:
            raise NotFound("The organization was not found.")
        organization.avatar_url = url
    else:
        user = await session.get(User, principal.id)
        if user is None:
            raise NotFound("Your user record was not found.")
        user.avatar_url = url
    await session.flush()
    return asset, image


def assets_query(organization_id: str, kind: str | None = None) -> Select[Asset]:
    stmt = scoped(Asset, organization_id)
    if kind is not None:
        stmt = stmt.where(Asset.kind == kind)
    return stmt
