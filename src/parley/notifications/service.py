"""Notification rules: channels checked against the SSRF guard when saved, secrets encrypted and bound
to their row, rules matched against brain signals, and one delivery attempt recorded at a time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, cast
from urllib.parse import urlsplit

import structlog
from sqlalchemy import Select, Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import Executable

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.kit.crypto import SecretDecryptionError, mask, row_secrets
from parley.kit.db import after_commit, plain_insert, short_read, utcnow
from parley.kit.delivery import RetryPolicy, attempt_logs, settle
from parley.kit.errors import Conflict, InvalidFields
from parley.kit.filters import created_within, text_filter
from parley.kit.ids import new_id
from parley.kit.jobs import JobQueue
from parley.kit.orgcache import cached, watch
from parley.kit.outbound import outbound_policy
from parley.kit.tenancy import get_owned, scoped
from parley.notifications import senders
from parley.notifications.destinations import DestinationRefused, check_host, check_url
from parley.notifications.messages import RaisedSignal, render, signal_facts, test_facts
from parley.notifications.models import (
    NotificationAttempt,
    NotificationChannel,
    NotificationDelivery,
    NotificationRule,
)
from parley.notifications.schemas import (
    FIELDS,
    REQUIRED,
    SECRET_FIELDS,
    AttemptOut,
    ChannelCreate,
    ChannelOut,
    ChannelUpdate,
    DeliveryOut,
    RuleCreate,
    RuleUpdate,
    channel_payload,
)

log = structlog.get_logger("parley.notifications")

DELIVER_JOB = "notifications.deliver"
SEVERITY_RANK = {"info": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
DEFAULT_PORTS = {"starttls": 587, "ssl": 465, "none": 25}


def _invalid(field: str, message: str, kind: str = "value_error") -> InvalidFields:
    return InvalidFields([{"type": kind, "loc": ("body", field), "msg": message, "input": None}])


# --- channels ----------------------------------------------------------------------------------


def to_channel_out(channel: NotificationChannel) -> ChannelOut:
    hints = channel.secret_hints or {}
    return ChannelOut(
        id=channel.id,
        name=channel.name,
        type=channel.type,
        enabled=channel.enabled,
        created_at=channel.created_at,
        updated_at=channel.updated_at,
        **{k: v for k, v in (channel.config or {}).items() if k in FIELDS[channel.type]},
        **{k: v for k, v in hints.items() if k in FIELDS[channel.type]},
    )


def slack_host_allowed(settings: Settings, url: str) -> bool:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    allowed = {h.lower().rstrip(".") for h in settings.notification_slack_hosts}
    if host not in allowed:
        return False
    # Plain http only where the operator allow-listed the host for outbound calls (local receivers).
    if parts.scheme != "https":
        policy = outbound_policy(settings)
        return host in policy.allowed_hosts or any(
            _is_address_in(host, network) for network in policy.allowed_networks
        )
    return True


def _is_address_in(host: str, network: Any) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host) in network
    except ValueError:
        return False


async def _check_destinations(
    settings: Settings, channel_type: str, values: dict[str, Any], changed: set[str]
) -> None:
    """The SSRF guard at save time, for the fields that changed (422 naming the field)."""
    policy = outbound_policy(settings)
    try:
        if channel_type == "webhook" and "url" in changed:
            await check_url(policy, values["url"])
        elif channel_type == "slack" and "webhook_url" in changed:
            if not slack_host_allowed(settings, values["webhook_url"]):
                hosts = ", ".join(settings.notification_slack_hosts) or "none"
                raise _invalid(
                    "webhook_url",
                    f"A Slack webhook URL must be an https URL on one of these hosts: {hosts} "
                    "(PARLEY_NOTIFICATION_SLACK_HOSTS).",
                )
            await check_url(policy, values["webhook_url"])
        elif channel_type == "email" and changed & {"smtp_host", "smtp_port", "smtp_security"}:
            await check_host(policy, values["smtp_host"], int(values["smtp_port"]))
    except DestinationRefused as exc:
        field = {"webhook": "url", "slack": "webhook_url", "email": "smtp_host"}[channel_type]
        raise _invalid(field, str(exc), "destination_refused") from exc


def _split(settings: Settings, channel: NotificationChannel, values: dict[str, Any]) -> None:
    """Store ``values`` on the channel: secrets sealed with hints, the rest as plain config."""
    sealer = row_secrets(settings, channel)
    config = dict(channel.config or {})
    sealed = dict(channel.secrets or {})
    hints = dict(channel.secret_hints or {})
    for name, value in values.items():
        if name in SECRET_FIELDS:
            if value is None:
                sealed.pop(name, None)
                hints.pop(name, None)
            else:
                sealed[name] = sealer.seal(name, value)
                hints[name] = mask(value)
        elif value is None:
            config.pop(name, None)
        else:
            config[name] = value
    channel.config, channel.secrets, channel.secret_hints = config, sealed, hints


def _email_defaults(values: dict[str, Any]) -> None:
    values.setdefault("smtp_security", "starttls")
    if values.get("smtp_port") is None:
        values["smtp_port"] = DEFAULT_PORTS[values["smtp_security"]]


async def _name_taken(session: AsyncSession, organization_id: str, name: str, except_id: str | None) -> bool:
    stmt = select(NotificationChannel.id).where(
        NotificationChannel.organization_id == organization_id, NotificationChannel.name == name
    )
    if except_id:
        stmt = stmt.where(NotificationChannel.id != except_id)
    return await session.scalar(stmt) is not None


def _name_conflict(name: str) -> Conflict:
    return Conflict(f"A notification channel called {name!r} already exists in this organization.")


async def get_channel(session: AsyncSession, organization_id: str, channel_id: str) -> NotificationChannel:
    return await get_owned(session, NotificationChannel, channel_id, organization_id, "Notification channel")


async def create_channel(
    session: AsyncSession, settings: Settings, context: OrgContext, data: ChannelCreate
) -> NotificationChannel:
    values = channel_payload(data)
    if data.type == "email":
        _email_defaults(values)
    await _check_destinations(settings, data.type, values, set(values))
    if await _name_taken(session, context.organization_id, data.name, None):
        raise _name_conflict(data.name)
    channel = NotificationChannel(
        id=new_id("nch"),
        organization_id=context.organization_id,
        name=data.name,
        type=data.type,
        enabled=data.enabled,
        config={},
        secrets={},
        secret_hints={},
        created_by=context.actor_user_id,
    )
    _split(settings, channel, values)
    session.add(channel)
    await session.flush()
    return channel


async def update_channel(
    session: AsyncSession, settings: Settings, organization_id: str, channel_id: str, data: ChannelUpdate
) -> NotificationChannel:
    channel = await get_channel(session, organization_id, channel_id)
    changes = channel_payload(data)
    foreign = sorted(set(changes) - FIELDS[channel.type])
    if foreign:
        raise _invalid(foreign[0], f"does not apply to a {channel.type} channel")
    for name, value in changes.items():
        if value is None and name in REQUIRED[channel.type]:
            raise _invalid(name, f"a {channel.type} channel needs {name}; it cannot be removed")
    current = {**(channel.config or {}), **{k: True for k in channel.secrets or {}}}
    values = {**current, **changes}
    if channel.type == "email":
        if "smtp_port" in changes and changes["smtp_port"] is None:
            values.pop("smtp_port")
        _email_defaults(values)
        changes["smtp_port"] = values["smtp_port"]
        changes.setdefault("smtp_security", values["smtp_security"])
    changed = {k for k, v in changes.items() if current.get(k) != v or k in SECRET_FIELDS}
    await _check_destinations(settings, channel.type, values, changed)
    if data.name is not None and data.name != channel.name:
        if await _name_taken(session, organization_id, data.name, channel.id):
            raise _name_conflict(data.name)
        channel.name = data.name
    if data.enabled is not None:
        channel.enabled = data.enabled
    _split(settings, channel, changes)
    channel.updated_at = utcnow()
    await session.flush()
    return channel


async def delete_channel(session: AsyncSession, organization_id: str, channel_id: str) -> NotificationChannel:
    channel = await get_channel(session, organization_id, channel_id)
    users = list(
        await session.scalars(
            select(NotificationRule.id).where(
                NotificationRule.organization_id == organization_id, NotificationRule.channel_id == channel.id
            )
        )
    )
    if users:
        raise Conflict(
            f"The channel is used by notification rule {users[0]!r}"
            + (f" and {len(users) - 1} more" if len(users) > 1 else "")
            + "; delete those rules or point them at another channel first."
        )
    await session.delete(channel)
    await session.flush()
    return channel


def channels_query(organization_id: str, channel_type: str | None) -> Select[NotificationChannel]:
    stmt = scoped(NotificationChannel, organization_id)
    if channel_type:
        stmt = stmt.where(NotificationChannel.type == channel_type)
    return stmt


# --- rules -------------------------------------------------------------------------------------


async def get_rule(session: AsyncSession, organization_id: str, rule_id: str) -> NotificationRule:
    return await get_owned(session, NotificationRule, rule_id, organization_id, "Notification rule")


async def _require_channel(session: AsyncSession, organization_id: str, channel_id: str) -> None:
    found = await session.scalar(
        scoped(NotificationChannel, organization_id).where(NotificationChannel.id == channel_id)
    )
    if found is None:
        raise _invalid(
            "channel_id", f"Notification channel {channel_id!r} was not found in this organization."
        )


async def create_rule(session: AsyncSession, context: OrgContext, data: RuleCreate) -> NotificationRule:
    await _require_channel(session, context.organization_id, data.channel_id)
    rule = NotificationRule(
        id=new_id("nrl"),
        organization_id=context.organization_id,
        name=data.name,
        signal_type=data.signal_type,
        min_severity=data.min_severity,
        channel_id=data.channel_id,
        enabled=data.enabled,
        throttle_minutes=data.throttle_minutes or None,
        created_by=context.actor_user_id,
    )
    session.add(rule)
    await session.flush()
    return rule


async def update_rule(
    session: AsyncSession, organization_id: str, rule_id: str, data: RuleUpdate
) -> NotificationRule:
    rule = await get_rule(session, organization_id, rule_id)
    changes = data.model_dump(exclude_unset=True)
    for name in ("signal_type", "min_severity", "channel_id", "enabled"):
        if name in changes and changes[name] is None:
            raise _invalid(name, "cannot be null")
    if "channel_id" in changes and changes["channel_id"] != rule.channel_id:
        await _require_channel(session, organization_id, changes["channel_id"])
    if "throttle_minutes" in changes:
        changes["throttle_minutes"] = changes["throttle_minutes"] or None
    for name, value in changes.items():
        setattr(rule, name, value)
    rule.updated_at = utcnow()
    await session.flush()
    return rule


async def delete_rule(session: AsyncSession, organization_id: str, rule_id: str) -> NotificationRule:
    rule = await get_rule(session, organization_id, rule_id)
    await session.delete(rule)
    await session.flush()
    return rule


# --- the hook: brain signals → deliveries -------------------------------------------------------


@dataclass(frozen=True)
class _Route:
    """An enabled rule with its enabled channel, as planning needs it (kept in the per-organization
    cache: detached from any session)."""

    rule_id: str
    signal_type: str
    min_severity: str
    throttle_minutes: int | None
    channel_id: str
    channel_type: str
    channel_name: str


def _matches(route: _Route, signal: RaisedSignal) -> bool:
    if route.signal_type not in ("*", signal.type):
        return False
    return SEVERITY_RANK.get(signal.severity, 0) >= SEVERITY_RANK.get(route.min_severity, 0)


async def _throttled(
    session: AsyncSession, organization_id: str, route: _Route, signal_type: str, now: datetime
) -> bool:
    since = now - timedelta(minutes=route.throttle_minutes or 0)
    recent = await session.scalar(
        select(NotificationDelivery.id)
        .where(
            NotificationDelivery.organization_id == organization_id,
            NotificationDelivery.rule_id == route.rule_id,
            NotificationDelivery.signal_type == signal_type,
            NotificationDelivery.created_at >= since,
        )
        .limit(1)
    )
    return recent is not None


_ROUTES = "notifications.routes"
watch(_ROUTES, NotificationRule, NotificationChannel)
_ENABLED_ROUTES = (
    select(
        NotificationRule.id,
        NotificationRule.signal_type,
        NotificationRule.min_severity,
        NotificationRule.throttle_minutes,
        NotificationChannel.id,
        NotificationChannel.type,
        NotificationChannel.name,
    )
    .join(NotificationChannel, NotificationChannel.id == NotificationRule.channel_id)
    .where(
        NotificationRule.organization_id == bindparam("organization_id"),
        NotificationChannel.organization_id == bindparam("organization_id"),
        NotificationRule.enabled.is_(True),
        NotificationChannel.enabled.is_(True),
    )
    .order_by(NotificationRule.id)
)


async def _routes(session: AsyncSession, organization_id: str) -> tuple[_Route, ...]:
    async def load() -> tuple[_Route, ...]:
        rows = await session.execute(_ENABLED_ROUTES, {"organization_id": organization_id})
        return tuple(_Route(*row) for row in rows)

    return await cached(session, _ROUTES, organization_id, load)


_DELIVERIES = cast(Table, NotificationDelivery.__table__)


@dataclass(frozen=True)
class PlannedNotifications:
    """The deliveries new signals make (:func:`plan_notifications`), as INSERTs in order."""

    statements: list[tuple[Executable, dict[str, Any]]]
    delivery_ids: list[str]


async def plan_notifications(
    session: AsyncSession, signals: Sequence[RaisedSignal], *, unthrottled_only: bool = False
) -> PlannedNotifications | None:
    """A pending delivery for every enabled rule a new signal matches (the rules: cached per
    organization). A rule with a throttle that sent the same signal type within its minutes sends
    nothing; that look-up reads the deliveries in ``session``'s transaction, so with
    ``unthrottled_only`` (a caller that writes outside it) a matching throttled rule answers None."""
    now = utcnow()
    statements: list[tuple[Executable, dict[str, Any]]] = []
    fired: set[tuple[str, str]] = set()
    for organization_id in sorted({s.organization_id for s in signals}):
        routes = await _routes(session, organization_id)
        for signal in (s for s in signals if s.organization_id == organization_id):
            for route in routes:
                if not _matches(route, signal):
                    continue
                key = (route.rule_id, signal.type)
                if route.throttle_minutes:
                    if unthrottled_only:
                        return None
                    if key in fired or await _throttled(session, organization_id, route, signal.type, now):
                        log.info("notification_throttled", rule_id=route.rule_id, signal_id=signal.id)
                        continue
                fired.add(key)
                delivery = {
                    "id": new_id("ndl"),
                    "organization_id": organization_id,
                    "kind": "signal",
                    "channel_id": route.channel_id,
                    "channel_type": route.channel_type,
                    "channel_name": route.channel_name,
                    "rule_id": route.rule_id,
                    "signal_id": signal.id,
                    "signal_type": signal.type,
                    "severity": signal.severity,
                    "status": "pending",
                    "attempts": 0,
                    "payload": signal_facts(signal),
                    "created_at": now,
                    "updated_at": now,
                }
                statements.append((plain_insert(_DELIVERIES, tuple(delivery)), delivery))
    return PlannedNotifications(statements, [values["id"] for _, values in statements])


def queue_notifications(
    session: AsyncSession, planned: PlannedNotifications, *, jobs: JobQueue | None = None
) -> None:
    """Queue the planned deliveries once ``session``'s unit of work has committed."""
    if not planned.delivery_ids:
        return
    runner: JobQueue | None = jobs or session.info.get("jobs")
    if runner is None:
        # Still safe: pending deliveries are picked up by the job recovery at the next start.
        log.warning("notifications_not_queued", deliveries=len(planned.delivery_ids))
        return
    created = planned.delivery_ids

    async def enqueue() -> None:
        for delivery_id in created:
            await runner.submit(DELIVER_JOB, {"delivery_id": delivery_id})

    after_commit(session, enqueue)


