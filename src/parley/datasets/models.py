"""Datasets, their tags (a table of their own, so lists filter by tag on both engines) and items."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin


class Dataset(OrgScopedMixin, TimestampMixin, Base):
    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("organization_id", "name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(40))

    tag_rows: Mapped[list[DatasetTag]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="DatasetTag.tag", passive_deletes=True
    )

    @property
    def tags(self) -> list[str]:
        return [row.tag for row in self.tag_rows]


class DatasetTag(Base):
    __tablename__ = "dataset_tags"

    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(60), primary_key=True, index=True)


class DatasetItem(OrgScopedMixin, TimestampMixin, Base):
    __tablename__ = "dataset_items"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), index=True, nullable=False
    )
    data: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
