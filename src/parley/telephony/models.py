"""Telephony tables: phone numbers, SIP trunks, dispatch rules, Twilio call receipts, sync leases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class PhoneNumber(OrgScopedMixin, TimestampMixin, Base):
    """A number (E.164) an organization answers, the provider that carries it and the flow that answers.

    A number belongs to one organization platform-wide: an incoming call finds its organization by it.
    """

    __tablename__ = "telephony_phone_numbers"
    __table_args__ = (UniqueConstraint("number"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    number: Mapped[str] = mapped_column(String(20), nullable=False)
    provider: Mapped[str] = mapped_column(String(20), nullable=False)
    name: Mapped[str | None] = mapped_column(String(120))
    flow_id: Mapped[str | None] = mapped_column(String(40), index=True)
    # The provider's id of the number (Twilio's PN... sid), learned by the sync.
    provider_id: Mapped[str | None] = mapped_column(String(80))
    synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class SipTrunk(OrgScopedMixin, TimestampMixin, Base):
    """A SIP trunk in LiveKit's model: inbound (numbers, allowed addresses and numbers, auth) or outbound
    (address, transport, numbers, auth). The password is sealed to ``telephony_sip_trunks:<id>:auth_password``.
    """

    __tablename__ = "telephony_sip_trunks"
    __table_args__ = (UniqueConstraint("organization_id", "name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(120), nullable=False)
    direction: Mapped[str] = mapped_column(String(10), nullable=False)
    numbers: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    allowed_addresses: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    allowed_numbers: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    address: Mapped[str | None] = mapped_column(String(255))
    transport: Mapped[str | None] = mapped_column(String(10))
    auth_username: Mapped[str | None] = mapped_column(String(200))
    auth_password: Mapped[str | None] = mapped_column(String(2000))
    auth_password_hint: Mapped[str | None] = mapped_column(String(20))
    provider_id: Mapped[str | None] = mapped_column(String(80))
    synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class DispatchRule(OrgScopedMixin, TimestampMixin, Base):
    """A SIP dispatch rule in LiveKit's model: which room an inbound call joins, and which flow answers."""

    __tablename__ = "telephony_dispatch_rules"
    __table_args__ = (UniqueConstraint("organization_id", "name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(120), nullable=False)
    rule_type: Mapped[str] = mapped_column(String(20), nullable=False)
    room_prefix: Mapped[str | None] = mapped_column(String(120))
    room_name: Mapped[str | None] = mapped_column(String(120))
    pin: Mapped[str | None] = mapped_column(String(2000))
    pin_hint: Mapped[str | None] = mapped_column(String(20))
    trunk_ids: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    numbers: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    flow_id: Mapped[str | None] = mapped_column(String(40), index=True)
    provider_id: Mapped[str | None] = mapped_column(String(80))
    synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class TwilioCall(OrgScopedMixin, Base):
    """One Twilio call seen by the voice webhook: a retry with the same CallSid reuses its session."""

    __tablename__ = "telephony_twilio_calls"

    call_sid: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(40), nullable=False)
    direction: Mapped[str] = mapped_column(String(10), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)


class SyncLease(OrgScopedMixin, Base):
    """Who is syncing an organization's telephony right now; expires so a dead process frees it."""

    __tablename__ = "telephony_sync_leases"
    __table_args__ = (UniqueConstraint("organization_id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    holder: Mapped[str] = mapped_column(String(60), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
