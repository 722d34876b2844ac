from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class Flow(OrgScopedMixin, TimestampMixin, Base):
    """An agent. ``definition`` is the editable draft; published versions are frozen copies."""

    __tablename__ = "flows"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # SHA-256 of the canonical draft JSON, to tell whether it changed since the last publish.
    definition_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    # The hash of the latest published version's definition (None before the first publish).
    published_hash: Mapped[str | None] = mapped_column(String(64))
    latest_version: Mapped[int | None] = mapped_column(Integer)
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_by: Mapped[str | None] = mapped_column(String(40))


class FlowVersion(OrgScopedMixin, Base):
    """An immutable, numbered snapshot of a flow's draft. Never updated after it is written."""

    __tablename__ = "flow_versions"
    __table_args__ = (UniqueConstraint("flow_id", "version"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    flow_id: Mapped[str] = mapped_column(
        ForeignKey("flows.id", ondelete="CASCADE"), index=True, nullable=False
    )
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    definition_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    notes: Mapped[str | None] = mapped_column(Text)
    published_by: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
