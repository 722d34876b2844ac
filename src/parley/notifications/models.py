from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class NotificationChannel(OrgScopedMixin, TimestampMixin, Base):
    """Where notifications go: a signed webhook, an SMTP mailbox or a Slack incoming webhook."""

    __tablename__ = "notification_channels"
    __table_args__ = (UniqueConstraint("organization_id", "name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), nullable=False)
    type: Mapped[str] = mapped_column(String(20), nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    # Non-secret settings (webhook url; SMTP host, port, security, username, sender, recipients).
    config: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # name -> AES-GCM ciphertext bound to "notification_channels:<id>:<name>"; never returned.
    secrets: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    # name -> masked hint ("••••abcd"), what responses show.
    secret_hints: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    created_by: Mapped[str | None] = mapped_column(String(40))


class NotificationRule(OrgScopedMixin, TimestampMixin, Base):
    """Brain signals of a type (or any, ``*``) at or above a severity go to one channel."""

    __tablename__ = "notification_rules"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(100))
    signal_type: Mapped[str] = mapped_column(String(60), nullable=False)
    min_severity: Mapped[str] = mapped_column(String(10), nullable=False)
    channel_id: Mapped[str] = mapped_column(
        ForeignKey("notification_channels.id", ondelete="CASCADE"), index=True, nullable=False
    )
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    throttle_minutes: Mapped[int | None] = mapped_column(Integer)
    created_by: Mapped[str | None] = mapped_column(String(40))


class NotificationDelivery(OrgScopedMixin, TimestampMixin, Base):
    """One message to one channel (for a signal and rule, or a test), worked through its attempts.

    pending → sending → delivered | retrying → sending ... | failed. The message is fixed when the
    delivery is created, so every attempt sends the same content under the same id.
    """

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        Index("ix_notification_deliveries_rule_id_signal_type", "rule_id", "signal_type"),
        Index("ix_notification_deliveries_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), nullable=False)
    # No foreign keys: the log outlives the channel, rule and signal it names.
    channel_id: Mapped[str] = mapped_column(String(40), index=True, nullable=False)
    channel_type: Mapped[str] = mapped_column(String(20), nullable=False)
    channel_name: Mapped[str] = mapped_column(String(100), nullable=False)
    rule_id: Mapped[str | None] = mapped_column(String(40))
    signal_id: Mapped[str | None] = mapped_column(String(40), index=True)
    signal_type: Mapped[str | None] = mapped_column(String(60))
    severity: Mapped[str | None] = mapped_column(String(10))
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(1000))


class NotificationAttempt(OrgScopedMixin, Base):
    """The log of one try at sending a delivery: outcome, status code (HTTP or SMTP) and reason."""

    __tablename__ = "notification_attempts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    delivery_id: Mapped[str] = mapped_column(
        ForeignKey("notification_deliveries.id", ondelete="CASCADE"), index=True, nullable=False
    )
    number: Mapped[int] = mapped_column(Integer, nullable=False)
    outcome: Mapped[str] = mapped_column(String(20), nullable=False)
    status_code: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str | None] = mapped_column(String(1000))
    duration_ms: Mapped[float] = mapped_column(Float, nullable=False)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
