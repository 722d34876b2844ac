"""Campaigns: batch outbound calls within calling windows, with retries, voicemail handling and a
do-not-call list.

How a contact is called at most once per attempt, even across a crash: a dialing round (``tasks.py``)
first takes the campaign's round lease and *claims* contacts (status ``dialing``, attempts + 1) in a
transaction that commits before any dial; each dial then runs outside any transaction
(``telephony.service.place_outbound_call`` commits its session before the provider is asked). A
contact left in ``dialing`` by a process that died is never dialed again: once its lease runs out it
becomes ``failed`` with result ``interrupted``. Results arrive by Twilio's status and
answering-machine callbacks (signed), or, for LiveKit calls, from the end of the call's session.

Services never commit; the tasks and the router own the units of work.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from xml.sax.saxutils import escape
from zoneinfo import ZoneInfo

import orjson
import structlog
from sqlalchemy import Select, and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_object_session

from parley.auth.identity import system_context
from parley.auth.models import Organization
from parley.calls.schemas import OutboundCallIn
from parley.campaigns.models import Campaign, CampaignContact, DoNotCall
from parley.campaigns.schemas import (
    CallingWindow,
    CampaignCreate,
    CampaignOut,
    CampaignUpdate,
    ContactCounts,
    ContactOut,
    DoNotCallBulkIn,
    DoNotCallBulkOut,
    DoNotCallIn,
    DoNotCallOut,
    UploadOut,
)
from parley.config import Settings
from parley.flows.models import Flow
from parley.kit.db import Database, after_commit, before_commit, short_read, unit_of_work, utcnow
from parley.kit.errors import Conflict, Forbidden, InvalidFields, NotFound, ParleyError, Unprocessable
from parley.kit.ids import new_id
from parley.kit.jobs import JobQueue
from parley.kit.schemas import check_e164
from parley.kit.tenancy import get_owned, scoped
from parley.providers.catalog import TwilioConfig
from parley.sessions.models import ConversationSession
from parley.telephony.models import PhoneNumber
from parley.telephony.providers import ProviderFailure
from parley.telephony.providers.twilio import signature_valid
from parley.telephony.service import DialExtras, place_outbound_call, provider_config, twilio_for
from parley.webhooks.service import publish_event

log = structlog.get_logger("parley.campaigns")

TICK_JOB = "campaigns.tick"
VOICEMAIL_JOB = "campaigns.voicemail"
STATUS_CALLBACK_PATH = "/api/campaigns/twilio/status"
AMD_CALLBACK_PATH = "/api/campaigns/twilio/amd"

ROUND_LEASE = timedelta(seconds=60)  # a dialing round holds the campaign this long at most
DIAL_LEASE = timedelta(minutes=5)
CALLBACK_GRACE = timedelta(minutes=10)  # a Twilio call's session ended this long ago: its callback is lost
CALL_GIVE_UP = timedelta(
    hours=4
)  # a call under way this long without any result is given up  # a claimed contact that never reached a call is given up after this
MAX_WAIT_SECONDS = 3600.0  # the longest a running campaign sleeps before it looks again
MAX_CLAIMS_PER_ROUND = 5  # dials per round (one after the other); a full round is followed at once
UPLOAD_BATCH = 1000
MAX_ROW_ERRORS = 200
MAX_CONTACT_VARIABLES_BYTES = 8 * 1024

IN_FLIGHT = ("dialing", "in_call")
RETRYABLE = ("busy", "no_answer", "failed")
FINAL_STATUSES = ("completed", "voicemail", "do_not_call", "cancelled")
STATUSES = (
    "pending",
    "dialing",
    "in_call",
    "completed",
    "busy",
    "no_answer",
    "failed",
    "voicemail",
    "do_not_call",
    "cancelled",
)
# Twilio's final CallStatus values → a contact's result
TWILIO_RESULTS = {
    "completed": "completed",
    "busy": "busy",
    "no-answer": "no_answer",
    "failed": "failed",
    "canceled": "failed",
}
MACHINE = ("machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other", "fax")
PHONE_HEADERS = ("phone", "phone_number", "number", "telefon", "telefonnummer", "rufnummer", "msisdn", "to")
_VARIABLE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


# --- campaigns -------------------------------------------------------------------------------------


async def _timezone(session: AsyncSession, organization_id: str) -> str:
    tz = await session.scalar(select(Organization.timezone).where(Organization.id == organization_id))
    return tz or "UTC"


async def counts(session: AsyncSession, campaign_id: str) -> ContactCounts:
    rows = await session.execute(
        select(CampaignContact.status, func.count())
        .where(CampaignContact.campaign_id == campaign_id)
        .group_by(CampaignContact.status)
    )
    found = {status: int(n) for status, n in rows.all()}
    return ContactCounts(total=sum(found.values()), **{k: v for k, v in found.items() if k in STATUSES})


async def to_out(session: AsyncSession, row: Campaign) -> CampaignOut:
    return CampaignOut(
        id=row.id,
        name=row.name,
        flow_id=row.flow_id,
        caller_id=row.caller_id,
        windows=[CallingWindow.model_validate(w) for w in row.windows],
        holidays=[date.fromisoformat(d) for d in row.holidays],
        timezone=await _timezone(session, row.organization_id),
        concurrency=row.concurrency,
        max_attempts=row.max_attempts,
        retry_backoff_minutes=row.retry_backoff_minutes,
        retry_on=list(row.retry_on),
        voicemail=row.voicemail,
        voicemail_message=row.voicemail_message,
        status=row.status,
        contacts=await counts(session, row.id),
        started_at=row.started_at,
        finished_at=row.finished_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def _check_flow(session: AsyncSession, organization_id: str, flow_id: str) -> None:
    flow = await get_owned(session, Flow, flow_id, organization_id, "Flow")
    if flow.latest_version is None:
        raise Conflict(
            f"Flow {flow_id!r} has no published version; publish it first (POST /api/flows/{{flowId}}/publish)."
        )


async def _check_caller_id(session: AsyncSession, organization_id: str, caller_id: str) -> None:
    number = await session.scalar(scoped(PhoneNumber, organization_id).where(PhoneNumber.number == caller_id))
    if number is None:
        raise NotFound(
            f"{caller_id} is not one of this organization's numbers; add it with POST /api/telephony/numbers."
        )


async def create_campaign(session: AsyncSession, organization_id: str, data: CampaignCreate) -> Campaign:
    await _check_flow(session, organization_id, data.flow_id)
    await _check_caller_id(session, organization_id, data.caller_id)
    row = Campaign(
        id=new_id("cmp"),
        organization_id=organization_id,
        name=data.name,
        flow_id=data.flow_id,
        caller_id=data.caller_id,
        windows=[w.model_dump() for w in data.windows],
        holidays=sorted({d.isoformat() for d in data.holidays}),
        concurrency=data.concurrency,
        max_attempts=data.max_attempts,
        retry_backoff_minutes=data.retry_backoff_minutes,
        retry_on=sorted(set(data.retry_on)),
        voicemail=data.voicemail,
        voicemail_message=data.voicemail_message,
        status="draft",
    )
    session.add(row)
    await session.flush()
    return row


def campaigns_query(organization_id: str, status: str | None) -> Select[Campaign]:
    stmt = scoped(Campaign, organization_id)
    if status is not None:
        stmt = stmt.where(Campaign.status == status)
    return stmt


async def get_campaign(session: AsyncSession, organization_id: str, campaign_id: str) -> Campaign:
    return await get_owned(session, Campaign, campaign_id, organization_id, "Campaign")


def _not_finished(row: Campaign, doing: str) -> None:
    if row.status in ("completed", "cancelled"):
        raise Conflict(f"The campaign is {row.status}; it cannot be {doing} any more.")


async def update_campaign(
    session: AsyncSession, organization_id: str, campaign_id: str, data: CampaignUpdate
) -> Campaign:
    row = await get_campaign(session, organization_id, campaign_id)
    _not_finished(row, "changed")
    changes = data.model_dump(exclude_unset=True)
    for name in ("name", "windows", "holidays", "concurrency", "max_attempts", "retry_backoff_minutes"):
        if name in changes and changes[name] is None:
            raise Unprocessable(f"{name} cannot be null; leave it out to keep it.", loc=("body", name))
    if "windows" in changes:
        row.windows = [w.model_dump() for w in data.windows or []]
    if "holidays" in changes:
        row.holidays = sorted({d.isoformat() for d in data.holidays or []})
    if "retry_on" in changes:
        row.retry_on = sorted(set(data.retry_on or []))
    for name in ("name", "concurrency", "max_attempts", "retry_backoff_minutes", "voicemail"):
        if changes.get(name) is not None:
            setattr(row, name, changes[name])
    if "voicemail_message" in changes:
        row.voicemail_message = changes["voicemail_message"]
    if row.voicemail == "leave_message" and not row.voicemail_message:
        raise Unprocessable(
            "voicemail 'leave_message' needs a voicemail_message to speak.", loc=("body", "voicemail_message")
        )
    row.updated_at = utcnow()
    await session.flush()
    return row


def _nudge(session: AsyncSession, jobs: JobQueue, row: Campaign) -> None:
    """Start a dialing round once the change has committed."""
    payload = {"campaign_id": row.id, "organization_id": row.organization_id}

    async def submit() -> None:
        await jobs.submit(TICK_JOB, payload)

    after_commit(session, submit)


async def start_campaign(
    session: AsyncSession, jobs: JobQueue, organization_id: str, campaign_id: str
) -> Campaign:
    row = await get_campaign(session, organization_id, campaign_id)
    if row.status != "draft":
        raise Conflict(f"Only a draft campaign can be started; this one is {row.status} (use resume).")
    if not (await counts(session, row.id)).total:
        raise Conflict("The campaign has no contacts yet; upload some first (POST .../contacts).")
    await _check_flow(session, organization_id, row.flow_id)
    row.status = "running"
    row.started_at = row.updated_at = utcnow()
    await session.flush()
    _nudge(session, jobs, row)
    return row


async def pause_campaign(session: AsyncSession, organization_id: str, campaign_id: str) -> Campaign:
    row = await get_campaign(session, organization_id, campaign_id)
    if row.status != "running":
        raise Conflict(f"Only a running campaign can be paused; this one is {row.status}.")
    row.status = "paused"
    row.updated_at = utcnow()
    await session.flush()
    return row


async def resume_campaign(
    session: AsyncSession, jobs: JobQueue, organization_id: str, campaign_id: str
) -> Campaign:
    row = await get_campaign(session, organization_id, campaign_id)
    if row.status != "paused":
        raise Conflict(f"Only a paused campaign can be resumed; this one is {row.status}.")
    row.status = "running"
    row.updated_at = utcnow()
    await session.flush()
    _nudge(session, jobs, row)
    return row


async def cancel_campaign(session: AsyncSession, organization_id: str, campaign_id: str) -> Campaign:
    """Stop for good: every contact not yet called (or waiting for a retry) becomes ``cancelled``;
    calls already under way finish and report their result."""
    row = await get_campaign(session, organization_id, campaign_id)
    _not_finished(row, "cancelled")
    now = utcnow()
    await session.execute(
        update(CampaignContact)
        .where(
            CampaignContact.campaign_id == row.id,
            or_(
                CampaignContact.status == "pending",
                and_(CampaignContact.status.in_(RETRYABLE), CampaignContact.next_attempt_at.is_not(None)),
            ),
        )
        .values(status="cancelled", next_attempt_at=None, updated_at=now)
    )
    row.status = "cancelled"
    row.finished_at = row.updated_at = now
    await session.flush()
    return row


# --- calling windows -------------------------------------------------------------------------------


def _clock(value: str) -> time | None:
    """``HH:MM`` as a time; ``24:00`` is None (the end of the day)."""
    if value == "24:00":
        return None
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def next_opening(
    windows: Sequence[dict[str, Any]], holidays: Sequence[str], tz: str, now: datetime
) -> datetime | None:
    """``now`` when a window is open, else the moment the next one opens (UTC); None when none opens
    within a year (every weekday a holiday)."""
    zone = ZoneInfo(tz)
    local = now.astimezone(zone)
    skip = set(holidays)
    for offset in range(0, 370):
        day = local.date() + timedelta(days=offset)
        if day.isoformat() in skip:
            continue
        best: datetime | None = None
        for window in windows:
            if day.isoweekday() not in window["weekdays"]:
                continue
            start = datetime.combine(day, _clock(window["start"]) or time(0), zone)
            end_clock = _clock(window["end"])
            end = (
                datetime.combine(day + timedelta(days=1), time(0), zone)
                if end_clock is None
                else datetime.combine(day, end_clock, zone)
            )
            if now >= end.astimezone(UTC):
                continue
            opens = max(start.astimezone(UTC), now)
            best = opens if best is None or opens < best else best
        if best is not None:
            return best
    return None


# --- contacts --------------------------------------------------------------------------------------


@dataclass
class _Upload:
    seen: set[str]
    errors: list[dict[str, Any]] = field(default_factory=list)
    error_count: int = 0
    rows: int = 0

    def fail(self, row: int, phone: str | None, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ROW_ERRORS:
            self.errors.append(
                {
                    "type": "contact_row",
                    "loc": ["body", "row", row],
                    "msg": f"Row {row}: {message}",
                    "input": phone,
                }
            )


def _check_contact(upload: _Upload, row: int, raw_phone: str, variables: dict[str, Any]) -> str | None:
    """The contact's E.164 number, or None with the row's error noted."""
    raw_phone = (raw_phone or "").strip()
    if not raw_phone:
        upload.fail(row, None, "the phone number is empty.")
        return None
    try:
        phone = check_e164(raw_phone)
    except ValueError:
        upload.fail(
            row,
            raw_phone[:40],
            f"{raw_phone[:40]!r} is not a phone number in E.164 form (+, country code, number; e.g. +4930123456).",
        )
        return None
    if phone in upload.seen:
        upload.fail(
            row, phone, f"{phone} is already in this campaign (a duplicate); each number is called once."
        )
        return None
    bad = [name for name in variables if not _VARIABLE.match(name)]
    if bad:
        upload.fail(
            row, phone, f"variable name {bad[0][:40]!r} must start with a letter and use letters, digits, _."
        )
        return None
    if len(orjson.dumps(variables)) > MAX_CONTACT_VARIABLES_BYTES:
        upload.fail(row, phone, f"the variables take more than {MAX_CONTACT_VARIABLES_BYTES // 1024} KiB.")
        return None
    upload.seen.add(phone)
    return phone


def _header_name(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", value.strip()).strip("_").lower()


def _csv_rows(text: io.TextIOWrapper) -> tuple[list[str], int, Any]:
    """The header (as variable names), the phone column and a reader positioned after the header."""
    first = text.readline()
    if not first.strip():
        raise Unprocessable("The CSV is empty; its first line must be a header naming a phone column.")
    delimiter = max((";", ",", "\t"), key=first.count)
    try:
        header = next(csv.reader([first], delimiter=delimiter))
    except csv.Error as exc:  # e.g. a header field over the csv module's field limit
        raise Unprocessable(f"The CSV header cannot be read: {exc}.") from exc
    names = [_header_name(h) for h in header]
    phone_column = next((i for i, n in enumerate(names) if n in PHONE_HEADERS), None)
    if phone_column is None:
        raise Unprocessable(
            f"The CSV header {header[:10]!r} has no phone column; name one of: {', '.join(PHONE_HEADERS)}."
        )
    for i, name in enumerate(names):
        if i != phone_column and not _VARIABLE.match(name):
            raise Unprocessable(
                f"The CSV column {header[i][:40]!r} is not usable as a variable name; start it with a letter."
            )
    if len(set(names)) != len(names):
        raise Unprocessable("The CSV header names a column twice.")
    return names, phone_column, csv.reader(text, delimiter=delimiter)


def _iter_csv(spool: Any, upload: _Upload) -> Any:
    spool.seek(0)
    text = io.TextIOWrapper(spool, encoding="utf-8-sig", newline="", errors="strict")
    try:
        yield from _read_csv(text, upload)
    except UnicodeDecodeError as exc:
        raise Unprocessable("The CSV is not UTF-8 text; save it as CSV UTF-8.") from exc
    finally:
        text.detach()  # the spool stays open for the second pass


def _read_csv(text: io.TextIOWrapper, upload: _Upload) -> Any:
    names, phone_column, reader = _csv_rows(text)
    try:
        for number, fields in enumerate(reader, start=1):
            if not any(f.strip() for f in fields):
                continue
            upload.rows += 1
            if len(fields) != len(names):
                upload.fail(number, None, f"it has {len(fields)} fields, the header has {len(names)}.")
                continue
            variables = {
                names[i]: value for i, value in enumerate(fields) if i != phone_column and value != ""
            }
            phone = _check_contact(upload, number, fields[phone_column], variables)
            if phone is not None:
                yield number, phone, variables
    except csv.Error as exc:
        raise Unprocessable(f"The CSV cannot be read near line {reader.line_num}: {exc}.") from exc


def _iter_json(spool: Any, upload: _Upload) -> Any:
    spool.seek(0)
    try:
        items = orjson.loads(spool.read())
    except orjson.JSONDecodeError as exc:
        raise Unprocessable(f"The body is not valid JSON: {exc.msg}.") from exc
    if isinstance(items, dict) and isinstance(items.get("contacts"), list):
        items = items["contacts"]
    if not isinstance(items, list):
        raise Unprocessable('Send a JSON list of contacts: [{"phone": "+49...", "variables": {...}}].')
    for number, item in enumerate(items, start=1):
        upload.rows += 1
        if not isinstance(item, dict) or not isinstance(item.get("phone"), str):
            upload.fail(number, None, 'a contact is an object with a "phone" string.')
            continue
        variables = item.get("variables") or {}
        extra = set(item) - {"phone", "variables"}
        if not isinstance(variables, dict) or extra:
            upload.fail(number, item["phone"][:40], 'a contact has only "phone" and a "variables" object.')
            continue
        if any(isinstance(v, dict | list) for v in variables.values()):
            upload.fail(number, item["phone"][:40], "variable values are text, numbers, true/false or null.")
            continue
        phone = _check_contact(upload, number, item["phone"], variables)
        if phone is not None:
            yield number, phone, variables


async def _insert(session: AsyncSession, model: type[Any], rows: list[dict[str, Any]], clash: str) -> None:
    """Insert ``rows``; a unique number another request added since the check is a 409 (``clash``),
    not a 500 (the unit of work rolls the whole request back)."""
    try:
        await session.execute(insert(model), rows)
    except IntegrityError as exc:
        raise Conflict(clash) from exc


_UPLOAD_CLASH = (
    "Another upload added some of these numbers to the campaign meanwhile; nothing of this upload was "
    "added. Send it again to see which rows are duplicates."
)


async def upload_contacts(
    session: AsyncSession,
    organization_id: str,
    campaign_id: str,
    chunks: AsyncIterator[bytes],
    kind: str,
) -> UploadOut:
    """Add contacts from a CSV or JSON body: all or nothing. The body goes to a spooled file (memory
    stays bounded), is checked completely (422 listing each bad row), then inserted in batches."""
    async with short_read(session) as reader:
        row = await get_campaign(reader, organization_id, campaign_id)
        _not_finished(row, "given contacts")
        existing = set(
            (
                await reader.scalars(
                    select(CampaignContact.phone).where(CampaignContact.campaign_id == row.id)
                )
            ).all()
        )
    offset = len(existing)
    with tempfile.SpooledTemporaryFile(max_size=1024 * 1024) as spool:
        async for chunk in chunks:
            spool.write(chunk)
        if kind == "csv":
            head = spool.tell()
            if head == 0:
                raise Unprocessable(
                    "The CSV is empty; its first line must be a header naming a phone column."
                )
        iterate = _iter_csv if kind == "csv" else _iter_json
        check = _Upload(seen=set(existing))
        for _ in iterate(spool, check):
            pass
        if check.error_count:
            if check.error_count > len(check.errors):
                check.errors.append(
                    {
                        "type": "contact_rows",
                        "loc": ["body"],
                        "msg": f"{check.error_count} rows were refused in all; the first {MAX_ROW_ERRORS} are listed. "
                        "Nothing was added.",
                        "input": None,
                    }
                )
            raise InvalidFields(check.errors)
        if check.rows == 0:
            raise Unprocessable("The upload holds no contacts.")
        now = utcnow()
        batch: list[dict[str, Any]] = []
        accepted = 0
        for number, phone, variables in iterate(spool, _Upload(seen=set(existing))):
            batch.append(
                {
                    "id": new_id("cc"),
                    "organization_id": organization_id,
                    "campaign_id": campaign_id,
                    "row_number": offset + number,
                    "phone": phone,
                    "variables": variables,
                    "status": "pending",
                    "attempts": 0,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            if len(batch) >= UPLOAD_BATCH:
                await _insert(session, CampaignContact, batch, _UPLOAD_CLASH)
                accepted += len(batch)
                batch = []
        if batch:
            await _insert(session, CampaignContact, batch, _UPLOAD_CLASH)
            accepted += len(batch)
    return UploadOut(accepted=accepted, total_contacts=offset + accepted)


def contact_out(row: CampaignContact) -> ContactOut:
    return ContactOut.model_validate(row, from_attributes=True)


def contacts_query(
    organization_id: str, campaign_id: str, status: str | None, phone: str | None
) -> Select[CampaignContact]:
    stmt = scoped(CampaignContact, organization_id).where(CampaignContact.campaign_id == campaign_id)
    if status is not None:
        stmt = stmt.where(CampaignContact.status == status)
    if phone is not None:
        stmt = stmt.where(CampaignContact.phone == phone)
    return stmt


EXPORT_COLUMNS = (
    "row_number",
    "phone",
    "status",
    "attempts",
    "last_result",
    "answered_by",
    "call_id",
    "provider_call_id",
    "last_attempt_at",
    "next_attempt_at",
    "last_error",
    "variables",
)


def _csv_line(values: Sequence[Any]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(values)
    return out.getvalue().encode()


async def export_csv(database: Database, organization_id: str, campaign_id: str) -> AsyncIterator[bytes]:
    """The campaign's contacts and results as CSV, read in batches (each its own short read)."""
    yield codecs.BOM_UTF8 + _csv_line(EXPORT_COLUMNS)
    after = ""
    while True:
        async with unit_of_work(database, write=False) as reader:
            rows = (
                await reader.scalars(
                    contacts_query(organization_id, campaign_id, None, None)
                    .where(CampaignContact.id > after)
                    .order_by(CampaignContact.id)
                    .limit(UPLOAD_BATCH)
                )
            ).all()
        if not rows:
            return
        chunk = io.StringIO()
        writer = csv.writer(chunk, lineterminator="\r\n")
        for c in rows:
            writer.writerow(
                [
                    c.row_number,
                    c.phone,
                    c.status,
                    c.attempts,
                    c.last_result or "",
                    c.answered_by or "",
                    c.call_id or "",
                    c.provider_call_id or "",
                    c.last_attempt_at.isoformat() if c.last_attempt_at else "",
                    c.next_attempt_at.isoformat() if c.next_attempt_at else "",
                    c.last_error or "",
                    orjson.dumps(c.variables).decode() if c.variables else "",
                ]
            )
        yield chunk.getvalue().encode()
        after = rows[-1].id


