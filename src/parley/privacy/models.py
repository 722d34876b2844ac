from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, TimestampMixin


class PrivacySettings(TimestampMixin, Base):
    """An organization's privacy settings; no row means the defaults (nothing redacted, kept forever).

    ``redaction_kinds`` lists the built-in kinds (``phone``, ``email``, ``iban``, ``card``);
    ``replacements`` maps a kind to its replacement text; ``custom_patterns`` holds
    ``{"name", "pattern", "replacement"}`` objects; ``recording_notice`` maps a language (``de``,
    ``en``, or ``default``) to the sentence spoken before the flow's greeting.
    """

    __tablename__ = "privacy_settings"

    organization_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    redaction_enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    redaction_kinds: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    replacements: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    custom_patterns: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    retention_days: Mapped[int | None] = mapped_column(Integer)
    recording_notice: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
