"""Channel routes and WhatsApp accounts: validation, tenancy, secrets sealed to their row."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.channels.models import ChannelRoute, WhatsAppAccount, WhatsAppMessage
from parley.channels.schemas import (
    AccountCreate,
    AccountOut,
    AccountUpdate,
    ChannelKind,
    MessageOut,
    OfficeHours,
    RouteCreate,
    RouteOut,
    RouteUpdate,
    _check_address,
)
from parley.config import Settings
from parley.flows.models import Flow
from parley.kit.crypto import mask, row_secrets, sha256_hex
from parley.kit.errors import BadRequest, Conflict
from parley.kit.ids import new_id
from parley.kit.tenancy import get_owned, scoped

SECRET_FIELDS = ("access_token", "app_secret", "verify_token")
MASK_PREFIX = "••••"
WEBHOOK_PATH = "/api/channels/whatsapp/webhook"


# --- routes ---------------------------------------------------------------------------------------


async def _check_flow(session: AsyncSession, organization_id: str, flow_id: str) -> None:
    await get_owned(session, Flow, flow_id, organization_id, "Flow")


async def _check_target(session: AsyncSession, organization_id: str, kind: str, address: str) -> None:
    if kind == ChannelKind.whatsapp:
        await get_owned(session, WhatsAppAccount, address, organization_id, "WhatsApp account")


async def _flush_unique(session: AsyncSession, kind: str, address: str) -> None:
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError as exc:
        raise Conflict(f"There is already a {kind} route for {address!r} in this organization.") from exc


async def _route_clash(session: AsyncSession, organization_id: str, kind: str, address: str) -> None:
    clash = await session.scalar(
        scoped(ChannelRoute, organization_id).where(
            ChannelRoute.channel_kind == kind, ChannelRoute.address == address
        )
    )
    if clash is not None:
        raise Conflict(
            f"There is already a {kind} route for {address!r} in this organization ({clash.id}); "
            "change that route instead."
        )


async def create_route(session: AsyncSession, context: OrgContext, data: RouteCreate) -> ChannelRoute:
    org = context.organization_id
    kind = data.channel_kind.value
    await _check_flow(session, org, data.flow_id)
    if data.fallback_flow_id is not None:
        await _check_flow(session, org, data.fallback_flow_id)
    await _check_target(session, org, kind, data.address)
    await _route_clash(session, org, kind, data.address)
    route = ChannelRoute(
        id=new_id("rte"),
        organization_id=org,
        name=data.name,
        channel_kind=kind,
        address=data.address,
        flow_id=data.flow_id,
        fallback_flow_id=data.fallback_flow_id,
        office_hours=data.office_hours.model_dump(mode="json") if data.office_hours else None,
        enabled=data.enabled,
        created_by=context.principal.id,
    )
    session.add(route)
    await _flush_unique(session, kind, data.address)
    return route


async def get_route(session: AsyncSession, organization_id: str, route_id: str) -> ChannelRoute:
    return await get_owned(session, ChannelRoute, route_id, organization_id, "Route")


async def update_route(
    session: AsyncSession, context: OrgContext, route_id: str, data: RouteUpdate
) -> ChannelRoute:
    org = context.organization_id
    route = await get_route(session, org, route_id)
    changes = data.model_dump(exclude_unset=True)
    if "address" in changes:
        if changes["address"] is None:
            raise BadRequest("A route's address cannot be removed; delete the route instead.")
        try:
            address = _check_address(ChannelKind(route.channel_kind), changes["address"])
        except ValueError as exc:
            raise BadRequest(f"The address is not valid: {exc}.") from exc
        if address != route.address:
            await _check_target(session, org, route.channel_kind, address)
            await _route_clash(session, org, route.channel_kind, address)
            route.address = address
    if "flow_id" in changes:
        if changes["flow_id"] is None:
            raise BadRequest("A route needs a flow; delete the route to stop answering.")
        await _check_flow(session, org, changes["flow_id"])
        route.flow_id = changes["flow_id"]
    if "fallback_flow_id" in changes:
        if changes["fallback_flow_id"] is not None:
            await _check_flow(session, org, changes["fallback_flow_id"])
        route.fallback_flow_id = changes["fallback_flow_id"]
    if "office_hours" in changes:
        route.office_hours = data.office_hours.model_dump(mode="json") if data.office_hours else None
    if "name" in changes:
        route.name = changes["name"]
    if "enabled" in changes:
        if changes["enabled"] is None:
            raise BadRequest("enabled must be true or false.")
        route.enabled = changes["enabled"]
    await _flush_unique(session, route.channel_kind, route.address)
    await session.refresh(route)
    return route


async def delete_route(session: AsyncSession, organization_id: str, route_id: str) -> ChannelRoute:
    route = await get_route(session, organization_id, route_id)
    await session.delete(route)
    await session.flush()
    return route


def routes_query(
    organization_id: str, kind: ChannelKind | None, flow_id: str | None, address: str | None
) -> Select[ChannelRoute]:
    stmt = scoped(ChannelRoute, organization_id)
    if kind is not None:
        stmt = stmt.where(ChannelRoute.channel_kind == kind.value)
    if flow_id is not None:
        stmt = stmt.where(or_(ChannelRoute.flow_id == flow_id, ChannelRoute.fallback_flow_id == flow_id))
    if address is not None:
        from parley.channels.routing import normalize_address

        stmt = stmt.where(ChannelRoute.address.in_({address, normalize_address(ChannelKind.phone, address)}))
    return stmt


def route_out(route: ChannelRoute) -> RouteOut:
    hours = None
    if route.office_hours:
        try:
            hours = OfficeHours.model_validate(route.office_hours)
        except ValidationError:  # e.g. a time zone this system no longer knows: shown as none
            hours = None
    return RouteOut(
        id=route.id,
        name=route.name,
        channel_kind=ChannelKind(route.channel_kind),
        address=route.address,
        flow_id=route.flow_id,
        fallback_flow_id=route.fallback_flow_id,
        office_hours=hours,
        enabled=route.enabled,
        created_at=route.created_at,
        updated_at=route.updated_at,
    )


# --- WhatsApp accounts ------------------------------------------------------------------------------


def account_secrets(settings: Settings, account: WhatsAppAccount) -> dict[str, str]:
    """The account's secrets in plain text; one that no longer decrypts (key changed) is left out."""
    return row_secrets(settings, account).open_all(account.secrets)


