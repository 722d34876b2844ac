"""Privacy per organization: redaction settings, retention, deleting and exporting a call or a caller.

Personal data lives in more than one package. Calls (with their brain signals and recordings) are
handled here; packages that build on this one (``sessions``, later ``campaigns``) hand over a
:class:`PersonalDataHolder` with :func:`register_holder`, so a caller's export, a caller's deletion,
a call's deletion and the retention job reach their rows too without this package importing them.
Services only flush; stored files are deleted once the unit of work has committed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog
from sqlalchemy import bindparam, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.service import RequestFacts, event_values, record
from parley.brain.models import BrainSignal
from parley.calls import service as calls
from parley.calls.models import Call
from parley.kit.blobs import BlobStore, BlobStoreError
from parley.kit.db import after_commit, utcnow
from parley.kit.errors import InvalidFields
from parley.kit.orgcache import cached, watch
from parley.kit.redaction import (
    DEFAULT_REPLACEMENTS,
    KINDS,
    CustomPattern,
    PatternError,
    Redactor,
    compile_custom,
    redactor,
)
from parley.kit.tenancy import get_owned, scoped
from parley.notifications.models import NotificationDelivery
from parley.privacy.models import PrivacySettings
from parley.privacy.schemas import (
    CallDeletedOut,
    CallerDeletedOut,
    CallerExportOut,
    CallExportOut,
    CustomPatternOut,
    PrivacySettingsOut,
    PrivacySettingsUpdate,
    RetentionRunOut,
)
from parley.webhooks.models import WebhookEvent

log = structlog.get_logger("parley.privacy")

# How many calls one retention pass deletes per organization and transaction.
RETENTION_BATCH = 200
# How many calls (and webhook events) a caller export or deletion reads at a time; it reads them all.
CALLER_LIMIT = 5000
NOTICE_MAX = 1000
_NOTICE_KEY = r"^(default|[a-z]{2}(-[A-Z]{2})?)$"


# --- holders of personal data in other packages ---------------------------------------------------


class PersonalDataHolder(Protocol):
    """Rows about callers that another package keeps (the conversation sessions, campaign contacts)."""

    name: str

    async def export_caller(
        self, session: AsyncSession, organization_id: str, phone: str
    ) -> list[dict[str, Any]]:
        """Every row about ``phone`` as JSON-ready dicts."""
        ...

    async def delete_caller(self, session: AsyncSession, organization_id: str, phone: str) -> int:
        """Delete every row about ``phone``; answer how many."""
        ...

    async def delete_for_calls(
        self, session: AsyncSession, organization_id: str, session_ids: Sequence[str]
    ) -> int:
        """Delete what belongs to these calls (by the calls' ``session_id``); answer how many."""
        ...

    async def expire(self, session: AsyncSession, organization_id: str, cutoff: datetime) -> int:
        """Delete rows that ended before ``cutoff`` (retention); answer how many."""
        ...


_HOLDERS: dict[str, PersonalDataHolder] = {}


def register_holder(holder: PersonalDataHolder) -> None:
    """Hand over a package's personal data (at import of its module; ``parley/worker.py`` loads it)."""
    _HOLDERS[holder.name] = holder


def holders() -> list[PersonalDataHolder]:
    return list(_HOLDERS.values())


# --- settings --------------------------------------------------------------------------------------


# Read at every turn (the redactor): a statement built once. ``Session.get`` builds and keys a new one
# each time it misses the identity map, which cost more than running it.
_SETTINGS_OF = select(PrivacySettings).where(PrivacySettings.organization_id == bindparam("organization"))


_REDACTOR = "privacy.redactor"
watch(_REDACTOR, PrivacySettings)


async def get_settings(session: AsyncSession, organization_id: str) -> PrivacySettings | None:
    return await session.scalar(_SETTINGS_OF, {"organization": organization_id})


def to_out(row: PrivacySettings | None) -> PrivacySettingsOut:
    if row is None:
        return PrivacySettingsOut(
            redaction_enabled=False,
            redaction_kinds=list(KINDS),
            replacements=dict(DEFAULT_REPLACEMENTS),
            custom_patterns=[],
            retention_days=None,
            recording_notice={},
            updated_at=None,
        )
    return PrivacySettingsOut(
        redaction_enabled=row.redaction_enabled,
        redaction_kinds=[k for k in KINDS if k in row.redaction_kinds],
        replacements={**DEFAULT_REPLACEMENTS, **row.replacements},
        custom_patterns=[CustomPatternOut(**p) for p in row.custom_patterns],
        retention_days=row.retention_days,
        recording_notice=dict(row.recording_notice),
        updated_at=row.updated_at,
    )


def _error(loc: list[str | int], message: str, value: Any) -> dict[str, Any]:
    return {
        "type": "value_error",
        "loc": ["body", *loc],
        "msg": message,
        "input": value,
        "ctx": {"error": message},
    }


def _check(data: PrivacySettingsUpdate) -> None:
    errors: list[dict[str, Any]] = []
    for index, item in enumerate(data.custom_patterns or []):
        try:
            compile_custom(item.pattern)
        except PatternError as exc:
            errors.append(
                _error(
                    ["custom_patterns", index, "pattern"],
                    f"The pattern {item.name!r} ({item.pattern!r}) is refused: {exc}.",
                    item.pattern,
                )
            )
    for kind, text in (data.replacements or {}).items():
        if len(text) > 60:
            errors.append(
                _error(["replacements", kind], "A replacement may be at most 60 characters long.", text[:200])
            )
    names = [p.name for p in data.custom_patterns or []]
    for name in sorted({n for n in names if names.count(n) > 1}):
        errors.append(_error(["custom_patterns"], f"The pattern name {name!r} is used twice.", name))
    if data.retention_days is not None and data.retention_days < 1:
        errors.append(
            _error(
                ["retention_days"],
                "A retention of 0 days (or less) is refused: calls would be deleted as they end, before anyone "
                "could read them. Give at least 1 day, or turn redaction on to keep no personal data.",
                data.retention_days,
            )
        )
    for language, text in (data.recording_notice or {}).items():
        if not re.fullmatch(_NOTICE_KEY, language):
            errors.append(
                _error(
                    ["recording_notice", language],
                    f"{language!r} is not a language code like 'de', 'en-GB' or 'default'.",
                    language,
                )
            )
        elif not text.strip() or len(text) > NOTICE_MAX:
            errors.append(
                _error(
                    ["recording_notice", language],
                    f"The notice must be 1 to {NOTICE_MAX} characters long.",
                    text[:200],
                )
            )
    if errors:
        raise InvalidFields(errors)


async def update_settings(
    session: AsyncSession, organization_id: str, data: PrivacySettingsUpdate
) -> PrivacySettings:
    """Change the given fields (422 for an invalid or too slow pattern, a retention below 1 day)."""
    _check(data)
    row = await get_settings(session, organization_id)
    if row is None:
        row = PrivacySettings(
            organization_id=organization_id,
            redaction_enabled=False,
            redaction_kinds=list(KINDS),
            replacements={},
            custom_patterns=[],
            retention_days=None,
            recording_notice={},
        )
        session.add(row)
    if data.redaction_enabled is not None:
        row.redaction_enabled = data.redaction_enabled
    if data.redaction_kinds is not None:
        row.redaction_kinds = [k for k in KINDS if k in data.redaction_kinds]
    if data.replacements is not None:
        row.replacements = {str(k): v for k, v in data.replacements.items()}
    if data.custom_patterns is not None:
        row.custom_patterns = [p.model_dump() for p in data.custom_patterns]
    if data.clear_retention:
        row.retention_days = None
    elif data.retention_days is not None:
        row.retention_days = data.retention_days
    if data.recording_notice is not None:
        row.recording_notice = {k: v.strip() for k, v in data.recording_notice.items()}
    row.updated_at = utcnow()
    await session.flush()
    return row


def redactor_of(row: PrivacySettings | None, *, force: bool = False) -> Redactor | None:
    """The organization's redactor, or None when redaction is off (``force``: build it anyway)."""
    if row is None:
        return redactor() if force else None
    if not row.redaction_enabled and not force:
        return None
    custom = [
        CustomPattern(p["name"], p["pattern"], p.get("replacement") or "[redacted]")
        for p in row.custom_patterns
    ]
    return redactor(row.redaction_kinds, {**DEFAULT_REPLACEMENTS, **row.replacements}, custom)


async def redactor_for(session: AsyncSession, organization_id: str) -> Redactor | None:
    """What the runtime redacts with before it writes a turn or a call record (None: redaction off).

    Read at every turn and rarely changed: kept per organization in the process (kit/orgcache.py),
    dropped once a change to the organization's settings commits. The redactor is shared read-only."""

    async def load() -> Redactor | None:
        return redactor_of(await get_settings(session, organization_id))

    return await cached(session, _REDACTOR, organization_id, load)


def redact_state(redactor: Redactor, state: dict[str, Any], *, ended: bool) -> dict[str, Any]:
    """A conversation state (its JSON) with personal data replaced: the transcript, the tool calls
    (arguments, results, errors), the LLM node's messages and the signals' details; once the
    conversation has ended also its variables (while it runs, the flow still needs them)."""
    data = dict(state)
    data["transcript"] = [
        {**t, "text": redactor.text(t.get("text") or "")} for t in data.get("transcript") or []
    ]
    data["tool_calls"] = [redact_tool_call(redactor, c) for c in data.get("tool_calls") or []]
    data["signals"] = [
        {**s, "details": redactor.value(s.get("details") or {})} for s in data.get("signals") or []
    ]
    llm = data.get("llm")
    if isinstance(llm, dict):
        data["llm"] = {**llm, "messages": redactor.value(llm.get("messages") or [])}
    if ended:
        data["variables"] = redactor.value(data.get("variables") or {})
        data["partial_digits"] = {}
    return data


def redact_tool_call(redactor: Redactor, call: dict[str, Any]) -> dict[str, Any]:
    out = dict(call)
    out["arguments"] = redactor.value(call.get("arguments") or {})
    out["result"] = redactor.value(call.get("result"))
    if isinstance(call.get("error"), str):
        out["error"] = redactor.text(call["error"])
    return out


def preview(row: PrivacySettings | None, text: str) -> str:
    """``text`` as the organization's settings would store it (with redaction on)."""
    built = redactor_of(row, force=True)
    return built.text(text) if built is not None else text


# --- the recording notice --------------------------------------------------------------------------


def pick_notice(notices: dict[str, str], language: str | None) -> str | None:
    """The notice for ``language``: exact (``de-DE``), then its base (``de``), then ``default``."""
    if not notices:
        return None
    if language:
        if language in notices:
            return notices[language]
        base = language.split("-")[0].lower()
        if base in notices:
            return notices[base]
    return notices.get("default")


async def recording_notice(session: AsyncSession, organization_id: str, language: str | None) -> str | None:
    row = await get_settings(session, organization_id)
    return pick_notice(row.recording_notice, language) if row is not None else None


# --- deleting and exporting ------------------------------------------------------------------------


def mask_phone(phone: str) -> str:
    """What the audit trail keeps of a deleted caller's number: its country code and last two digits."""
    if len(phone) <= 6:
        return "*" * len(phone)
    return phone[:3] + "*" * (len(phone) - 5) + phone[-2:]


@dataclass
class _Deleted:
    calls: list[str] = field(default_factory=list)
    blob_keys: list[str] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)


