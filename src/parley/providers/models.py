from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin


class ProviderConfig(OrgScopedMixin, TimestampMixin, Base):
    """One organization's settings for one provider of the catalog.

    ``settings`` holds the plain fields; ``secrets`` maps each secret field to its ciphertext, bound
    to ``provider_configs:<id>:<field>`` so it cannot be moved to another row or field.
    """

    __tablename__ = "provider_configs"
    __table_args__ = (UniqueConstraint("organization_id", "provider_key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    provider_key: Mapped[str] = mapped_column(String(40), nullable=False)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    secrets: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    updated_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
