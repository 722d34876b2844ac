from __future__ import annotations

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin


class Asset(OrgScopedMixin, TimestampMixin, Base):
    """A file in blob storage (audio prompt, image, document). The bytes live under ``blob_key``."""

    __tablename__ = "assets"
    __table_args__ = (Index("ix_assets_org_kind", "organization_id", "kind", "id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    content_type: Mapped[str] = mapped_column(String(100), nullable=False)
    size: Mapped[int] = mapped_column(Integer, nullable=False)
    sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    # The uploader's file name, kept as metadata only: storage keys never derive from it.
    original_filename: Mapped[str | None] = mapped_column(String(255))
    blob_key: Mapped[str] = mapped_column(String(300), nullable=False)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