# --- sending -----------------------------------------------------------------------------------


def _target(settings: Settings, channel: NotificationChannel) -> senders.Target:
    sealer = row_secrets(settings, channel)
    secrets = {name: sealer.open(name, token) for name, token in (channel.secrets or {}).items()}
    config = channel.config or {}
    if channel.type == "webhook":
        return senders.WebhookTarget(url=config["url"], secret=secrets.get("secret"))
    if channel.type == "slack":
        return senders.SlackTarget(webhook_url=secrets["webhook_url"])
    return senders.EmailTarget(
        host=config["smtp_host"],
        port=int(config["smtp_port"]),
        security=config.get("smtp_security", "starttls"),
        username=config.get("smtp_username"),
        password=secrets.get("smtp_password"),
        from_address=config["from_address"],
        to=list(config["to"]),
    )


def _local_hostname(settings: Settings) -> str:
    return urlsplit(settings.base_url).hostname or "localhost"


async def send(
    settings: Settings, channel: NotificationChannel, delivery: NotificationDelivery
) -> senders.SendResult:
    """One attempt at sending ``delivery`` through ``channel``; never raises for a delivery problem."""
    started = time.perf_counter()
    try:
        result = await _send(settings, channel, delivery)
    except Exception as exc:  # a bug must not lose the log row nor become a 500; the type is logged only
        log.error(
            "notification_send_error", delivery_id=delivery.id, error_type=type(exc).__name__, exc_info=exc
        )
        result = senders.SendResult("permanent", None, "The message could not be sent (an internal error).")
    return replace(result, duration_ms=round((time.perf_counter() - started) * 1000, 1))


