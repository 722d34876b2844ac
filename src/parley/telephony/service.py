"""Telephony resources (numbers, trunks, dispatch rules), provider access, phone calls in and out.

Rules live here; handlers stay thin and services never commit. Provider failures become 502 with the
provider's reason, raised before anything is changed locally, so the request's transaction rolls back
whatever it had started.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import structlog
from pydantic import BaseModel
from sqlalchemy import Select, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit import service as audit
from parley.audit.service import RequestFacts
from parley.auth.identity import system_context
from parley.auth.principal import OrgContext
from parley.auth.stream_tokens import issue_stream_token
from parley.calls.schemas import OutboundCallIn, OutboundCallOut
from parley.channels import routing
from parley.config import Settings
from parley.flows.models import Flow
from parley.kit.crypto import mask, row_secrets
from parley.kit.db import before_commit, checkpoint, short_read, utcnow
from parley.kit.errors import Conflict, Forbidden, NotFound, ParleyError, Unprocessable, UpstreamError
from parley.kit.ids import new_id
from parley.kit.outbound import outbound_policy
from parley.kit.schemas import check_e164
from parley.kit.tenancy import get_owned, scoped
from parley.providers.catalog import PROVIDERS, LiveKitConfig, TwilioConfig
from parley.providers.models import ProviderConfig
from parley.providers.service import load_config
from parley.sessions import service as sessions
from parley.sessions.models import ConversationSession, SessionFacts
from parley.sessions.schemas import SessionCreate
from parley.telephony.models import DispatchRule, PhoneNumber, SipTrunk, TwilioCall
from parley.telephony.providers import ProviderFailure
from parley.telephony.providers.livekit import LiveKitSip
from parley.telephony.providers.twilio import TwilioClient, signature_valid
from parley.telephony.schemas import (
    DispatchRuleCreate,
    DispatchRuleOut,
    DispatchRuleUpdate,
    PhoneNumberCreate,
    PhoneNumberOut,
    PhoneNumberUpdate,
    TrunkCreate,
    TrunkOut,
    TrunkUpdate,
    check_rule_shape,
    check_trunk_shape,
)

log = structlog.get_logger("parley.telephony")

VOICE_WEBHOOK_PATH = "/api/telephony/twilio/voice"
MEDIA_STREAM_PATH = "/api/telephony/twilio/media"

UNKNOWN_NUMBER_MESSAGE = (
    "Sorry, this number is not connected to an assistant. Please check the number and call again. Goodbye."
)
UNAVAILABLE_MESSAGE = (
    "Sorry, the assistant for this number is not available right now. Please call again later. Goodbye."
)


# --- secrets ---------------------------------------------------------------------------------------


def _open(settings: Settings, row: SipTrunk | DispatchRule, field: str, token: str | None) -> str | None:
    value = row_secrets(settings, row).open_or_none(field, token)
    if token and value is None:
        log.warning("telephony_secret_not_decrypted", table=row.__tablename__, id=row.id, field=field)
    return value


def trunk_password(settings: Settings, row: SipTrunk) -> str | None:
    return _open(settings, row, "auth_password", row.auth_password)


def rule_pin(settings: Settings, row: DispatchRule) -> str | None:
    return _open(settings, row, "pin", row.pin)


# --- providers -------------------------------------------------------------------------------------


async def provider_config(
    session: AsyncSession, settings: Settings, organization_id: str, key: str
) -> Any | None:
    """The organization's validated configuration of ``key`` (secrets in plain text), or None."""
    row = await session.scalar(
        scoped(ProviderConfig, organization_id).where(ProviderConfig.provider_key == key)
    )
    if row is None:
        return None
    try:
        return load_config(settings, PROVIDERS[key], row)
    except ValueError:  # a secret no longer decrypts: as good as unconfigured
        return None


async def livekit_for(session: AsyncSession, settings: Settings, organization_id: str) -> LiveKitSip | None:
    config = await provider_config(session, settings, organization_id, "livekit")
    if not isinstance(config, LiveKitConfig):
        return None
    return LiveKitSip(config, outbound_policy(settings), timeout=settings.outbound_timeout)


