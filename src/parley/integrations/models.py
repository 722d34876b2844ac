from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class IntegrationClient(OrgScopedMixin, TimestampMixin, Base):
    """An organization's OAuth2 client for one provider (a preset or a custom, generic one).

    For presets the endpoints come from the catalog and the columns stay empty; ``client_secret`` is
    the ciphertext bound to ``integration_clients:<id>:client_secret``.
    """

    __tablename__ = "integration_clients"
    __table_args__ = (UniqueConstraint("organization_id", "provider"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    provider: Mapped[str] = mapped_column(String(40), nullable=False)
    name: Mapped[str | None] = mapped_column(String(120))
    client_id: Mapped[str] = mapped_column(String(500), nullable=False)
    client_secret: Mapped[str | None] = mapped_column(String(2000))
    authorize_url: Mapped[str | None] = mapped_column(String(1000))
    token_url: Mapped[str | None] = mapped_column(String(1000))
    revocation_url: Mapped[str | None] = mapped_column(String(1000))
    scopes: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    token_auth_method: Mapped[str] = mapped_column(String(30), nullable=False)
    tenant: Mapped[str | None] = mapped_column(String(100))
    updated_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))


class OAuthState(OrgScopedMixin, Base):
    """A pending authorization: the one-time ``state`` (stored as its SHA-256) and what it is bound to."""

    __tablename__ = "oauth_states"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    state_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    provider: Mapped[str] = mapped_column(String(40), nullable=False)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    code_verifier: Mapped[str] = mapped_column(String(500), nullable=False)
    redirect_uri: Mapped[str] = mapped_column(String(1000), nullable=False)
    return_to: Mapped[str | None] = mapped_column(String(2000))
    scopes: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    consumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
    # SHA-256 of the cookie the connect set in the starting browser; the callback must bring it back.
    browser_hash: Mapped[str | None] = mapped_column(String(64))


class IntegrationConnection(OrgScopedMixin, TimestampMixin, Base):
    """Tokens an organization obtained from a provider; both tokens sealed to this row.

    ``status``: ``active``, or ``refresh_failed`` when the provider refused the refresh token (the
    organization has to connect again).
    """

    __tablename__ = "integration_connections"
    __table_args__ = (
        UniqueConstraint("organization_id", "provider"),
        Index("ix_integration_connections_expires_at", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    provider: Mapped[str] = mapped_column(String(40), nullable=False)
    connected_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    scopes: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    token_type: Mapped[str] = mapped_column(String(40), nullable=False)
    access_token: Mapped[str] = mapped_column(String(8000), nullable=False)
    refresh_token: Mapped[str | None] = mapped_column(String(8000))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    last_refreshed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(String(1000))
    # The refresh guard across processes: a refresh claims the row by bumping ``version`` (only from the
    # version it read, only when no unexpired lease stands), talks to the provider with no transaction
    # open, and stores the new tokens only if ``version`` is still the one it claimed.
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    refresh_lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
