"""Applying the Alembic migrations that ship inside the package (no alembic.ini needed)."""

from __future__ import annotations

import io
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(
    url: str, *, script_location: Path = MIGRATIONS_DIR, output: io.StringIO | None = None
) -> Config:
    config = Config(stdout=output) if output is not None else Config()
    config.set_main_option("script_location", str(script_location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "heads") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str:
    buffer = io.StringIO()
    command.current(alembic_config(url, output=buffer))
    return buffer.getvalue().strip() or "(no revision applied)"


def is_current(url: str) -> bool:
    """Whether the database is at the newest revision."""
    import asyncio

    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.ext.asyncio import create_async_engine

    heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())

    async def check() -> bool:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                current = await conn.run_sync(
                    lambda c: set(MigrationContext.configure(c).get_current_heads())
                )
        finally:
            await engine.dispose()
        return current == heads

    return asyncio.run(check())
