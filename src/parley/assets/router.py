from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import File, Form, Path, Query, Request, UploadFile
from fastapi.responses import StreamingResponse

from parley.assets import service
from parley.assets.models import Asset
from parley.assets.schemas import AssetOut, AvatarOut
from parley.assets.sniff import CONTENT_TYPES, AssetKind
from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.kit.blobs import BlobStore
from parley.kit.db import DbSession
from parley.kit.errors import ErrorBody, PayloadTooLarge, documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut

router = ParleyRouter(prefix="/api/assets", tags=["Assets"])
uploads_router = ParleyRouter(prefix="/api/uploads", tags=["System"])

AssetId = Annotated[str, Path(alias="assetId", max_length=40, description="Asset id (ast_...).")]

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_CONTENT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The whole file, with the content type detected at upload.",
        "content": {ct.split(";", 1)[0]: _BINARY for ct in CONTENT_TYPES},
    },
    206: {
        "description": "The requested byte range (`Range: bytes=start-end`).",
        "content": {ct.split(";", 1)[0]: _BINARY for ct in CONTENT_TYPES},
    },
    416: {"model": ErrorBody, "description": "The byte range starts past the end of the file."},
}


def _blobs(request: Request) -> BlobStore:
    store: BlobStore = request.app.state.blobs
    return store


async def _read_upload(file: UploadFile, limit: int, what: str) -> bytes:
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"{what} may be at most {limit:,} bytes.")
    return data


@router.post("", summary="Create Assets", response_model=AssetOut, responses=documented(413, 415, 503))
async def create_assets(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    file: Annotated[
        UploadFile,
        File(
            description="The file: audio, image, PDF or text (max 25 MB).",
            json_schema_extra={"format": "binary"},
        ),
    ],
    name: Annotated[
        str | None, Form(min_length=1, max_length=255, description="Display name; default: file name.")
    ] = None,
    kind: Annotated[
        AssetKind | None, Form(description="Expected kind; default: detected from the file's bytes.")
    ] = None,
) -> AssetOut:
    """Upload a file (multipart ``file``). Its type is detected from its bytes; executables and
    unrecognised binary files are refused (415)."""
    limit = request.app.state.settings.asset_max_bytes
    data = await _read_upload(file, limit, "Assets")
    asset = await service.create_asset(
        session, _blobs(request), context, data=data, filename=file.filename, name=name, kind=kind
    )
    describe(request, "asset", asset.id, kind=asset.kind, size=asset.size)
    return service.to_out(asset)


@router.get("", summary="List Assets", response_model=Page[AssetOut])
async def list_assets(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    kind: Annotated[AssetKind | None, Query(description="Only assets of this kind.")] = None,
) -> Page[AssetOut]:
    rows, cursor = await paginate(
        session, service.assets_query(context.organization_id, kind), Asset.id, page
    )
    return Page[AssetOut](items=[service.to_out(a) for a in rows], next_cursor=cursor)


@router.get("/{assetId}", summary="Get Asset", response_model=AssetOut)
async def get_asset(session: DbSession, context: OrgReader, asset_id: AssetId) -> AssetOut:
    return service.to_out(await service.get_asset(session, context, asset_id))


@router.get(
    "/{assetId}/content",
    summary="Get Asset Content",
    response_class=StreamingResponse,
    response_model=None,
    responses=_CONTENT_RESPONSES,
)
async def get_asset_content(
    request: Request, session: DbSession, context: OrgReader, asset_id: AssetId
) -> StreamingResponse:
    """The file itself, as an attachment with its stored content type. Supports single byte ranges."""
    asset = await service.get_asset(session, context, asset_id)
    extension = CONTENT_TYPES.get(asset.content_type, ("other", "bin"))[1]
    content = await service.open_content(_blobs(request), asset, extension, request.headers.get("range"))
    return StreamingResponse(
        content.chunks, status_code=content.status, media_type=asset.content_type, headers=content.headers
    )


@router.delete("/{assetId}", summary="Delete Asset", response_model=DeletedOut)
async def delete_asset(
    request: Request, session: DbSession, context: OrgWriter, asset_id: AssetId
) -> DeletedOut:
    """Delete the asset and its stored file. Avatars pointing at it are cleared."""
    asset = await service.delete_asset(session, _blobs(request), context, asset_id)
    describe(request, "asset", asset.id)
    return DeletedOut(id=asset.id)


@uploads_router.post(
    "/avatar",
    summary="Create Upload Avatar",
    response_model=AvatarOut,
    responses=documented(413, 415, 503),
)
async def create_upload_avatar(
    request: Request,
    session: DbSession,
    context: OrgReader,
    file: Annotated[
        UploadFile,
        File(description="A PNG, JPEG or WebP image (max 5 MB).", json_schema_extra={"format": "binary"}),
    ],
    target: Annotated[
        Literal["user", "organization"],
        Form(description="Whose avatar: yours (default) or the organization's (admins)."),
    ] = "user",
) -> AvatarOut:
    """Set your avatar or the organization's. The image is decoded, stripped of metadata, shrunk to fit
    512×512, re-encoded and stored as an image asset."""
    data = await _read_upload(file, service.AVATAR_MAX_BYTES, "Avatar images")
    asset, image = await service.set_avatar(
        session, _blobs(request), context, data=data, filename=file.filename, target=target
    )
    resource = (
        ("organization", context.organization_id)
        if target == "organization"
        else ("user", context.principal.id)
    )
    describe(request, resource[0], resource[1], asset_id=asset.id)
    return AvatarOut(
        asset_id=asset.id,
        url=service.content_url(asset.id),
        width=image.width,
        height=image.height,
        content_type=image.content_type,
    )