async def twilio_for(session: AsyncSession, settings: Settings, organization_id: str) -> TwilioClient | None:
    config = await provider_config(session, settings, organization_id, "twilio")
    if not isinstance(config, TwilioConfig):
        return None
    return TwilioClient(config, outbound_policy(settings), timeout=settings.outbound_timeout)


def upstream(exc: ProviderFailure, doing: str) -> UpstreamError:
    return UpstreamError(f"{exc.provider} failed while {doing}: {exc.reason}. Nothing was changed.")


def voice_webhook_url(settings: Settings) -> str:
    """The URL Twilio calls (and signs) for incoming calls: the public URL plus the webhook path."""
    return settings.base_url.rstrip("/") + VOICE_WEBHOOK_PATH


def media_stream_url(settings: Settings) -> str:
    base = settings.base_url.rstrip("/")
    scheme, _, rest = base.partition("://")
    return ("wss" if scheme == "https" else "ws") + "://" + rest + MEDIA_STREAM_PATH


# --- references ------------------------------------------------------------------------------------


async def _check_flow(session: AsyncSession, organization_id: str, flow_id: str | None) -> None:
    if flow_id is not None:
        await get_owned(session, Flow, flow_id, organization_id, "Flow")


async def _check_trunks(session: AsyncSession, organization_id: str, trunk_ids: list[str]) -> None:
    if not trunk_ids:
        return
    found = set(
        (
            await session.scalars(
                scoped(SipTrunk, organization_id)
                .where(SipTrunk.id.in_(trunk_ids))
                .with_only_columns(SipTrunk.id)
            )
        ).all()
    )
    missing = [t for t in trunk_ids if t not in found]
    if missing:
        raise NotFound(f"Trunk {missing[0]!r} was not found in this organization.")


# --- phone numbers ---------------------------------------------------------------------------------


def number_out(row: PhoneNumber) -> PhoneNumberOut:
    return PhoneNumberOut.model_validate(row, from_attributes=True)


async def create_number(session: AsyncSession, organization_id: str, data: PhoneNumberCreate) -> PhoneNumber:
    await _check_flow(session, organization_id, data.flow_id)
    taken = await session.scalar(select(PhoneNumber.id).where(PhoneNumber.number == data.number))
    if taken is not None:
        raise Conflict(f"The number {data.number} is already registered on this platform.")
    row = PhoneNumber(
        id=new_id("pn"),
        organization_id=organization_id,
        number=data.number,
        provider=data.provider,
        name=data.name,
        flow_id=data.flow_id,
    )
    session.add(row)
    await session.flush()
    return row


def numbers_query(organization_id: str, provider: str | None) -> Select[PhoneNumber]:
    stmt = scoped(PhoneNumber, organization_id)
    if provider is not None:
        stmt = stmt.where(PhoneNumber.provider == provider)
    return stmt


async def update_number(
    session: AsyncSession, organization_id: str, number_id: str, data: PhoneNumberUpdate
) -> PhoneNumber:
    row = await get_owned(session, PhoneNumber, number_id, organization_id, "Phone number")
    changes = data.model_dump(exclude_unset=True)
    if changes.get("provider", "") is None:
        raise Conflict("A phone number always has a provider; send twilio or livekit.")
    if "flow_id" in changes:
        await _check_flow(session, organization_id, changes["flow_id"])
    for field, value in changes.items():
        setattr(row, field, value)
    row.updated_at = utcnow()
    await session.flush()
    return row


async def delete_number(session: AsyncSession, organization_id: str, number_id: str) -> PhoneNumber:
    row = await get_owned(session, PhoneNumber, number_id, organization_id, "Phone number")
    await session.delete(row)
    await session.flush()
    return row


async def flow_for_number(
    session: AsyncSession, number: PhoneNumber, at: datetime | None = None
) -> str | None:
    """The flow that answers a call to ``number`` — the one place that decides it.

    An enabled channel route for the number wins (its office hours pick the flow or the fallback;
    closed with no fallback means nobody answers); without one, the number's own ``flow_id``.
    """
    resolution = await routing.resolve(
        session, number.organization_id, kind="phone", address=number.number, at=at
    )
    if resolution.route is not None and resolution.route.enabled:
        return resolution.flow_id
    return number.flow_id


# --- trunks ----------------------------------------------------------------------------------------


