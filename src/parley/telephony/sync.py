"""Reconciling an organization's telephony with its providers.

LiveKit: inbound and outbound trunks and dispatch rules. Each local row is matched to the provider's
object by the id stored at the last sync, else by the Parley id written into the object's metadata (so
an object created by a sync whose commit was lost is found again, not duplicated). Missing objects are
created, drifted ones replaced with Parley's version, and objects only the provider has are reported as
orphaned, never deleted. Twilio: every Twilio number of the organization gets Parley's voice webhook.

One sync per organization at a time, across processes: a lease row (``telephony_sync_leases``) with an
expiry, so a process that dies mid-sync frees the organization after ``telephony_sync_lease_seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar

from google.protobuf.message import Message
from livekit.protocol import sip
from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.db import checkpoint, utcnow
from parley.kit.errors import Conflict
from parley.kit.ids import new_id
from parley.kit.tenancy import scoped
from parley.telephony import service
from parley.telephony.models import DispatchRule, PhoneNumber, SipTrunk, SyncLease
from parley.telephony.providers import ProviderFailure
from parley.telephony.providers.livekit import LiveKitSip
from parley.telephony.providers.twilio import TwilioClient
from parley.telephony.schemas import SyncItem, SyncReport

M = TypeVar("M", bound=Message)

_TRANSPORTS = {
    "auto": sip.SIPTransport.SIP_TRANSPORT_AUTO,
    "udp": sip.SIPTransport.SIP_TRANSPORT_UDP,
    "tcp": sip.SIPTransport.SIP_TRANSPORT_TCP,
    "tls": sip.SIPTransport.SIP_TRANSPORT_TLS,
}

# --- the lease -------------------------------------------------------------------------------------


async def acquire_lease(session: AsyncSession, settings: Settings, organization_id: str) -> str:
    """Take the organization's sync lease (409 while another sync holds it); returns the holder id."""
    now = utcnow()
    await session.execute(
        delete(SyncLease).where(SyncLease.organization_id == organization_id, SyncLease.expires_at < now)
    )
    holder = new_id("sync")
    try:
        async with session.begin_nested():
            session.add(
                SyncLease(
                    id=holder,
                    organization_id=organization_id,
                    holder=holder,
                    expires_at=now + timedelta(seconds=settings.telephony_sync_lease_seconds),
                )
            )
    except IntegrityError as exc:
        raise Conflict(
            "A telephony sync of this organization is already running; try again when it has finished."
        ) from exc
    return holder


async def release_lease(session: AsyncSession, organization_id: str, holder: str) -> None:
    await session.execute(
        delete(SyncLease).where(SyncLease.organization_id == organization_id, SyncLease.holder == holder)
    )


# --- what Parley wants at LiveKit ------------------------------------------------------------------


def _metadata(row_id: str, organization_id: str, **extra: Any) -> str:
    return json.dumps({"parley_id": row_id, "organization_id": organization_id, **extra}, sort_keys=True)


def _parley_id(metadata: str) -> str | None:
    try:
        value = json.loads(metadata) if metadata else None
    except ValueError:
        return None
    return str(value["parley_id"]) if isinstance(value, dict) and value.get("parley_id") else None


def desired_inbound(settings: Settings, row: SipTrunk) -> sip.SIPInboundTrunkInfo:
    return sip.SIPInboundTrunkInfo(
        name=row.name,
        metadata=_metadata(row.id, row.organization_id),
        numbers=list(row.numbers),
        allowed_addresses=list(row.allowed_addresses),
        allowed_numbers=list(row.allowed_numbers),
        auth_username=row.auth_username or "",
        auth_password=service.trunk_password(settings, row) or "",
    )


def desired_outbound(settings: Settings, row: SipTrunk) -> sip.SIPOutboundTrunkInfo:
    return sip.SIPOutboundTrunkInfo(
        name=row.name,
        metadata=_metadata(row.id, row.organization_id),
        address=row.address or "",
        transport=_TRANSPORTS.get(row.transport or "auto", sip.SIPTransport.SIP_TRANSPORT_AUTO),
        numbers=list(row.numbers),
        auth_username=row.auth_username or "",
        auth_password=service.trunk_password(settings, row) or "",
    )


def desired_rule(settings: Settings, row: DispatchRule, trunk_ids: list[str]) -> sip.SIPDispatchRuleInfo:
    pin = service.rule_pin(settings, row) or ""
    rule = sip.SIPDispatchRule()
    if row.rule_type == "direct":
        rule.dispatch_rule_direct.CopyFrom(sip.SIPDispatchRuleDirect(room_name=row.room_name or "", pin=pin))
    elif row.rule_type == "callee":
        rule.dispatch_rule_callee.CopyFrom(
            sip.SIPDispatchRuleCallee(room_prefix=row.room_prefix or "", pin=pin)
        )
    else:
        rule.dispatch_rule_individual.CopyFrom(
            sip.SIPDispatchRuleIndividual(room_prefix=row.room_prefix or "", pin=pin)
        )
    return sip.SIPDispatchRuleInfo(
        name=row.name,
        metadata=_metadata(row.id, row.organization_id, flow_id=row.flow_id),
        rule=rule,
        trunk_ids=trunk_ids,
        numbers=list(row.numbers),
        attributes={str(k): str(v) for k, v in (row.attributes or {}).items()},
    )