# --- do-not-call -----------------------------------------------------------------------------------


def dnc_out(row: DoNotCall) -> DoNotCallOut:
    return DoNotCallOut.model_validate(row, from_attributes=True)


async def add_do_not_call(session: AsyncSession, organization_id: str, data: DoNotCallIn) -> DoNotCall:
    existing = await session.scalar(scoped(DoNotCall, organization_id).where(DoNotCall.phone == data.phone))
    if existing is not None:
        raise Conflict(f"{data.phone} is already on the do-not-call list.")
    row = DoNotCall(id=new_id("dnc"), organization_id=organization_id, phone=data.phone, note=data.note)
    session.add(row)
    try:
        await session.flush()
    except IntegrityError as exc:  # added by another request since the check
        raise Conflict(f"{data.phone} is already on the do-not-call list.") from exc
    return row


async def add_do_not_call_bulk(
    session: AsyncSession, organization_id: str, data: DoNotCallBulkIn
) -> DoNotCallBulkOut:
    phones: list[str] = []
    errors: list[dict[str, Any]] = []
    for i, raw in enumerate(data.phones):
        try:
            phones.append(check_e164(raw))
        except ValueError:
            errors.append(
                {
                    "type": "value_error",
                    "loc": ["body", "phones", i],
                    "msg": f"{raw[:40]!r} is not a phone number in E.164 form (e.g. +4930123456).",
                    "input": raw[:40],
                }
            )
    if errors:
        raise InvalidFields(errors[:MAX_ROW_ERRORS])
    wanted = set(phones)
    listed = set(
        (
            await session.scalars(
                scoped(DoNotCall, organization_id)
                .where(DoNotCall.phone.in_(wanted))
                .with_only_columns(DoNotCall.phone)
            )
        ).all()
    )
    fresh = sorted(wanted - listed)
    now = utcnow()
    for start in range(0, len(fresh), UPLOAD_BATCH):
        await _insert(
            session,
            DoNotCall,
            [
                {
                    "id": new_id("dnc"),
                    "organization_id": organization_id,
                    "phone": p,
                    "note": data.note,
                    "created_at": now,
                }
                for p in fresh[start : start + UPLOAD_BATCH]
            ],
            "Another request added some of these numbers to the do-not-call list meanwhile; nothing was "
            "added. Send the list again (numbers already listed are counted, not refused).",
        )
    return DoNotCallBulkOut(added=len(fresh), already_listed=len(listed))