async def _send(
    settings: Settings, channel: NotificationChannel, delivery: NotificationDelivery
) -> senders.SendResult:
    try:
        target = _target(settings, channel)
    except (SecretDecryptionError, KeyError):
        return senders.SendResult(
            "permanent", None, "The channel's settings cannot be read; save its secrets again."
        )
    rendered = render(delivery.payload, delivery.id, delivery.created_at, settings.base_url)
    policy = outbound_policy(settings)
    timeout = settings.notification_timeout
    if isinstance(target, senders.WebhookTarget):
        return await senders.send_webhook(
            policy,
            target,
            rendered.payload,
            delivery_id=delivery.id,
            event=rendered.payload["event"],
            seconds=timeout,
        )
    if isinstance(target, senders.SlackTarget):
        if not slack_host_allowed(settings, target.webhook_url):
            return senders.SendResult(
                "permanent",
                None,
                "The Slack webhook URL's host is not allowed (PARLEY_NOTIFICATION_SLACK_HOSTS).",
            )
        return await senders.send_slack(
            policy, target, rendered.title, rendered.text, rendered.link, seconds=timeout
        )
    return await senders.send_email(
        policy,
        target,
        rendered.title,
        rendered.text,
        delivery_id=delivery.id,
        local_hostname=_local_hostname(settings),
        seconds=timeout,
    )


