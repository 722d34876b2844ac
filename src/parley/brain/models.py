from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime


class BrainSignal(OrgScopedMixin, TimestampMixin, Base):
    """Something a call showed that someone should look at; worked through open → acknowledged → resolved."""

    __tablename__ = "brain_signals"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    call_id: Mapped[str | None] = mapped_column(ForeignKey("calls.id", ondelete="CASCADE"), index=True)
    flow_id: Mapped[str | None] = mapped_column(String(40))
    type: Mapped[str] = mapped_column(String(60), index=True, nullable=False)
    severity: Mapped[str] = mapped_column(String(10), nullable=False)
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    source: Mapped[str] = mapped_column(String(10), nullable=False)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    note: Mapped[str | None] = mapped_column(String(2000))
    acknowledged_by: Mapped[str | None] = mapped_column(String(40))
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    resolved_by: Mapped[str | None] = mapped_column(String(40))
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
