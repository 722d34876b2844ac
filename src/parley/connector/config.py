"""Settings of the order connector, separate from the platform's (env prefix ``PARLEY_CONNECTOR_``).

Read once at start-up by whoever starts the service, never at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from parley.config import LogLevel


class ConnectorConfigError(Exception):
    """A connector setting is malformed; the message names the setting."""


class ConnectorSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PARLEY_CONNECTOR_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # Shared with the platform: one data dir for the embedded default.
    data_dir: Path = Field(
        default=Path(".parley"), validation_alias=AliasChoices("PARLEY_DATA_DIR", "data_dir")
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL (sqlite+aiosqlite:// or postgresql+asyncpg://); "
        "default: a SQLite file <data_dir>/connector.db.",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8001, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=64)

    rate_limit: int = Field(default=1200, ge=0, description="Requests per minute per key; 0 disables it.")
    auth_failure_limit: int = Field(
        default=30, ge=0, description="Failed key attempts per minute per client address; 0 disables it."
    )
    key_cache_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How long the in-memory key table is trusted (revocation delay).",
    )
    order_cache_mb: float = Field(
        default=64.0,
        ge=0,
        le=65536,
        description="SQLite only: memory per worker for order responses kept between requests (MiB); "
        "0 disables the cache. Entries are dropped as soon as the database file changes.",
    )
    pg_pool_size: int = Field(
        default=4,
        ge=1,
        le=200,
        description="PostgreSQL connections per worker; lookups are coalesced onto all but one of them.",
    )
    log_level: LogLevel = "INFO"

    @property
    def resolved_database_url(self) -> str:
        """The configured URL with its async driver filled in (``sqlite://`` and ``postgresql://`` accepted)."""
        if not self.database_url:
            return f"sqlite+aiosqlite:///{(self.data_dir / 'connector.db').resolve()}"
        return normalize_database_url(self.database_url).render_as_string(hide_password=False)

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file (only meaningful when :attr:`is_sqlite`)."""
        database = make_url(self.resolved_database_url).database
        if not database or database == ":memory:":
            raise ConnectorConfigError("PARLEY_CONNECTOR_DATABASE_URL must name a SQLite file, not memory.")
        return Path(database)

    @property
    def asyncpg_dsn(self) -> str:
        """The PostgreSQL URL in the form asyncpg itself accepts (no SQLAlchemy driver suffix)."""
        url = make_url(self.resolved_database_url).set(drivername="postgresql")
        return url.render_as_string(hide_password=False)


def normalize_database_url(raw: str) -> URL:
    try:
        url = make_url(raw)
    except ArgumentError as exc:
        raise ConnectorConfigError("PARLEY_CONNECTOR_DATABASE_URL is not a valid database URL.") from exc
    backend = url.get_backend_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql":
        return url.set(drivername="postgresql+asyncpg")
    raise ConnectorConfigError(
        f"PARLEY_CONNECTOR_DATABASE_URL must be a SQLite or PostgreSQL URL (got {backend!r})."
    )