def _remove_files_after_commit(session: AsyncSession, blobs: BlobStore, keys: list[str]) -> None:
    if not keys:
        return

    async def remove() -> None:
        for key in keys:
            try:
                await blobs.delete(key)
            except BlobStoreError:
                log.warning("privacy_blob_not_removed", key_count=len(keys))

    after_commit(session, remove)


# The call events kept for the webhook delivery log carry the call's caller, callee, transcript and
# variables (campaign events the contact's phone and variables): they go with the call or the caller.
EVENTS = "webhook_events"


def _event_about_calls(ids: Sequence[str]) -> Any:
    return WebhookEvent.data["call_id"].as_string().in_(list(ids))


def _event_about_caller(phone: str) -> Any:
    forms = caller_forms(phone)
    return or_(*(WebhookEvent.data[key].as_string().in_(forms) for key in ("caller", "callee", "phone")))


async def _delete_events(session: AsyncSession, organization_id: str, condition: Any) -> int:
    """Delete the organization's webhook events matching ``condition`` (deliveries and attempts cascade)."""
    ids = list(
        await session.scalars(
            select(WebhookEvent.id).where(WebhookEvent.organization_id == organization_id, condition)
        )
    )
    if ids:
        await session.execute(
            delete(WebhookEvent).where(
                WebhookEvent.organization_id == organization_id, WebhookEvent.id.in_(ids)
            )
        )
    return len(ids)