def do_not_call_query(organization_id: str, phone: str | None) -> Select[DoNotCall]:
    stmt = scoped(DoNotCall, organization_id)
    if phone is not None:
        stmt = stmt.where(DoNotCall.phone == phone)
    return stmt


async def remove_do_not_call(session: AsyncSession, organization_id: str, entry_id: str) -> DoNotCall:
    row = await get_owned(session, DoNotCall, entry_id, organization_id, "Do-not-call entry")
    await session.delete(row)
    await session.flush()
    return row


async def _blocked(session: AsyncSession, organization_id: str, phones: Sequence[str]) -> set[str]:
    if not phones:
        return set()
    return set(
        (
            await session.scalars(
                scoped(DoNotCall, organization_id)
                .where(DoNotCall.phone.in_(list(phones)))
                .with_only_columns(DoNotCall.phone)
            )
        ).all()
    )


# --- dialing rounds --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A contact claimed for one dial (committed as ``dialing`` before the dial)."""

    contact_id: str
    organization_id: str
    campaign_id: str
    campaign_name: str
    flow_id: str
    caller_id: str
    phone: str
    variables: dict[str, Any]
    amd: bool


@dataclass
class Round:
    claims: list[Claim] = field(default_factory=list)
    wait: float | None = None  # seconds until the next round; None: the campaign needs none