def _managed(remote: M, desired: M) -> M:
    """The remote object reduced to the fields Parley manages, to compare with ``desired``."""
    view = type(desired)()
    view.CopyFrom(remote)
    for field in view.DESCRIPTOR.fields:
        if field.name not in _MANAGED_FIELDS:
            view.ClearField(field.name)
    return view


_MANAGED_FIELDS = frozenset(
    {
        "name",
        "metadata",
        "numbers",
        "allowed_addresses",
        "allowed_numbers",
        "auth_username",
        "auth_password",
        "address",
        "transport",
        "rule",
        "trunk_ids",
        "attributes",
    }
)


# --- the sync --------------------------------------------------------------------------------------


SyncKind = Literal["trunk", "dispatch_rule", "phone_number"]


def _item(kind: SyncKind, row: SipTrunk | DispatchRule, detail: str | None = None) -> SyncItem:
    return SyncItem(
        kind=kind, id=row.id, provider="livekit", provider_id=row.provider_id, name=row.name, detail=detail
    )


class _Report:
    def __init__(self, organization_id: str) -> None:
        self.report = SyncReport(
            organization_id=organization_id, created=[], updated=[], unchanged=[], orphaned=[], errors=[]
        )

    def add(self, bucket: str, item: SyncItem) -> None:
        getattr(self.report, bucket).append(item)


async def _reconcile(
    report: _Report,
    kind: SyncKind,
    rows: Sequence[SipTrunk] | Sequence[DispatchRule],
    remote: Sequence[M],
    remote_id: Callable[[M], str],
    desired: Callable[[Any], M | str],
    create: Callable[[M], Awaitable[M]],
    update: Callable[[str, M], Awaitable[M]],
) -> None:
    by_id = {remote_id(obj): obj for obj in remote}
    by_parley = {pid: obj for obj in remote if (pid := _parley_id(getattr(obj, "metadata", "")))}
    claimed: set[str] = set()
    now = utcnow()
    for row in rows:
        found = by_id.get(row.provider_id or "") or by_parley.get(row.id)
        if found is not None:
            claimed.add(remote_id(found))
        want = desired(row)
        if isinstance(want, str):  # cannot be expressed at the provider yet
            report.add("errors", _item(kind, row, want))
            continue
        try:
            if found is None:
                made = await create(want)
                bucket = "created"
            elif _managed(found, want) != want:
                made = await update(remote_id(found), want)
                bucket = "updated"
            else:
                made = found
                bucket = "unchanged"
        except ProviderFailure as exc:
            report.add("errors", _item(kind, row, exc.reason))
            continue
        claimed.add(remote_id(made))
        row.provider_id = remote_id(made)
        row.synced_at = now
        report.add(bucket, _item(kind, row))
    for obj in remote:
        if remote_id(obj) not in claimed:
            name = str(getattr(obj, "name", "")) or None
            report.add(
                "orphaned",
                SyncItem(kind=kind, id=None, provider="livekit", provider_id=remote_id(obj), name=name),
            )


@dataclass
class SyncPlan:
    """Everything a sync needs, read up front so no database transaction stays open during provider
    calls (on SQLite an open write transaction would block every other writer meanwhile)."""

    organization_id: str
    settings: Settings
    trunks: list[SipTrunk]
    rules: list[DispatchRule]
    numbers: list[PhoneNumber]
    livekit: LiveKitSip | None
    twilio: TwilioClient | None


async def prepare(session: AsyncSession, settings: Settings, organization_id: str) -> SyncPlan:
    """Load the organization's telephony rows and provider clients; changes to the rows made by
    :func:`execute` are written when the session next flushes."""
    trunks = list((await session.scalars(scoped(SipTrunk, organization_id).order_by(SipTrunk.id))).all())
    rules = list(
        (await session.scalars(scoped(DispatchRule, organization_id).order_by(DispatchRule.id))).all()
    )
    numbers = list(
        (
            await session.scalars(
                scoped(PhoneNumber, organization_id)
                .where(PhoneNumber.provider == "twilio")
                .order_by(PhoneNumber.id)
            )
        ).all()
    )
    return SyncPlan(
        organization_id=organization_id,
        settings=settings,
        trunks=trunks,
        rules=rules,
        numbers=numbers,
        livekit=await service.livekit_for(session, settings, organization_id),
        twilio=await service.twilio_for(session, settings, organization_id),
    )