def retry_policy(settings: Settings) -> RetryPolicy:
    return RetryPolicy(settings.notification_retry_seconds, settings.notification_max_attempts)


def record_attempt(
    session: AsyncSession,
    settings: Settings,
    delivery: NotificationDelivery,
    result: senders.SendResult,
    started_at: datetime,
    *,
    retry: bool,
) -> float | None:
    """Log the attempt and move the delivery on; returns the delay before a retry, if one is due."""
    detail = result.detail[:1000]
    session.add(
        NotificationAttempt(
            id=new_id("nda"),
            organization_id=delivery.organization_id,
            delivery_id=delivery.id,
            number=delivery.attempts,
            outcome=result.outcome,
            status_code=result.status_code,
            detail=detail,
            duration_ms=result.duration_ms,
            started_at=started_at,
        )
    )
    return settle(delivery, retry_policy(settings), result, detail, retry=retry)


async def test_channel(
    session: AsyncSession, settings: Settings, organization_id: str, channel_id: str
) -> tuple[NotificationDelivery, senders.SendResult]:
    """Send a test message through the channel now (enabled or not), logged as a ``test`` delivery.

    The channel is read in a short read of its own and the message sent before ``session`` writes
    anything: no transaction or pool connection waits on the receiver."""
    async with short_read(session) as reader:
        channel = await get_channel(reader, organization_id, channel_id)
    now = utcnow()
    delivery = NotificationDelivery(
        id=new_id("ndl"),
        organization_id=organization_id,
        kind="test",
        channel_id=channel.id,
        channel_type=channel.type,
        channel_name=channel.name,
        status="sending",
        attempts=1,
        payload=test_facts(organization_id, channel.name),
        created_at=now,
        updated_at=now,
    )
    result = await send(settings, channel, delivery)
    session.add(delivery)
    await session.flush()  # the attempt row references it
    record_attempt(session, settings, delivery, result, now, retry=False)
    await session.flush()
    return delivery, result


