from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query, Request

from parley.api_keys import service
from parley.api_keys.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyOut
from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgAdmin
from parley.auth.models import ApiKey
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter

router = ParleyRouter(prefix="/api/api-keys", tags=["API Keys"])

KeyId = Annotated[str, Path(alias="keyId", max_length=40, description="API key id (key_...).")]


@router.post("", summary="Create API Key", response_model=ApiKeyCreated)
async def create_api_key(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    data: Annotated[ApiKeyCreate, ParsedBody(ApiKeyCreate)],
) -> ApiKeyCreated:
    """Create a key for the active organization. The secret is in this response only."""
    key, secret = await service.create_key(session, context, data)
    describe(request, "api_key", key.id, scopes=key.scopes)
    return ApiKeyCreated(**service.to_out(key).model_dump(), secret=secret)


@router.get("", summary="List API Keys", response_model=Page[ApiKeyOut])
async def list_api_keys(
    session: DbSession,
    context: OrgAdmin,
    page: Pagination,
    status: Annotated[Literal["active", "revoked", "all"], Query()] = "all",
) -> Page[ApiKeyOut]:
    stmt = service.keys_query(context.organization_id, status)
    rows, cursor = await paginate(session, stmt, ApiKey.id, page)
    return Page[ApiKeyOut](items=[service.to_out(k) for k in rows], next_cursor=cursor)


@router.get("/{keyId}", summary="Get API Key", response_model=ApiKeyOut)
async def get_api_key(session: DbSession, context: OrgAdmin, key_id: KeyId) -> ApiKeyOut:
    """One key's metadata. Never the secret, nor its hash."""
    return service.to_out(await service.read_key(session, context, key_id))


@router.post("/{keyId}/revoke", summary="Revoke API Key", responses=documented(409), response_model=ApiKeyOut)
async def revoke_api_key(request: Request, session: DbSession, context: OrgAdmin, key_id: KeyId) -> ApiKeyOut:
    """Revoke a key at once; later requests with it answer 401. The record stays for the audit trail."""
    key = await service.revoke_key(session, context, key_id)
    describe(request, "api_key", key.id)
    return service.to_out(key)