async def _sync_livekit(plan: SyncPlan, report: _Report) -> None:
    settings, trunks, rules, livekit = plan.settings, plan.trunks, plan.rules, plan.livekit
    if livekit is None:
        missing = "LiveKit is not configured in this organization."
        for trunk in trunks:
            report.add("errors", _item("trunk", trunk, missing))
        for rule in rules:
            report.add("errors", _item("dispatch_rule", rule, missing))
        return
    async with livekit as lk:
        await _sync_trunks(lk, settings, report, trunks)
        by_id = {t.id: t for t in trunks}

        def want_rule(row: DispatchRule) -> sip.SIPDispatchRuleInfo | str:
            ids: list[str] = []
            for trunk_id in row.trunk_ids or []:
                trunk = by_id.get(trunk_id)
                if trunk is None or not trunk.provider_id:
                    return f"Trunk {trunk_id!r} is not at LiveKit yet; the rule waits for it."
                ids.append(trunk.provider_id)
            return desired_rule(settings, row, ids)

        try:
            remote_rules = await lk.list_dispatch_rules()
        except ProviderFailure as exc:
            _listing_failed(report, "dispatch_rule", rules, exc)
            return
        await _reconcile(
            report,
            "dispatch_rule",
            rules,
            remote_rules,
            lambda r: r.sip_dispatch_rule_id,
            want_rule,
            lk.create_dispatch_rule,
            lk.update_dispatch_rule,
        )


def _listing_failed(
    report: _Report, kind: SyncKind, rows: Sequence[SipTrunk] | Sequence[DispatchRule], exc: ProviderFailure
) -> None:
    for row in rows:
        report.add("errors", _item(kind, row, exc.reason))


async def _sync_trunks(lk: LiveKitSip, settings: Settings, report: _Report, trunks: list[SipTrunk]) -> None:
    inbound = [t for t in trunks if t.direction == "inbound"]
    outbound = [t for t in trunks if t.direction == "outbound"]
    try:
        remote_in = await lk.list_inbound_trunks()
    except ProviderFailure as exc:
        _listing_failed(report, "trunk", inbound, exc)
    else:
        await _reconcile(
            report,
            "trunk",
            inbound,
            remote_in,
            lambda t: t.sip_trunk_id,
            lambda row: desired_inbound(settings, row),
            lk.create_inbound_trunk,
            lk.update_inbound_trunk,
        )
    try:
        remote_out = await lk.list_outbound_trunks()
    except ProviderFailure as exc:
        _listing_failed(report, "trunk", outbound, exc)
    else:
        await _reconcile(
            report,
            "trunk",
            outbound,
            remote_out,
            lambda t: t.sip_trunk_id,
            lambda row: desired_outbound(settings, row),
            lk.create_outbound_trunk,
            lk.update_outbound_trunk,
        )


async def _sync_twilio(plan: SyncPlan, report: _Report) -> None:
    settings, numbers, twilio = plan.settings, plan.numbers, plan.twilio
    if twilio is None:
        for row in numbers:
            report.add("errors", _number_item(row, "Twilio is not configured in this organization."))
        return
    try:
        remote = await twilio.list_numbers()
    except ProviderFailure as exc:
        for row in numbers:
            report.add("errors", _number_item(row, exc.reason))
        return
    by_number = {n.phone_number: n for n in remote}
    webhook = service.voice_webhook_url(settings)
    now = utcnow()
    claimed: set[str] = set()
    for row in numbers:
        found = by_number.get(row.number)
        if found is None:
            report.add(
                "errors", _number_item(row, "The number is not in the Twilio account; buy or port it first.")
            )
            continue
        claimed.add(found.sid)
        if found.voice_url == webhook and (found.voice_method or "POST").upper() == "POST":
            bucket = "unchanged"
        else:
            try:
                await twilio.set_voice_url(found.sid, webhook)
            except ProviderFailure as exc:
                report.add("errors", _number_item(row, exc.reason))
                continue
            bucket = "updated"
        row.provider_id = found.sid
        row.synced_at = now
        report.add(bucket, _number_item(row, None))
    for item in remote:
        if item.sid not in claimed:
            report.add(
                "orphaned",
                SyncItem(
                    kind="phone_number",
                    id=None,
                    provider="twilio",
                    provider_id=item.sid,
                    name=item.phone_number,
                ),
            )


def _number_item(row: PhoneNumber, detail: str | None) -> SyncItem:
    return SyncItem(
        kind="phone_number",
        id=row.id,
        provider="twilio",
        provider_id=row.provider_id,
        name=row.number,
        detail=detail,
    )


async def execute(plan: SyncPlan) -> SyncReport:
    """Reconcile the planned rows with the providers (no database access; rows are updated in memory).

    Provider problems never raise: they are listed under ``errors`` and the rest goes on.
    """
    report = _Report(plan.organization_id)
    await _sync_livekit(plan, report)
    await _sync_twilio(plan, report)
    return report.report


async def sync_organization(session: AsyncSession, settings: Settings, organization_id: str) -> SyncReport:
    """The whole sync of one organization: lease, plan, talk to the providers, record, release.

    The lease must be visible to other processes while the sync talks to the providers, and no
    transaction may stay open meanwhile (SQLite has one writer): commit, then talk, then write the
    results (provider ids, synced_at) and release the lease in the caller's closing transaction.
    """
    holder = await acquire_lease(session, settings, organization_id)
    plan = await prepare(session, settings, organization_id)
    await checkpoint(session)
    try:
        report = await execute(plan)
    except BaseException:
        await session.rollback()
        await release_lease(session, organization_id, holder)
        await checkpoint(session)
        raise
    await release_lease(session, organization_id, holder)
    return report