async def _delete_calls(session: AsyncSession, organization_id: str, rows: Sequence[Call]) -> _Deleted:
    deleted = _Deleted()
    if not rows:
        return deleted
    ids = [c.id for c in rows]
    signal_ids = list(
        await session.scalars(
            select(BrainSignal.id).where(
                BrainSignal.organization_id == organization_id, BrainSignal.call_id.in_(ids)
            )
        )
    )
    if signal_ids:
        # the notifications sent about these calls' signals carry their details (attempts cascade)
        await session.execute(
            delete(NotificationDelivery).where(
                NotificationDelivery.organization_id == organization_id,
                NotificationDelivery.signal_id.in_(signal_ids),
            )
        )
    await session.execute(
        delete(BrainSignal).where(
            BrainSignal.organization_id == organization_id, BrainSignal.call_id.in_(ids)
        )
    )
    if events := await _delete_events(session, organization_id, _event_about_calls(ids)):
        deleted.sources[EVENTS] = events
    session_ids = [c.session_id for c in rows if c.session_id]
    for holder in holders():
        count = await holder.delete_for_calls(session, organization_id, session_ids)
        deleted.sources[holder.name] = deleted.sources.get(holder.name, 0) + count
    await session.execute(delete(Call).where(Call.organization_id == organization_id, Call.id.in_(ids)))
    deleted.calls = ids
    deleted.blob_keys = [c.blob_key for c in rows if c.blob_key]
    await session.flush()
    return deleted


