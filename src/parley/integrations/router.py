from __future__ import annotations

import html
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from parley.audit.dependencies import describe, request_facts
from parley.auth.dependencies import OrgAdmin, OrgReader, limit_by_address
from parley.integrations import oauth, service
from parley.integrations.models import IntegrationConnection
from parley.integrations.schemas import (
    CallbackOut,
    ClientBody,
    ClientOut,
    ConnectBody,
    ConnectionOut,
    ConnectOut,
    DisconnectOut,
    ProviderList,
)
from parley.kit.body import BODY_MODEL_ATTR, ParsedBody, read_body_data, validate_body
from parley.kit.db import DbSession, release_reader, unit_of_work
from parley.kit.errors import ParleyError, documented, error_response
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut

router = ParleyRouter(prefix="/api/integrations", tags=["Integrations"])

ProviderKey = Annotated[
    str,
    Path(
        alias="provider",
        max_length=40,
        description="google, microsoft, or the key of a custom OAuth2 provider of this organization.",
    ),
]
ConnectionId = Annotated[str, Path(alias="connectionId", max_length=80)]


async def _connect_body(request: Request) -> ConnectBody:
    """The shared body parser, except that no body at all means the defaults."""
    if not (await request.body()).strip() and not request.headers.get("content-type", "").startswith(
        "multipart/"
    ):
        return ConnectBody()
    return validate_body(ConnectBody, await read_body_data(request, ConnectBody))


setattr(_connect_body, BODY_MODEL_ATTR, ConnectBody)


def _wants_html(request: Request) -> bool:
    accept = request.headers.get("accept", "").lower()
    if "text/html" not in accept:
        return False
    json_at = accept.find("application/json")
    return json_at == -1 or accept.find("text/html") < json_at


def _html_page(out: CallbackOut) -> str:
    link = ""
    if out.return_to:
        target = html.escape(out.return_to, quote=True)
        link = f'<p><a href="{target}">Continue</a></p>'
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Connected</title></head><body>"
        f"<h1>{html.escape(out.provider)} connected</h1><p>{html.escape(out.message)}</p>{link}</body></html>"
    )


@router.get(
    "/oauth/callback",
    summary="List Integration Oauth Callback",
    dependencies=[Depends(limit_by_address)],
    response_model=CallbackOut,
    responses={
        200: {
            "description": "The provider was connected (JSON, or a small HTML page for Accept: text/html).",
            "content": {"text/html": {"schema": {"type": "string"}}},
        },
        **documented(502, 504),
    },
)
async def list_integration_oauth_callback(
    request: Request,
    session: DbSession,
    code: Annotated[str | None, Query(max_length=4000, description="Authorization code.")] = None,
    state: Annotated[str | None, Query(max_length=500, description="The state of the connect.")] = None,
    error: Annotated[
        str | None, Query(max_length=200, description="OAuth error, e.g. access_denied.")
    ] = None,
    error_description: Annotated[str | None, Query(max_length=2000)] = None,
) -> Any:
    """Where the provider sends the browser back. Public: the one-time ``state`` is the credential.

    A missing, unknown, expired or already used state is 400, as is an error from the provider
    (``error=access_denied``); the state is used up either way. The code is exchanged (with the PKCE
    verifier) and the tokens stored encrypted; a failing token endpoint is 502 with its reason.
    """
    params = service.CallbackParams(
        code=code, state=state, error=error, error_description=error_description, cookies=request.cookies
    )
    settings = request.app.state.settings
    facts = request_facts(request)
    # The state is used up in a transaction of its own that commits before the code goes to the
    # provider, so of callbacks racing with one state only one exchanges it (and on an error the
    # state stays used up: the error is returned from inside the block, not raised through it).
    refused: ParleyError | None = None
    async with unit_of_work(request.app.state.db, jobs=request.app.state.jobs) as claiming:
        try:
            claimed = await service.claim_callback(claiming, settings, facts, params)
        except ParleyError as exc:
            refused = exc
    if refused is not None:
        return error_response(refused.status_code, refused.detail, refused.code, refused.headers)
    # The tokens are stored in a writing unit of its own (this is a GET, whose session only reads: on
    # SQLite a read that turns into a write fails when another callback wrote meanwhile). Its session
    # holds nothing until the code exchange with the provider is over.
    try:
        async with unit_of_work(request.app.state.db, jobs=request.app.state.jobs) as storing:
            out = await service.finish_callback(storing, settings, facts, claimed)
    except ParleyError as exc:
        return error_response(exc.status_code, exc.detail, exc.code, exc.headers)
    if _wants_html(request):
        return HTMLResponse(_html_page(out))
    return out


@router.get("/providers", summary="List Integration Providers", response_model=ProviderList)
async def list_integration_providers(session: DbSession, context: OrgReader) -> ProviderList:
    """The providers that can be connected: presets, the generic template and this organization's own."""
    return ProviderList(items=await service.list_providers(session, context))