def trunk_out(settings: Settings, row: SipTrunk) -> TrunkOut:
    return TrunkOut(
        id=row.id,
        name=row.name,
        direction=row.direction,
        numbers=list(row.numbers),
        allowed_addresses=list(row.allowed_addresses),
        allowed_numbers=list(row.allowed_numbers),
        address=row.address,
        transport=row.transport,
        auth_username=row.auth_username,
        auth_password=row.auth_password_hint,
        provider_id=row.provider_id,
        synced_at=row.synced_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def _name_free(
    session: AsyncSession, model: Any, organization_id: str, name: str, own_id: str | None
) -> None:
    existing = await session.scalar(
        scoped(model, organization_id).where(model.name == name).with_only_columns(model.id)
    )
    if existing is not None and existing != own_id:
        raise Conflict(f"There is already one named {name!r} in this organization.")


def _set_password(settings: Settings, row: SipTrunk, password: str | None) -> None:
    if password is None:
        row.auth_password = None
        row.auth_password_hint = None
    else:
        row.auth_password = row_secrets(settings, row).seal("auth_password", password)
        row.auth_password_hint = mask(password)


async def create_trunk(
    session: AsyncSession, settings: Settings, organization_id: str, data: TrunkCreate
) -> SipTrunk:
    await _name_free(session, SipTrunk, organization_id, data.name, None)
    row = SipTrunk(
        id=new_id("trk"),
        organization_id=organization_id,
        name=data.name,
        direction=data.direction,
        numbers=list(data.numbers),
        allowed_addresses=list(data.allowed_addresses),
        allowed_numbers=list(data.allowed_numbers),
        address=data.address,
        transport=data.transport,
        auth_username=data.auth_username,
    )
    _set_password(settings, row, data.auth_password)
    session.add(row)
    await session.flush()
    return row


def _patch(data: BaseModel, *required: str) -> dict[str, Any]:
    """The fields a PATCH sets; 422 when one that must keep a value is sent as null."""
    changes = data.model_dump(exclude_unset=True)
    for field in required:
        if field in changes and changes[field] is None:
            raise Unprocessable(
                f"{field} cannot be null; send an empty value or leave it out.", loc=("body", field)
            )
    return changes


async def update_trunk(
    session: AsyncSession, settings: Settings, organization_id: str, trunk_id: str, data: TrunkUpdate
) -> SipTrunk:
    row = await get_owned(session, SipTrunk, trunk_id, organization_id, "Trunk")
    changes = _patch(data, "name", "numbers", "allowed_addresses", "allowed_numbers")
    if "name" in changes:
        await _name_free(session, SipTrunk, organization_id, changes["name"], row.id)
    if "auth_password" in changes:
        _set_password(settings, row, changes.pop("auth_password"))
    for field, value in changes.items():
        setattr(row, field, value)
    try:
        check_trunk_shape(
            row.direction, row.address, row.transport, row.allowed_addresses, row.allowed_numbers
        )
    except ValueError as exc:
        raise Conflict(f"The trunk would be inconsistent: {exc}.") from exc
    row.updated_at = utcnow()
    await session.flush()
    return row


async def delete_trunk(
    session: AsyncSession, settings: Settings, organization_id: str, trunk_id: str
) -> tuple[SipTrunk, bool]:
    """Delete the trunk here and, when it was synced, at LiveKit first (502 and kept if that fails).

    Read, then LiveKit, then write: no transaction is open while LiveKit answers; the write checks
    again that nothing changed meanwhile (409)."""
    async with short_read(session) as reader:
        found = await get_owned(reader, SipTrunk, trunk_id, organization_id, "Trunk")
        await _trunk_unused(reader, organization_id, found.id)
    provider_id = found.provider_id
    provider_deleted = await _delete_at_livekit(session, settings, organization_id, provider_id, "trunk")
    row = await get_owned(session, SipTrunk, trunk_id, organization_id, "Trunk")
    await _trunk_unused(session, organization_id, row.id)
    if row.provider_id != provider_id:
        raise Conflict("The trunk was synced again while it was being deleted; delete it again.")
    await session.delete(row)
    await session.flush()
    return row, provider_deleted


async def _trunk_unused(session: AsyncSession, organization_id: str, trunk_id: str) -> None:
    rules = (await session.scalars(scoped(DispatchRule, organization_id))).all()
    users = [r.name for r in rules if trunk_id in (r.trunk_ids or [])]
    if users:
        raise Conflict(f"Dispatch rule {users[0]!r} uses this trunk; remove it from the rule first.")


async def _delete_at_livekit(
    session: AsyncSession, settings: Settings, organization_id: str, provider_id: str | None, what: str
) -> bool:
    if not provider_id:
        return False
    async with short_read(session) as reader:
        livekit = await livekit_for(reader, settings, organization_id)
    if livekit is None:
        raise Conflict(
            f"This {what.replace('_', ' ')} was synced to LiveKit, but LiveKit is no longer configured; "
            "configure it again (PUT /api/providers/livekit/config) so it can be deleted there too."
        )
    try:
        async with livekit as lk:
            if what == "trunk":
                await lk.delete_trunk(provider_id)
            else:
                await lk.delete_dispatch_rule(provider_id)
    except ProviderFailure as exc:
        if exc.not_found:  # already gone at the provider: nothing left to delete there
            return True
        raise upstream(exc, f"deleting the {what.replace('_', ' ')}") from exc
    return True


# --- dispatch rules --------------------------------------------------------------------------------


def rule_out(row: DispatchRule) -> DispatchRuleOut:
    return DispatchRuleOut(
        id=row.id,
        name=row.name,
        rule_type=row.rule_type,
        room_prefix=row.room_prefix,
        room_name=row.room_name,
        pin=row.pin_hint,
        trunk_ids=list(row.trunk_ids),
        numbers=list(row.numbers),
        attributes=dict(row.attributes),
        flow_id=row.flow_id,
        provider_id=row.provider_id,
        synced_at=row.synced_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _set_pin(settings: Settings, row: DispatchRule, pin: str | None) -> None:
    if pin is None:
        row.pin = None
        row.pin_hint = None
    else:
        row.pin = row_secrets(settings, row).seal("pin", pin)
        row.pin_hint = "••••"  # a PIN is short: no digit of it is shown


async def create_rule(
    session: AsyncSession, settings: Settings, organization_id: str, data: DispatchRuleCreate
) -> DispatchRule:
    await _name_free(session, DispatchRule, organization_id, data.name, None)
    await _check_flow(session, organization_id, data.flow_id)
    await _check_trunks(session, organization_id, data.trunk_ids)
    row = DispatchRule(
        id=new_id("sdr"),
        organization_id=organization_id,
        name=data.name,
        rule_type=data.rule_type,
        room_prefix=data.room_prefix,
        room_name=data.room_name,
        trunk_ids=list(dict.fromkeys(data.trunk_ids)),
        numbers=list(data.numbers),
        attributes=dict(data.attributes),
        flow_id=data.flow_id,
    )
    _set_pin(settings, row, data.pin)
    session.add(row)
    await session.flush()
    return row


async def update_rule(
    session: AsyncSession, settings: Settings, organization_id: str, rule_id: str, data: DispatchRuleUpdate
) -> DispatchRule:
    row = await get_owned(session, DispatchRule, rule_id, organization_id, "Dispatch rule")
    changes = _patch(data, "name", "trunk_ids", "numbers", "attributes")
    if "name" in changes:
        await _name_free(session, DispatchRule, organization_id, changes["name"], row.id)
    if "flow_id" in changes:
        await _check_flow(session, organization_id, changes["flow_id"])
    if "trunk_ids" in changes:
        await _check_trunks(session, organization_id, changes["trunk_ids"])
        changes["trunk_ids"] = list(dict.fromkeys(changes["trunk_ids"]))
    if "pin" in changes:
        _set_pin(settings, row, changes.pop("pin"))
    for field, value in changes.items():
        setattr(row, field, value)
    try:
        check_rule_shape(row.rule_type, row.room_name, row.room_prefix)
    except ValueError as exc:
        raise Conflict(f"The dispatch rule would be inconsistent: {exc}.") from exc
    row.updated_at = utcnow()
    await session.flush()
    return row


async def delete_rule(
    session: AsyncSession, settings: Settings, organization_id: str, rule_id: str
) -> tuple[DispatchRule, bool]:
    """Delete the rule here and, when it was synced, at LiveKit first (502 and kept if that fails).

    Read, then LiveKit, then write (no transaction open while LiveKit answers)."""
    async with short_read(session) as reader:
        found = await get_owned(reader, DispatchRule, rule_id, organization_id, "Dispatch rule")
    provider_id = found.provider_id
    provider_deleted = await _delete_at_livekit(
        session, settings, organization_id, provider_id, "dispatch_rule"
    )
    row = await get_owned(session, DispatchRule, rule_id, organization_id, "Dispatch rule")
    if row.provider_id != provider_id:
        raise Conflict("The dispatch rule was synced again while it was being deleted; delete it again.")
    await session.delete(row)
    await session.flush()
    return row, provider_deleted


# --- Twilio voice webhook --------------------------------------------------------------------------


def twiml_say_hangup(message: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<Response><Say language="en-US">{escape(message)}</Say><Hangup/></Response>'
    )


def twiml_connect(settings: Settings, token: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(media_stream_url(settings))}>"
        f'<Parameter name="token" value={quoteattr(token)}/>'
        "</Stream></Connect></Response>"
    )


async def _organization_for_account(session: AsyncSession, account_sid: str) -> str | None:
    if not account_sid:
        return None
    rows = (
        await session.scalars(select(ProviderConfig).where(ProviderConfig.provider_key == "twilio"))
    ).all()
    for row in rows:
        if (row.settings or {}).get("account_sid") == account_sid:
            return row.organization_id
    return None


def _first(params: list[tuple[str, str]], key: str) -> str:
    return next((value for name, value in params if name == key), "")


# Twilio signs the URL and the concatenated names and values, without separators: a body can be
# re-split (fields merged into CallSid) under the same signature. Strict shapes make that impossible.
_TWILIO_FIELDS = {
    "CallSid": (re.compile(r"^CA[0-9a-fA-F]{32}$"), "CA followed by 32 hexadecimal digits"),
    "AccountSid": (re.compile(r"^AC[0-9a-fA-F]{32}$"), "AC followed by 32 hexadecimal digits"),
    "From": (re.compile(r"^[A-Za-z0-9+][A-Za-z0-9:@._+-]{0,127}$"), "a phone number or client address"),
    "To": (re.compile(r"^[A-Za-z0-9+][A-Za-z0-9:@._+-]{0,127}$"), "a phone number or client address"),
}
# Twilio signs no timestamp (and its I-Twilio-Idempotency-Token header is not signed), so a replay is
# recognised by its CallSid: after this long, a repeated CallSid gets no new media stream token.
TWILIO_REPLAY_WINDOW_SECONDS = 300


def check_twilio_form(params: list[tuple[str, str]]) -> None:
    """Refuse a voice webhook whose form lacks a field Twilio always sends or has it in the wrong shape."""
    for name, (pattern, shape) in _TWILIO_FIELDS.items():
        values = [value for key, value in params if key == name]
        # 403 like a bad signature: whatever this is, Twilio did not send it.
        if len(values) != 1:
            raise Forbidden(
                f"This is not a Twilio voice webhook: it must have exactly one {name} field, it has {len(values)}."
            )
        if not pattern.match(values[0]):
            raise Forbidden(f"This is not a Twilio voice webhook: its {name} field is not {shape}.")


def _normalized(number: str) -> str | None:
    try:
        return check_e164(number)
    except ValueError:
        return None


async def answer_twilio_call(
    session: AsyncSession,
    settings: Settings,
    params: list[tuple[str, str]],
    signature: str | None,
    query: str,
) -> tuple[str, str | None, str | None]:
    """TwiML for an incoming call, the organization and the session it runs (None for a refusal).

    The signature is checked with the auth token of the Twilio account the number belongs to (or, for
    a number Parley does not know, of the account named in ``AccountSid``). Forged or unsigned: 403.
    """
    check_twilio_form(params)
    if not signature:
        raise Forbidden("The request carries no X-Twilio-Signature header.")
    called = _normalized(_first(params, "To"))
    number = await session.scalar(select(PhoneNumber).where(PhoneNumber.number == called)) if called else None
    organization_id = (
        number.organization_id
        if number
        else await _organization_for_account(session, _first(params, "AccountSid"))
    )
    config = await provider_config(session, settings, organization_id, "twilio") if organization_id else None
    if not isinstance(config, TwilioConfig):
        raise Forbidden("The request is not signed by a Twilio account configured in Parley.")
    url = voice_webhook_url(settings) + (f"?{query}" if query else "")
    if not signature_valid(config.auth_token.get_secret_value(), url, params, signature):
        raise Forbidden("The X-Twilio-Signature does not match the request.")
    assert organization_id is not None
    if number is None:
        return twiml_say_hangup(UNKNOWN_NUMBER_MESSAGE), organization_id, None

    call_sid = _first(params, "CallSid")
    # Twilio retries a webhook with the same CallSid: the call is processed once and its session reused.
    seen = await session.get(TwilioCall, call_sid)
    receipt: TwilioCall | None = None
    if seen is None:
        receipt = TwilioCall(
            call_sid=call_sid, organization_id=organization_id, session_id="", direction="inbound"
        )
        try:
            async with session.begin_nested():
                session.add(receipt)
        except IntegrityError:  # a concurrent retry committed first
            receipt = None
            seen = await session.get(TwilioCall, call_sid)
    if receipt is None:
        if seen is None or seen.organization_id != organization_id or not seen.session_id:
            return twiml_say_hangup(UNAVAILABLE_MESSAGE), organization_id, None
        age = (utcnow() - seen.created_at).total_seconds()
        if age > TWILIO_REPLAY_WINDOW_SECONDS:
            # A replay of an old, validly signed webhook: no new session, and no token for the old one.
            log.warning("twilio_webhook_replay_refused", age_seconds=round(age))
            return twiml_say_hangup(UNAVAILABLE_MESSAGE), organization_id, None
        session_id = seen.session_id
    else:
        flow_id = await flow_for_number(session, number)
        if flow_id is None:
            log.info("twilio_call_without_flow", number_id=number.id)
            return twiml_say_hangup(UNAVAILABLE_MESSAGE), organization_id, None
        caller = _first(params, "From")[:40] or None
        try:
            row, _ = await sessions.create_session(
                session,
                settings,
                system_context(organization_id, actor="twilio", name="Twilio voice webhook"),
                SessionCreate(
                    flow_id=flow_id, channel="phone", voiced=True, caller=caller, callee=number.number
                ),
            )
        except ParleyError as exc:  # the flow is gone or has no published version
            log.warning("twilio_call_not_started", number_id=number.id, code=exc.code)
            return twiml_say_hangup(UNAVAILABLE_MESSAGE), organization_id, None
        receipt.session_id = row.id
        await session.flush()
        session_id = row.id
    token, _ = issue_stream_token(
        settings,
        organization_id=organization_id,
        session_id=session_id,
        issued_by="twilio",
        purpose="twilio-media",
    )
    return twiml_connect(settings, token), organization_id, session_id


def audit_webhook(
    session: AsyncSession, request: RequestFacts, organization_id: str, session_id: str
) -> None:
    """The webhook has no bearer principal, so it records its audit event itself (actor: Twilio)."""

    async def write(session: AsyncSession) -> None:
        audit.record(
            session,
            audit.event_values(
                request,
                organization_id=organization_id,
                actor_type="provider",
                actor_id="twilio",
                action="twilio_voice",
                resource_type="session",
                resource_id=session_id,
            ),
        )

    before_commit(session, write)


# --- outbound calls --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DialExtras:
    """What a campaign adds to an outbound call: the flow's start values for this person, and the
    Twilio callbacks for the call's final status and answering-machine detection (URLs on this
    platform, signed by Twilio)."""

    variables: dict[str, Any] = dataclasses.field(default_factory=dict)
    status_callback: str | None = None
    amd_callback: str | None = None


async def place_outbound_call(
    session: AsyncSession,
    settings: Settings,
    context: OrgContext,
    data: OutboundCallIn,
    *,
    extras: DialExtras | None = None,
) -> OutboundCallOut:
    """Start a phone session on ``flow_id`` and have the number's provider dial ``to``.

    404 unknown flow or a ``from_number`` that is not the organization's; 409 no published flow or no
    way to dial; 502 the provider refused (the session is not kept).

    The look-ups run in a short read; the new session is committed (``checkpoint``) before the
    provider is asked to dial, so no transaction is held while the provider answers. When the provider
    refuses, the session is deleted again and that is committed before the 502 is raised.
    """
    extras = extras or DialExtras()
    organization_id = context.organization_id
    twilio: TwilioClient | None = None
    livekit: LiveKitSip | None = None
    trunk_id: str | None = None
    async with short_read(session) as reader:
        number = await reader.scalar(
            scoped(PhoneNumber, organization_id).where(PhoneNumber.number == data.from_number)
        )
        if number is None:
            raise NotFound(
                f"{data.from_number} is not one of this organization's numbers; add it with POST /api/telephony/numbers."
            )
        provider = number.provider
        if provider == "twilio":
            twilio = await twilio_for(reader, settings, organization_id)
            if twilio is None:
                raise Conflict(
                    "Twilio is not configured in this organization (PUT /api/providers/twilio/config)."
                )
        else:
            livekit = await livekit_for(reader, settings, organization_id)
            if livekit is None:
                raise Conflict(
                    "LiveKit is not configured in this organization (PUT /api/providers/livekit/config)."
                )
            trunks = (
                await reader.scalars(
                    scoped(SipTrunk, organization_id)
                    .where(SipTrunk.direction == "outbound")
                    .order_by(SipTrunk.id)
                )
            ).all()
            trunk = next((t for t in trunks if data.from_number in (t.numbers or []) and t.provider_id), None)
            if trunk is None:
                raise Conflict(
                    f"No synced outbound trunk carries {data.from_number}; create one with this number and "
                    "run the telephony sync."
                )
            trunk_id = trunk.provider_id
    row, _ = await sessions.create_session(
        session,
        settings,
        context,
        SessionCreate(
            flow_id=data.flow_id,
            channel="phone",
            voiced=True,
            caller=data.from_number,
            callee=data.to,
            variables=extras.variables,
        ),
        direction="outbound",
    )
    await checkpoint(session)  # the session exists for the media stream; no transaction during the dial
    if twilio is not None:
        token, _ = issue_stream_token(
            settings,
            organization_id=organization_id,
            session_id=row.id,
            issued_by="twilio",
            purpose="twilio-media",
        )
        try:
            call = await twilio.create_call(
                to=data.to,
                from_=data.from_number,
                twiml=twiml_connect(settings, token),
                status_callback=extras.status_callback,
                amd_callback=extras.amd_callback,
            )
        except ProviderFailure as exc:
            await _forget_session(session, row)
            raise upstream(exc, "placing the call") from exc
        if call.sid:
            session.add(
                TwilioCall(
                    call_sid=call.sid[:64],
                    organization_id=organization_id,
                    session_id=row.id,
                    direction="outbound",
                )
            )
            await session.flush()
        return OutboundCallOut(
            session_id=row.id,
            provider="twilio",
            provider_call_id=call.sid or None,
            to=data.to,
            from_number=data.from_number,
            status=call.status,
        )

    assert livekit is not None and trunk_id is not None
    try:
        async with livekit as lk:
            participant = await lk.create_sip_participant(
                trunk_id=trunk_id,
                to=data.to,
                from_number=data.from_number,
                room_name=f"parley-{row.id}",
                identity=f"phone-{row.id}",
            )
    except ProviderFailure as exc:
        await _forget_session(session, row)
        raise upstream(exc, "placing the call") from exc
    return OutboundCallOut(
        session_id=row.id,
        provider="livekit",
        provider_call_id=participant.sip_call_id or participant.participant_id or None,
        to=data.to,
        from_number=data.from_number,
        status="dialing",
    )


async def _forget_session(session: AsyncSession, row: SessionFacts) -> None:
    """The provider refused the call: delete the session committed for it, and commit that now (the
    error that follows rolls back only what comes after)."""
    await session.execute(
        delete(ConversationSession).where(
            ConversationSession.organization_id == row.organization_id, ConversationSession.id == row.id
        )
    )
    await checkpoint(session)


def trunks_query(organization_id: str) -> Select[SipTrunk]:
    return scoped(SipTrunk, organization_id)


def rules_query(organization_id: str) -> Select[DispatchRule]:
    return scoped(DispatchRule, organization_id)