async def delete_call(
    session: AsyncSession, blobs: BlobStore, organization_id: str, call_id: str
) -> CallDeletedOut:
    """Delete one call with its signals, its conversation session and (after commit) its recording."""
    call = await get_owned(session, Call, call_id, organization_id, "Call")
    deleted = await _delete_calls(session, organization_id, [call])
    _remove_files_after_commit(session, blobs, deleted.blob_keys)
    return CallDeletedOut(
        id=call_id, recording_deleted=bool(deleted.blob_keys), sessions=deleted.sources.get("sessions", 0)
    )


async def export_call(session: AsyncSession, organization_id: str, call_id: str) -> CallExportOut:
    call = await get_owned(session, Call, call_id, organization_id, "Call")
    full = await calls.to_full(session, call)
    return CallExportOut(exported_at=utcnow(), call=full.model_dump(mode="json"))


def caller_forms(phone: str) -> list[str]:
    """How a number may be stored: as E.164, and without its ``+`` (WhatsApp ids, ``4917612345678``)."""
    return [phone, phone[1:]] if phone.startswith("+") else [phone]


def _caller_calls(organization_id: str, phone: str) -> Any:
    forms = caller_forms(phone)
    return (
        scoped(Call, organization_id)
        .where(or_(Call.caller.in_(forms), Call.callee.in_(forms)))
        .order_by(Call.id)
        .limit(CALLER_LIMIT)
    )


async def export_caller(session: AsyncSession, organization_id: str, phone: str) -> CallerExportOut:
    """Every call with ``phone`` as caller or callee (inbound or outbound), the holders' rows and the
    webhook events about the number or its calls: all of them, read :data:`CALLER_LIMIT` at a time."""
    exported: list[dict[str, Any]] = []
    events: dict[str, WebhookEvent] = {}
    after: str | None = None
    while True:
        statement = _caller_calls(organization_id, phone)
        rows = (await session.scalars(statement if after is None else statement.where(Call.id > after))).all()
        exported += [(await calls.to_full(session, c)).model_dump(mode="json") for c in rows]
        for event in await _all_events(session, organization_id, _event_about_calls([c.id for c in rows])):
            events[event.id] = event
        if len(rows) < CALLER_LIMIT:
            break
        after = rows[-1].id
    for event in await _all_events(session, organization_id, _event_about_caller(phone)):
        events[event.id] = event
    sources = {h.name: await h.export_caller(session, organization_id, phone) for h in holders()}
    sources[EVENTS] = [
        {"id": e.id, "type": e.type, "created_at": e.created_at.isoformat(), "data": e.data}
        for e in sorted(events.values(), key=lambda e: e.id)
    ]
    return CallerExportOut(exported_at=utcnow(), phone_number=phone, calls=exported, sources=sources)


async def _all_events(session: AsyncSession, organization_id: str, condition: Any) -> list[WebhookEvent]:
    """The organization's webhook events matching ``condition``, all of them, by id in pages."""
    found: list[WebhookEvent] = []
    while True:
        statement = scoped(WebhookEvent, organization_id).where(condition)
        if found:
            statement = statement.where(WebhookEvent.id > found[-1].id)
        page = (await session.scalars(statement.order_by(WebhookEvent.id).limit(CALLER_LIMIT))).all()
        found += page
        if len(page) < CALLER_LIMIT:
            return found