# --- reading -----------------------------------------------------------------------------------


# The attempts of some deliveries as the API shows them, by delivery id.
attempts_of = partial(attempt_logs, model=NotificationAttempt, out=AttemptOut)


def to_delivery_out(delivery: NotificationDelivery, attempts: list[AttemptOut] | None = None) -> DeliveryOut:
    return DeliveryOut(
        id=delivery.id,
        kind=delivery.kind,
        status=delivery.status,
        delivered=delivery.status == "delivered",
        channel_id=delivery.channel_id,
        channel_type=delivery.channel_type,
        channel_name=delivery.channel_name,
        rule_id=delivery.rule_id,
        signal_id=delivery.signal_id,
        signal_type=delivery.signal_type,
        severity=delivery.severity,
        attempts=delivery.attempts,
        next_attempt_at=delivery.next_attempt_at,
        delivered_at=delivery.delivered_at,
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        created_at=delivery.created_at,
        updated_at=delivery.updated_at,
        attempt_log=attempts or [],
    )


def payload_preview(settings: Settings, delivery: NotificationDelivery) -> dict[str, Any]:
    return render(delivery.payload, delivery.id, delivery.created_at, settings.base_url).payload


# --- listing -----------------------------------------------------------------------------------


def rules_query(
    organization_id: str, channel_id: str | None, signal_type: str | None
) -> Select[NotificationRule]:
    stmt = scoped(NotificationRule, organization_id)
    if (value := text_filter(channel_id, "channel_id")) is not None:
        stmt = stmt.where(NotificationRule.channel_id == value)
    if (value := text_filter(signal_type, "signal_type")) is not None:
        stmt = stmt.where(NotificationRule.signal_type == value)
    return stmt


