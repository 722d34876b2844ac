"""Campaign tables: campaigns, their contacts (one row per number to call) and the do-not-call list."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class Campaign(OrgScopedMixin, TimestampMixin, Base):
    """A batch of outbound calls: which flow talks, from which number, when, how many at once, how
    often the unreachable are tried again and what happens on an answering machine."""

    __tablename__ = "campaigns"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(120), nullable=False)
    flow_id: Mapped[str] = mapped_column(String(40), nullable=False, index=True)
    caller_id: Mapped[str] = mapped_column(String(20), nullable=False)
    # [{"weekdays": [1..7], "start": "09:00", "end": "18:00"}] in the organization's time zone
    windows: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    holidays: Mapped[list[str]] = mapped_column(JSON, nullable=False)  # ISO dates
    concurrency: Mapped[int] = mapped_column(Integer, nullable=False)
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False)
    retry_backoff_minutes: Mapped[int] = mapped_column(Integer, nullable=False)
    retry_on: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    voicemail: Mapped[str] = mapped_column(String(20), nullable=False)
    voicemail_message: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), nullable=False, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # one dialing round at a time per campaign (a re-delivered job finds the lease held and leaves)
    tick_holder: Mapped[str | None] = mapped_column(String(40))
    tick_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # the one scheduled follow-up round that is still wanted (older scheduled rounds find another
    # token here and leave, so there is never more than one round loop per campaign)
    next_round: Mapped[str | None] = mapped_column(String(40))


class CampaignContact(OrgScopedMixin, Base):
    """One number of a campaign, its start values for the flow and where its calling stands.

    ``status`` moves pending → dialing (claimed and committed before the dial) → in_call → a result
    (completed, voicemail, busy, no_answer, failed); a retryable result with ``next_attempt_at`` set is
    claimed again when that time comes. do_not_call and cancelled are final without a call.
    """

    __tablename__ = "campaign_contacts"
    __table_args__ = (
        UniqueConstraint("campaign_id", "phone"),
        Index("ix_campaign_contacts_due", "campaign_id", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(40), nullable=False)
    row_number: Mapped[int] = mapped_column(Integer, nullable=False)
    phone: Mapped[str] = mapped_column(String(20), nullable=False)
    variables: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_result: Mapped[str | None] = mapped_column(String(40))
    last_error: Mapped[str | None] = mapped_column(String(300))
    answered_by: Mapped[str | None] = mapped_column(String(40))
    provider: Mapped[str | None] = mapped_column(String(20))
    call_id: Mapped[str | None] = mapped_column(String(40), index=True)  # the session (and call record)
    provider_call_id: Mapped[str | None] = mapped_column(String(80), index=True)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)


class DoNotCall(OrgScopedMixin, Base):
    """A number the organization must never call from a campaign; checked before every dial."""

    __tablename__ = "campaign_do_not_call"
    __table_args__ = (UniqueConstraint("organization_id", "phone"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    phone: Mapped[str] = mapped_column(String(20), nullable=False)
    note: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