def _seal(settings: Settings, account: WhatsAppAccount, values: dict[str, str]) -> None:
    account.secrets = row_secrets(settings, account).seal_all(values)
    account.verify_token_sha256 = sha256_hex(values["verify_token"])


async def _phone_number_taken(session: AsyncSession, phone_number_id: str) -> None:
    taken = await session.scalar(
        select(WhatsAppAccount.id).where(WhatsAppAccount.phone_number_id == phone_number_id)
    )
    if taken is not None:
        raise Conflict(
            f"WhatsApp phone number id {phone_number_id} is already connected to an account; "
            "a number can be connected once."
        )


async def create_account(
    session: AsyncSession, settings: Settings, context: OrgContext, data: AccountCreate
) -> WhatsAppAccount:
    await _phone_number_taken(session, data.phone_number_id)
    account = WhatsAppAccount(
        id=new_id("wa"),
        organization_id=context.organization_id,
        name=data.name,
        phone_number_id=data.phone_number_id,
        waba_id=data.waba_id,
        display_phone_number=data.display_phone_number,
        unsupported_reply=data.unsupported_reply,
        created_by=context.principal.id,
    )
    _seal(
        settings,
        account,
        {"access_token": data.access_token, "app_secret": data.app_secret, "verify_token": data.verify_token},
    )
    session.add(account)
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError as exc:
        raise Conflict(f"WhatsApp phone number id {data.phone_number_id} is already connected.") from exc
    return account


