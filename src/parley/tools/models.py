from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin


class Tool(OrgScopedMixin, TimestampMixin, Base):
    """A callable action of an organization. Flows refer to tools by name or id."""

    __tablename__ = "tools"
    __table_args__ = (UniqueConstraint("organization_id", "name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    type: Mapped[str] = mapped_column(String(32), nullable=False)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # name -> AES-GCM ciphertext bound to "tools:<id>:secrets.<name>"; never returned.
    secrets: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    # name -> masked hint ("••••abcd"), what responses show.
    secret_hints: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    created_by: Mapped[str | None] = mapped_column(String(40))
