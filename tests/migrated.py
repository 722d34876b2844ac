"""Migrated databases for tests: the migrations run once per test process, every database is a copy.

Running the Alembic migrations takes one to three seconds on the 2-core machine, and many fixtures
need a fresh database at the newest revision. The first call in a process migrates a template (a
SQLite file, or a PostgreSQL database); every call returns a new database copied from it (a file
copy, or ``CREATE DATABASE ... TEMPLATE``), which is the same freshly migrated database. The tests
of the migrations themselves (tests/kit/test_migrations.py) and of ``parley db upgrade`` still run
the migrations. ``drop_templates`` (at the end of the session, tests/conftest.py) removes the templates.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from parley.kit.migrate import upgrade
from tests import pg

_sqlite_template: Path | None = None
_pg_template: str | None = None


def sqlite_url(path: Path) -> str:
    """A migrated SQLite database at ``path`` (a copy of this process's template); its URL."""
    global _sqlite_template
    if _sqlite_template is None:
        template = Path(tempfile.mkdtemp(prefix="parley-template-")) / "parley.db"
        upgrade(f"sqlite+aiosqlite:///{template}")  # a rollback journal, closed: the file is all of it
        _sqlite_template = template
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


def postgres(prefix: str) -> tuple[str, str]:
    """A new, migrated PostgreSQL database (``pg.create_database``'s name and URL); the caller drops it."""
    global _pg_template
    if _pg_template is None:
        name, url = pg.create_database("parley_template")
        try:
            upgrade(url)  # its own engine, disposed: nobody is connected to the template afterwards
        except BaseException:
            pg.drop_database(name)
            raise
        _pg_template = name
    return pg.create_database(prefix, template=_pg_template)


def drop_templates() -> None:
    global _sqlite_template, _pg_template
    if _sqlite_template is not None:
        shutil.rmtree(_sqlite_template.parent, ignore_errors=True)
        _sqlite_template = None
    if _pg_template is not None:
        asyncio.run(pg._admin_execute(f'DROP DATABASE IF EXISTS "{_pg_template}" WITH (FORCE)'))
        _pg_template = None