def _contact_completed(campaign: Campaign, contact: CampaignContact) -> None:
    """A contact reached its final state (no more calls): the one place the outcome is handed on.

    The ``campaign.contact.completed`` call event is published in the same unit of work, just before it
    commits, so a subscriber hears of exactly the results that were stored (docs/campaigns.md)."""
    log.info(
        "campaign_contact_completed",
        campaign_id=campaign.id,
        organization_id=campaign.organization_id,
        contact_id=contact.id,
        status=contact.status,
        attempts=contact.attempts,
        call_id=contact.call_id,
    )
    session = async_object_session(contact)
    if session is None:  # a contact outside any unit of work has nothing to commit, so nothing to tell
        return
    data = {
        "campaign_id": campaign.id,
        "campaign_name": campaign.name,
        "contact_id": contact.id,
        "phone": contact.phone,
        "status": contact.status,
        "attempts": contact.attempts,
        "answered_by": contact.answered_by,
        "call_id": contact.call_id,
        "last_error": contact.last_error,
        "variables": contact.variables,
        "completed_at": (contact.updated_at or utcnow()).isoformat(),
    }

    async def publish(unit: AsyncSession) -> None:
        await publish_event(unit, campaign.organization_id, "campaign.contact.completed", data)

    before_commit(session, publish)