@router.get("/connections", summary="List Integration Connections", response_model=Page[ConnectionOut])
async def list_integration_connections(
    request: Request, session: DbSession, context: OrgReader, page: Pagination
) -> Page[ConnectionOut]:
    """The organization's connections, newest first; tokens only as masked hints."""
    stmt = service.connections_query(context.organization_id)
    rows, cursor = await paginate(session, stmt, IntegrationConnection.id, page)
    settings = request.app.state.settings
    return Page[ConnectionOut](items=[service.connection_out(settings, r) for r in rows], next_cursor=cursor)


@router.get("/connections/{connectionId}", summary="Get Integration Connection", response_model=ConnectionOut)
async def get_integration_connection(
    request: Request, session: DbSession, context: OrgReader, connection_id: ConnectionId
) -> ConnectionOut:
    row = await service.get_connection(session, context.organization_id, connection_id)
    return service.connection_out(request.app.state.settings, row)


@router.post(
    "/connections/{connectionId}/refresh",
    summary="Refresh Integration Connection",
    response_model=ConnectionOut,
    responses=documented(409, 502, 504),
)
async def refresh_integration_connection(
    request: Request, session: DbSession, context: OrgAdmin, connection_id: ConnectionId
) -> Any:
    """Refresh the tokens now (tokens also refresh by themselves before they expire).

    A refused refresh token is 502 with the provider's reason, and the connection turns
    ``refresh_failed`` (connect again); a connection without a refresh token is 409.
    """
    settings = request.app.state.settings
    describe(request, "integration_connection", connection_id)
    try:
        # Short units of its own: no transaction is open (nor authentication's read) while the provider answers.
        await release_reader(request)
        row = await service.refresh_now(
            request.app.state.db, settings, context.organization_id, connection_id
        )
    except oauth.OAuthProviderError as exc:
        # Returned, not raised, so the audit event of the attempt is committed.
        return error_response(exc.status_code, exc.detail, exc.code)
    return service.connection_out(settings, row)


@router.delete(
    "/connections/{connectionId}",
    summary="Disconnect Integration",
    response_model=DisconnectOut,
)
async def disconnect_integration(
    request: Request, session: DbSession, context: OrgAdmin, connection_id: ConnectionId
) -> DisconnectOut:
    """Forget the tokens; they are revoked at the provider first when it has a revocation endpoint.

    A failed revocation does not keep the connection: ``revoked`` is false and says why.
    """
    row, reason = await service.disconnect(session, request.app.state.settings, context, connection_id)
    describe(request, "integration_connection", row.id, provider=row.provider, revoked=reason is None)
    return DisconnectOut(id=row.id, revoked=reason is None, revocation_detail=reason)


@router.get("/{provider}/client", summary="Get Integration Client", response_model=ClientOut)
async def get_integration_client(
    request: Request, session: DbSession, context: OrgReader, provider: ProviderKey
) -> ClientOut:
    """The organization's OAuth2 client for this provider; the secret only as a masked hint."""
    row = await service.get_client(session, context.organization_id, provider)
    return service.client_out(request.app.state.settings, row)


@router.put("/{provider}/client", summary="Update Integration Client", response_model=ClientOut)
async def update_integration_client(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    provider: ProviderKey,
    data: Annotated[ClientBody, ParsedBody(ClientBody)],
) -> ClientOut:
    """Store the OAuth2 client registered at the provider (the secret encrypted). A new key that is
    not a preset creates a custom provider. Register ``redirect_uri`` of the answer at the provider."""
    settings = request.app.state.settings
    row = await service.put_client(session, settings, context, provider, data)
    describe(request, "integration_client", row.id, provider=provider)
    return service.client_out(settings, row)


@router.delete(
    "/{provider}/client",
    summary="Remove Integration Client",
    response_model=DeletedOut,
    responses=documented(409),
)
async def remove_integration_client(
    request: Request, session: DbSession, context: OrgAdmin, provider: ProviderKey
) -> DeletedOut:
    """Forget the client; refused (409) while the organization is connected to the provider."""
    row = await service.delete_client(session, context, provider)
    describe(request, "integration_client", row.id, provider=provider)
    return DeletedOut(id=row.id)


@router.post(
    "/{provider}/connect",
    summary="Connect Integration",
    response_model=ConnectOut,
    responses=documented(409),
)
async def connect_integration(
    request: Request,
    response: Response,
    session: DbSession,
    context: OrgAdmin,
    provider: ProviderKey,
    data: Annotated[ConnectBody, Depends(_connect_body)],
) -> ConnectOut:
    """Start connecting: the answer's ``authorization_url`` (PKCE S256, one-time ``state`` bound to
    you and this organization, valid for 10 minutes) is where the person's browser goes next. The body
    is optional: ``return_to`` (a path here or an allowed origin) and ``scopes``."""
    # The answer also sets a cookie (HttpOnly, SameSite=Lax, scoped to the callback's path) binding the
    # state to this browser; the callback refuses the state without it (docs/integrations.md).
    out, pending, cookie = await service.start_connect(
        session, request.app.state.settings, context, provider, data
    )
    response.set_cookie(
        cookie.name,
        cookie.value,
        max_age=cookie.max_age,
        path=cookie.path,
        secure=cookie.secure,
        httponly=True,
        samesite="lax",
    )
    describe(request, "integration_state", pending.id, provider=provider)
    return out
