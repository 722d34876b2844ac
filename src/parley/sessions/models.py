from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Integer, Row, String
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class ConversationSession(OrgScopedMixin, TimestampMixin, Base):
    """One live (or ended) conversation. ``state`` is the engine's JSON state, so any process can continue it.

    ``version`` grows with every write and is checked on update (optimistic locking), so two processes
    cannot interleave turns of one session.
    """

    __tablename__ = "conversation_sessions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    flow_id: Mapped[str | None] = mapped_column(String(40), index=True)
    flow_version: Mapped[int | None] = mapped_column(Integer)
    channel: Mapped[str] = mapped_column(String(20), nullable=False)
    # inbound: someone reached the agent; outbound: the platform dialled (POST /api/calls/outbound,
    # campaigns). The call record and the call events carry it.
    direction: Mapped[str] = mapped_column(
        String(10), nullable=False, default="inbound", server_default="inbound"
    )
    voiced: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    # A voice transport has connected to the session: it attaches the recording, voice metrics and
    # speech usage to the call record after the session ends, and call.ended waits for them.
    voice_connected: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=sa_false()
    )
    status: Mapped[str] = mapped_column(String(20), nullable=False, index=True)
    outcome: Mapped[str | None] = mapped_column(String(20))
    end_reason: Mapped[str | None] = mapped_column(String(60))
    caller: Mapped[str | None] = mapped_column(String(40))
    callee: Mapped[str | None] = mapped_column(String(40))
    language: Mapped[str | None] = mapped_column(String(10))
    state: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
    last_activity_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, nullable=False, index=True
    )
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_by: Mapped[str | None] = mapped_column(String(40))

    __mapper_args__ = {"version_id_col": version}


@dataclass(slots=True)
class SessionSnapshot:
    """A session row as a turn read or wrote it, detached from any database session: what a turn answers
    with (an ORM object costs ≈ 0.1 ms to build, twice per turn). Its fields are the table's columns."""

    id: str
    organization_id: str
    flow_id: str | None
    flow_version: int | None
    channel: str
    direction: str
    voiced: bool
    voice_connected: bool
    status: str
    outcome: str | None
    end_reason: str | None
    caller: str | None
    callee: str | None
    language: str | None
    state: dict[str, Any]
    version: int
    started_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime

    def values(self) -> dict[str, Any]:
        """Its columns' values (a shallow dict; ``dataclasses.asdict`` would copy the whole state)."""
        return {name: getattr(self, name) for name in self.__slots__}


# What reading a session's answer needs: the ORM row or a turn's snapshot of it.
SessionFacts = ConversationSession | SessionSnapshot | Row[Any]  # Row: a plain read (kit.tenancy.read_owned)