def _conclude(
    campaign: Campaign,
    contact: CampaignContact,
    result: str,
    now: datetime,
    error: str | None = None,
    *,
    final: bool = False,
) -> None:
    """Record a call's result: schedule a retry (with backoff) or close the contact."""
    contact.status = result
    contact.lease_until = None
    contact.updated_at = now
    if error is not None:
        contact.last_error = error[:300]
    retry = (
        not final
        and result in campaign.retry_on
        and contact.attempts < campaign.max_attempts
        and campaign.status not in ("cancelled", "completed")
    )
    if retry:
        contact.next_attempt_at = now + timedelta(minutes=campaign.retry_backoff_minutes * contact.attempts)
    else:
        contact.next_attempt_at = None
        _contact_completed(campaign, contact)


async def lease_round(
    session: AsyncSession, campaign_id: str, holder: str, now: datetime, scheduled: str | None = None
) -> Campaign | None:
    """Take the campaign's round lease (only a running campaign, only when no live round holds it).
    ``scheduled``: the token of a scheduled follow-up round, which runs only while it is the wanted one."""
    stmt = update(Campaign).where(
        Campaign.id == campaign_id,
        Campaign.status == "running",
        or_(Campaign.tick_until.is_(None), Campaign.tick_until < now),
    )
    if scheduled is not None:
        stmt = stmt.where(Campaign.next_round == scheduled)
    result = await session.execute(
        stmt.values(tick_holder=holder, tick_until=now + ROUND_LEASE).execution_options(
            synchronize_session=False
        )
    )
    if getattr(result, "rowcount", 0) != 1:
        return None
    return await session.get(Campaign, campaign_id, populate_existing=True)


