"""Channel tables: routes (which flow answers an address), WhatsApp accounts and their message log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class ChannelRoute(OrgScopedMixin, TimestampMixin, Base):
    """Which flow answers one address of one channel kind, optionally only within office hours.

    ``address`` is an E.164 number (phone), a WhatsApp account id (whatsapp) or a widget key (web).
    Deleting the flow deletes the route; deleting the fallback flow clears it.
    """

    __tablename__ = "channel_routes"
    __table_args__ = (UniqueConstraint("organization_id", "channel_kind", "address"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    channel_kind: Mapped[str] = mapped_column(String(20), nullable=False)
    address: Mapped[str] = mapped_column(String(80), nullable=False)
    flow_id: Mapped[str] = mapped_column(
        ForeignKey("flows.id", ondelete="CASCADE"), index=True, nullable=False
    )
    fallback_flow_id: Mapped[str | None] = mapped_column(
        ForeignKey("flows.id", ondelete="SET NULL"), index=True
    )
    office_hours: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    created_by: Mapped[str | None] = mapped_column(String(40))


class WhatsAppAccount(OrgScopedMixin, TimestampMixin, Base):
    """A WhatsApp Business phone number connected through the Cloud API.

    ``secrets`` maps access_token, app_secret and verify_token to ciphertexts bound to
    ``whatsapp_accounts:<id>:<field>``; ``verify_token_sha256`` finds the account when Meta verifies
    the webhook. ``phone_number_id`` is unique platform-wide: the webhook routes by it.
    """

    __tablename__ = "whatsapp_accounts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    phone_number_id: Mapped[str] = mapped_column(String(40), unique=True, nullable=False)
    waba_id: Mapped[str] = mapped_column(String(40), nullable=False)
    display_phone_number: Mapped[str] = mapped_column(String(40), nullable=False)
    secrets: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    verify_token_sha256: Mapped[str] = mapped_column(String(64), index=True, nullable=False)
    unsupported_reply: Mapped[str | None] = mapped_column(String(1000))
    created_by: Mapped[str | None] = mapped_column(String(40))


class WhatsAppMessage(OrgScopedMixin, Base):
    """One message in or out of a WhatsApp account: the dedupe key, the work queue and the log.

    Inbound: ``received`` → ``processed`` | ``ignored`` | ``failed``; unique per account and ``wamid``
    so a replayed webhook is processed once. Outbound: ``pending`` → ``sent`` | ``failed``; they belong
    to the inbound message (``reply_to_id``) whose turn produced them and are sent in ``position`` order.
    """

    __tablename__ = "whatsapp_messages"
    __table_args__ = (
        UniqueConstraint("account_id", "wamid"),
        Index("ix_whatsapp_messages_account_id_wa_id", "account_id", "wa_id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(
        ForeignKey("whatsapp_accounts.id", ondelete="CASCADE"), nullable=False
    )
    direction: Mapped[str] = mapped_column(String(10), nullable=False)
    wamid: Mapped[str | None] = mapped_column(String(200))
    wa_id: Mapped[str] = mapped_column(String(40), nullable=False)
    type: Mapped[str] = mapped_column(String(20), nullable=False)
    text: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), index=True, nullable=False)
    session_id: Mapped[str | None] = mapped_column(String(40))
    reply_to_id: Mapped[str | None] = mapped_column(String(40), index=True)
    position: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
    processed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