async def get_account(session: AsyncSession, organization_id: str, account_id: str) -> WhatsAppAccount:
    return await get_owned(session, WhatsAppAccount, account_id, organization_id, "WhatsApp account")


def _is_kept(value: str, stored: str | None) -> bool:
    return stored is not None and (value == mask(stored) or value.startswith(MASK_PREFIX))


async def update_account(
    session: AsyncSession, settings: Settings, context: OrgContext, account_id: str, data: AccountUpdate
) -> WhatsAppAccount:
    account = await get_account(session, context.organization_id, account_id)
    changes = data.model_dump(exclude_unset=True)
    for field in ("waba_id", "display_phone_number"):
        if field in changes:
            if changes[field] is None:
                raise BadRequest(f"{field} cannot be removed.")
            setattr(account, field, changes[field])
    for field in ("name", "unsupported_reply"):
        if field in changes:
            setattr(account, field, changes[field])
    stored = account_secrets(settings, account)
    secrets: dict[str, str] = dict(stored)
    for field in SECRET_FIELDS:
        value = changes.get(field)
        if field in changes and value is None:
            raise BadRequest(f"{field} cannot be removed; send a new value or leave it out.")
        if isinstance(value, str) and not _is_kept(value, stored.get(field)):
            secrets[field] = value
    missing = [f for f in SECRET_FIELDS if f not in secrets]
    if missing:
        raise BadRequest(
            f"The stored {', '.join(missing)} can no longer be read (the secret key changed); send new values."
        )
    _seal(settings, account, secrets)
    await session.flush()
    await session.refresh(account)
    return account


async def delete_account(session: AsyncSession, organization_id: str, account_id: str) -> WhatsAppAccount:
    account = await get_account(session, organization_id, account_id)
    routes = (
        await session.scalars(
            scoped(ChannelRoute, organization_id)
            .where(ChannelRoute.channel_kind == ChannelKind.whatsapp.value)
            .where(ChannelRoute.address == account.id)
            .with_only_columns(ChannelRoute.id)
        )
    ).all()
    if routes:
        raise Conflict(
            f"WhatsApp account {account.id!r} is used by route(s) {', '.join(routes)}; delete those first."
        )
    await session.delete(account)
    await session.flush()
    return account


def account_out(settings: Settings, account: WhatsAppAccount) -> AccountOut:
    secrets = account_secrets(settings, account)
    hint: dict[str, Any] = {f: mask(secrets[f]) if f in secrets else "" for f in SECRET_FIELDS}
    return AccountOut(
        id=account.id,
        name=account.name,
        phone_number_id=account.phone_number_id,
        waba_id=account.waba_id,
        display_phone_number=account.display_phone_number,
        unsupported_reply=account.unsupported_reply,
        webhook_path=WEBHOOK_PATH,
        created_at=account.created_at,
        updated_at=account.updated_at,
        **hint,
    )


def messages_query(organization_id: str, account_id: str, wa_id: str | None) -> Select[WhatsAppMessage]:
    stmt = scoped(WhatsAppMessage, organization_id).where(WhatsAppMessage.account_id == account_id)
    if wa_id is not None:
        stmt = stmt.where(WhatsAppMessage.wa_id == wa_id)
    return stmt


def message_out(message: WhatsAppMessage) -> MessageOut:
    return MessageOut(
        id=message.id,
        direction="in" if message.direction == "in" else "out",
        wamid=message.wamid,
        wa_id=message.wa_id,
        type=message.type,
        text=message.text,
        status=message.status,
        session_id=message.session_id,
        error=message.error,
        created_at=message.created_at,
        processed_at=message.processed_at,
    )


def accounts_query(organization_id: str) -> Select[WhatsAppAccount]:
    return scoped(WhatsAppAccount, organization_id)