async def lease_left(session: AsyncSession, campaign_id: str, now: datetime) -> float | None:
    """Seconds until another round's lease on a running campaign runs out (None: not running)."""
    row = await session.get(Campaign, campaign_id, populate_existing=True)
    if row is None or row.status != "running":
        return None
    if row.tick_until is None:
        return 0.0
    return max(0.0, (row.tick_until - now).total_seconds())


async def release_round(session: AsyncSession, campaign_id: str, holder: str, next_round: str | None) -> None:
    """Give the round lease back and name the follow-up round that is wanted (None: no follow-up)."""
    await session.execute(
        update(Campaign)
        .where(Campaign.id == campaign_id, Campaign.tick_holder == holder)
        .values(tick_holder=None, tick_until=None, next_round=next_round)
        .execution_options(synchronize_session=False)
    )


async def _expire_stale(session: AsyncSession, campaign: Campaign, now: datetime) -> None:
    stale = (
        await session.scalars(
            select(CampaignContact).where(
                CampaignContact.campaign_id == campaign.id,
                CampaignContact.status == "dialing",
                CampaignContact.lease_until < now,
            )
        )
    ).all()
    for contact in stale:
        contact.last_result = "interrupted"
        # Unknown whether the provider placed the call: not called again, so nobody is called twice.
        _conclude(
            campaign,
            contact,
            "failed",
            now,
            "The dialing process stopped before the call was confirmed; not dialed again so nobody is called twice.",
            final=True,
        )


