from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgAdmin, OrgReader, OrgWriter
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut
from parley.providers import service
from parley.providers.catalog import ProviderKind
from parley.providers.schemas import (
    ProviderConfigBody,
    ProviderConfigOut,
    ProviderList,
    ProviderTestResult,
)

router = ParleyRouter(prefix="/api/providers", tags=["Providers"])

ProviderKey = Annotated[
    str, Path(alias="key", max_length=40, description="Provider key, e.g. openai, twilio, smtp.")
]


@router.get("", summary="List Providers", response_model=ProviderList)
async def list_providers(
    session: DbSession,
    context: OrgReader,
    kind: Annotated[ProviderKind | None, Query(description="Only providers of this kind.")] = None,
) -> ProviderList:
    """The supported providers, their configuration schema and whether this organization set them up."""
    return ProviderList(items=await service.list_providers(session, context, kind))


@router.get("/{key}/config", summary="Get Provider Config", response_model=ProviderConfigOut)
async def get_provider_config(
    request: Request, session: DbSession, context: OrgReader, key: ProviderKey
) -> ProviderConfigOut:
    """The organization's configuration of one provider; secrets show only a masked hint."""
    spec = service.get_spec(key)
    row = await service.get_config(session, context, spec)
    return service.to_out(request.app.state.settings, spec, row)


@router.put("/{key}/config", summary="Update Provider Config", response_model=ProviderConfigOut)
async def update_provider_config(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    key: ProviderKey,
    data: Annotated[ProviderConfigBody, ParsedBody(ProviderConfigBody)],
) -> ProviderConfigOut:
    """Store the configuration, validated against the provider's schema. Omitted secrets are kept."""
    spec = service.get_spec(key)
    settings = request.app.state.settings
    row = await service.put_config(session, settings, context, spec, dict(data.model_extra or {}))
    describe(request, "provider_config", row.id, provider=spec.key)
    return service.to_out(settings, spec, row)


@router.delete("/{key}/config", summary="Remove Provider Config", response_model=DeletedOut)
async def remove_provider_config(
    request: Request, session: DbSession, context: OrgAdmin, key: ProviderKey
) -> DeletedOut:
    """Forget the organization's configuration of this provider, secrets included."""
    spec = service.get_spec(key)
    row = await service.delete_config(session, context, spec)
    describe(request, "provider_config", row.id, provider=spec.key)
    return DeletedOut(id=row.id)


@router.post("/{key}/test", summary="Test Provider Credentials", response_model=ProviderTestResult)
async def check_provider_credentials(
    request: Request, session: DbSession, context: OrgWriter, key: ProviderKey
) -> ProviderTestResult:
    """Check the stored credentials with a minimal call to the provider (offline engines: installed?).

    A failing provider is ``ok: false`` with the reason, not an error status.
    """
    spec = service.get_spec(key)
    result, latency = await service.check(session, request.app.state.settings, context, spec)
    describe(request, "provider", spec.key, ok=result.ok)
    return ProviderTestResult(ok=result.ok, latency_ms=latency, detail=result.detail)