@dataclass(frozen=True)
class DeliveryFilters:
    status: str | None = None
    kind: str | None = None
    channel_id: str | None = None
    rule_id: str | None = None
    signal_id: str | None = None
    signal_type: str | None = None
    severity: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def deliveries_query(organization_id: str, filters: DeliveryFilters) -> Select[NotificationDelivery]:
    """The delivery log matching ``filters`` (400 for text PostgreSQL cannot compare or a bad time)."""
    stmt = scoped(NotificationDelivery, organization_id)
    if filters.status is not None:
        stmt = stmt.where(NotificationDelivery.status == filters.status)
    if filters.kind is not None:
        stmt = stmt.where(NotificationDelivery.kind == filters.kind)
    for column, value, name in (
        (NotificationDelivery.channel_id, filters.channel_id, "channel_id"),
        (NotificationDelivery.rule_id, filters.rule_id, "rule_id"),
        (NotificationDelivery.signal_id, filters.signal_id, "signal_id"),
        (NotificationDelivery.signal_type, filters.signal_type, "signal_type"),
    ):
        if (text := text_filter(value, name)) is not None:
            stmt = stmt.where(column == text)
    if filters.severity is not None:
        stmt = stmt.where(NotificationDelivery.severity == filters.severity)
    return created_within(stmt, NotificationDelivery.created_at, filters.since, filters.until)