async def _reconcile_ended(session: AsyncSession, campaign: Campaign, now: datetime) -> None:
    """Results that arrive without a callback: a LiveKit call's result is the end of its session (LiveKit
    reports no call status); a Twilio call whose session ended ``CALLBACK_GRACE`` ago without a status
    callback (lost) is taken as completed; a call with no result at all after ``CALL_GIVE_UP`` is
    ``failed`` / ``no_result`` and not called again."""
    rows = (
        await session.execute(
            select(CampaignContact, ConversationSession.outcome)
            .join(ConversationSession, ConversationSession.id == CampaignContact.call_id)
            .where(
                CampaignContact.campaign_id == campaign.id,
                CampaignContact.status == "in_call",
                ConversationSession.status == "ended",
                or_(
                    CampaignContact.provider != "twilio",
                    ConversationSession.ended_at < now - CALLBACK_GRACE,
                ),
            )
        )
    ).all()
    for contact, outcome in rows:
        contact.last_result = f"session_{outcome or 'ended'}"[:40]
        _conclude(campaign, contact, "voicemail" if contact.answered_by in MACHINE else "completed", now)
    silent = (
        await session.scalars(
            select(CampaignContact).where(
                CampaignContact.campaign_id == campaign.id,
                CampaignContact.status == "in_call",
                CampaignContact.last_attempt_at < now - CALL_GIVE_UP,
            )
        )
    ).all()
    for contact in silent:
        contact.last_result = "no_result"
        _conclude(campaign, contact, "failed", now, "No result arrived for this call.", final=True)


def _due(campaign: Campaign, now: datetime) -> Any:
    return and_(
        CampaignContact.campaign_id == campaign.id,
        or_(
            CampaignContact.status == "pending",
            and_(
                CampaignContact.status.in_(RETRYABLE),
                CampaignContact.next_attempt_at.is_not(None),
                CampaignContact.next_attempt_at <= now,
            ),
        ),
    )


async def plan_round(session: AsyncSession, settings: Settings, campaign: Campaign, now: datetime) -> Round:
    """One dialing round's decisions, written to ``session`` (the caller commits before dialing)."""
    await _expire_stale(session, campaign, now)
    await _reconcile_ended(session, campaign, now)
    await session.flush()
    tz = await _timezone(session, campaign.organization_id)
    opening = next_opening(campaign.windows, campaign.holidays, tz, now)
    waiting_retry = await session.scalar(
        select(func.min(CampaignContact.next_attempt_at)).where(
            CampaignContact.campaign_id == campaign.id,
            CampaignContact.status.in_(RETRYABLE),
            CampaignContact.next_attempt_at.is_not(None),
        )
    )
    pending = await session.scalar(
        select(func.count()).where(
            CampaignContact.campaign_id == campaign.id, CampaignContact.status == "pending"
        )
    )
    in_flight = int(
        await session.scalar(
            select(func.count()).where(
                CampaignContact.campaign_id == campaign.id, CampaignContact.status.in_(IN_FLIGHT)
            )
        )
        or 0
    )
    if not pending and waiting_retry is None and not in_flight:
        campaign.status = "completed"
        campaign.finished_at = campaign.updated_at = now
        await session.flush()
        log.info("campaign_completed", campaign_id=campaign.id)
        return Round()
    plan = Round(wait=settings.campaign_poll_seconds)
    if opening is None or opening > now:
        # Outside every window: nobody is called; look again when the next window opens.
        wait = MAX_WAIT_SECONDS if opening is None else (opening - now).total_seconds()
        plan.wait = min(max(wait, 1.0), MAX_WAIT_SECONDS)
        return plan
    slots = min(campaign.concurrency - in_flight, MAX_CLAIMS_PER_ROUND)
    while slots > 0:
        due = (
            await session.scalars(
                select(CampaignContact)
                .where(_due(campaign, now))
                .order_by(CampaignContact.next_attempt_at.is_not(None), CampaignContact.row_number)
                .limit(slots)
            )
        ).all()
        if not due:
            break
        blocked = await _blocked(session, campaign.organization_id, [c.phone for c in due])
        for contact in due:
            if contact.phone in blocked:
                contact.last_result = "do_not_call"
                _conclude(campaign, contact, "do_not_call", now, final=True)
                continue
            contact.status = "dialing"
            contact.attempts += 1
            contact.last_attempt_at = contact.updated_at = now
            contact.lease_until = now + DIAL_LEASE
            contact.next_attempt_at = None
            contact.answered_by = None
            contact.call_id = contact.provider_call_id = None
            plan.claims.append(
                Claim(
                    contact_id=contact.id,
                    organization_id=campaign.organization_id,
                    campaign_id=campaign.id,
                    campaign_name=campaign.name,
                    flow_id=campaign.flow_id,
                    caller_id=campaign.caller_id,
                    phone=contact.phone,
                    variables=dict(contact.variables or {}),
                    amd=True,
                )
            )
            slots -= 1
        await session.flush()
    if len(plan.claims) == MAX_CLAIMS_PER_ROUND and in_flight + len(plan.claims) < campaign.concurrency:
        plan.wait = 0.0  # more may start now: the next round follows at once
    elif not plan.claims and not in_flight and waiting_retry is not None:
        plan.wait = min(max((waiting_retry - now).total_seconds(), 1.0), MAX_WAIT_SECONDS)
    return plan


def callback_url(settings: Settings, path: str, contact_id: str) -> str:
    return f"{settings.base_url.rstrip('/')}{path}?contact={contact_id}"