async def delete_caller(
    session: AsyncSession, blobs: BlobStore, organization_id: str, phone: str
) -> CallerDeletedOut:
    """Delete every call with ``phone`` (signals, sessions, recordings after commit) and the holders' rows."""
    total = _Deleted()
    while True:
        rows = (await session.scalars(_caller_calls(organization_id, phone))).all()
        batch = await _delete_calls(session, organization_id, rows)
        total.calls += batch.calls
        total.blob_keys += batch.blob_keys
        for name, count in batch.sources.items():
            total.sources[name] = total.sources.get(name, 0) + count
        if len(rows) < CALLER_LIMIT:
            break
    for holder in holders():
        total.sources[holder.name] = total.sources.get(holder.name, 0) + await holder.delete_caller(
            session, organization_id, phone
        )
    if events := await _delete_events(session, organization_id, _event_about_caller(phone)):
        total.sources[EVENTS] = total.sources.get(EVENTS, 0) + events
    await session.flush()
    _remove_files_after_commit(session, blobs, total.blob_keys)
    return CallerDeletedOut(
        phone_number=phone, calls=len(total.calls), recordings=len(total.blob_keys), sources=total.sources
    )


# --- retention -------------------------------------------------------------------------------------

RETENTION_FACTS = RequestFacts(method="JOB", path="/jobs/privacy.retention")


async def organizations_with_retention(session: AsyncSession) -> list[tuple[str, int]]:
    rows = await session.execute(
        select(PrivacySettings.organization_id, PrivacySettings.retention_days).where(
            PrivacySettings.retention_days.is_not(None)
        )
    )
    return [(r.organization_id, int(r.retention_days)) for r in rows]


async def expire_batch(
    session: AsyncSession,
    blobs: BlobStore,
    organization_id: str,
    retention_days: int,
    *,
    now: datetime | None = None,
    actor_type: str = "system",
    actor_id: str = "privacy.retention",
    facts: RequestFacts = RETENTION_FACTS,
) -> RetentionRunOut:
    """Delete up to :data:`RETENTION_BATCH` of the organization's calls that started more than
    ``retention_days`` ago (the index the call history uses) (signals, sessions, recordings after commit), one audit event each; then
    the holders' rows that ended before the cutoff. Answers what went; fewer calls than a batch: done."""
    cutoff = (now or utcnow()) - timedelta(days=retention_days)
    rows = (
        await session.scalars(
            scoped(Call, organization_id)
            .where(Call.started_at < cutoff)
            .order_by(Call.id)
            .limit(RETENTION_BATCH)
            # two workers running the job at once (one timer per API process) take different calls
            .with_for_update(skip_locked=True)
        )
    ).all()
    facts_of = {c.id: (c.started_at, bool(c.blob_key)) for c in rows}
    deleted = await _delete_calls(session, organization_id, rows)
    for call_id in deleted.calls:
        started_at, had_recording = facts_of[call_id]
        record(
            session,
            event_values(
                facts,
                organization_id=organization_id,
                actor_type=actor_type,
                actor_id=actor_id,
                action="privacy.retention_delete_call",
                resource_type="call",
                resource_id=call_id,
                details={
                    "retention_days": retention_days,
                    "started_at": started_at.isoformat(),
                    "recording_deleted": had_recording,
                },
            ),
        )
    expired = [(h.name, await h.expire(session, organization_id, cutoff)) for h in holders()]
    expired.append((EVENTS, await _delete_events(session, organization_id, WebhookEvent.created_at < cutoff)))
    for name, count in expired:
        if count:
            deleted.sources[name] = deleted.sources.get(name, 0) + count
            record(
                session,
                event_values(
                    facts,
                    organization_id=organization_id,
                    actor_type=actor_type,
                    actor_id=actor_id,
                    action=f"privacy.retention_delete_{name}",
                    resource_type=name,
                    resource_id=None,
                    details={"retention_days": retention_days, "count": count, "before": cutoff.isoformat()},
                ),
            )
    await session.flush()
    _remove_files_after_commit(session, blobs, deleted.blob_keys)
    return RetentionRunOut(
        retention_days=retention_days,
        calls=len(deleted.calls),
        recordings=len(deleted.blob_keys),
        sources=deleted.sources,
    )