async def dial(session: AsyncSession, settings: Settings, claim: Claim) -> str:
    """Place one claimed call (no transaction is held while the provider answers) and record the
    outcome of the attempt; answers the contact's new status."""
    async with short_read(session) as reader:
        listed = await _blocked(reader, claim.organization_id, [claim.phone])
    context = system_context(claim.organization_id, actor="campaign", name=claim.campaign_name[:60])
    result = None
    error: ParleyError | None = None
    if not listed:
        try:
            result = await place_outbound_call(
                session,
                settings,
                context,
                OutboundCallIn(flow_id=claim.flow_id, to=claim.phone, from_number=claim.caller_id),
                extras=DialExtras(
                    variables=claim.variables,
                    status_callback=callback_url(settings, STATUS_CALLBACK_PATH, claim.contact_id),
                    amd_callback=callback_url(settings, AMD_CALLBACK_PATH, claim.contact_id),
                ),
            )
        except ParleyError as exc:
            error = exc
    contact = await session.get(CampaignContact, claim.contact_id, populate_existing=True)
    campaign = await session.get(Campaign, claim.campaign_id, populate_existing=True)
    if contact is None or campaign is None:
        return "gone"
    if contact.status != "dialing":  # a status callback was faster than this write: it decided
        return contact.status
    now = utcnow()
    if listed:
        contact.last_result = "do_not_call"
        contact.attempts = max(contact.attempts - 1, 0)  # nobody was called
        _conclude(campaign, contact, "do_not_call", now, final=True)
    elif result is None:
        contact.last_result = "dial_refused"
        _conclude(campaign, contact, "failed", now, error.detail if error else "The call was not placed.")
    else:
        contact.status = "in_call"
        contact.call_id = result.session_id
        contact.provider = result.provider
        contact.provider_call_id = result.provider_call_id
        contact.lease_until = None
        contact.updated_at = now
    await session.flush()
    return contact.status


# --- Twilio callbacks ------------------------------------------------------------------------------


def _first(params: list[tuple[str, str]], name: str) -> str:
    return next((value for key, value in params if key == name), "")


async def twilio_callback(
    session: AsyncSession,
    settings: Settings,
    jobs: JobQueue,
    path: str,
    contact_id: str,
    params: list[tuple[str, str]],
    signature: str | None,
    query: str,
) -> None:
    """A signed Twilio status (``CallStatus``) or answering-machine (``AnsweredBy``) callback for one
    campaign call. Forged or unsigned: 403. A repeat, or one about an earlier attempt, changes nothing."""
    if not signature:
        raise Forbidden("The request carries no X-Twilio-Signature header.")
    contact = await session.get(CampaignContact, contact_id)
    if contact is None:
        raise Forbidden("The request is not signed by a Twilio account configured in Parley.")
    config = await provider_config(session, settings, contact.organization_id, "twilio")
    url = settings.base_url.rstrip("/") + path + (f"?{query}" if query else "")
    if not isinstance(config, TwilioConfig) or not signature_valid(
        config.auth_token.get_secret_value(), url, params, signature
    ):
        raise Forbidden("The X-Twilio-Signature does not match the request.")
    campaign = await session.get(Campaign, contact.campaign_id)
    assert campaign is not None
    call_sid = _first(params, "CallSid")
    if contact.status not in IN_FLIGHT:
        return
    if contact.provider_call_id and call_sid != contact.provider_call_id:
        return  # about another attempt's call
    contact.provider_call_id = contact.provider_call_id or call_sid[:80] or None
    now = utcnow()
    if path == AMD_CALLBACK_PATH:
        answered_by = _first(params, "AnsweredBy")[:40]
        contact.answered_by = answered_by or None
        contact.updated_at = now
        if answered_by in MACHINE:
            payload = {"contact_id": contact.id, "call_sid": call_sid}

            async def submit() -> None:
                await jobs.submit(VOICEMAIL_JOB, payload)

            after_commit(session, submit)
        await session.flush()
        return
    status = _first(params, "CallStatus")
    result = TWILIO_RESULTS.get(status)
    if result is None:  # ringing, in-progress: not the end yet
        return
    if result == "completed" and contact.answered_by in MACHINE:
        result = "voicemail"
    contact.last_result = status[:40]
    _conclude(campaign, contact, result, now)
    await session.flush()
    if campaign.status == "running":
        _nudge(session, jobs, campaign)


def voicemail_twiml(message: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Say>{escape(message)}</Say><Hangup/></Response>'


async def handle_machine(session: AsyncSession, settings: Settings, contact_id: str, call_sid: str) -> None:
    """An answering machine took the call: speak the campaign's message, or hang up. The look-ups run
    in a short read; Twilio is asked with no transaction held."""
    async with short_read(session) as reader:
        contact = await reader.get(CampaignContact, contact_id)
        if contact is None or contact.status != "in_call" or contact.provider_call_id != call_sid:
            return
        campaign = await reader.get(Campaign, contact.campaign_id)
        twilio = await twilio_for(reader, settings, contact.organization_id)
    if campaign is None or twilio is None:
        return
    try:
        if campaign.voicemail == "leave_message" and campaign.voicemail_message:
            await twilio.update_call(call_sid, twiml=voicemail_twiml(campaign.voicemail_message))
        else:
            await twilio.end_call(call_sid)
    except ProviderFailure as exc:  # e.g. the call has ended meanwhile (Twilio's 21220)
        log.info("campaign_voicemail_not_applied", contact_id=contact_id, reason=exc.reason)


async def running_campaigns(session: AsyncSession) -> list[dict[str, Any]]:
    """Recovery: every running campaign gets a dialing round when a worker starts."""
    rows = (
        await session.execute(
            select(Campaign.id, Campaign.organization_id).where(Campaign.status == "running")
        )
    ).all()
    return [{"campaign_id": cid, "organization_id": org} for cid, org in rows]
