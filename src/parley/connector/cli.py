"""``parley connector ...``: serve the order connector and manage its data and keys."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from parley.connector import CLI_HELP
from parley.connector import keys as key_ops
from parley.connector.config import ConnectorConfigError, ConnectorSettings
from parley.connector.db import engine_scope
from parley.connector.errors import ConnectorUsageError
from parley.connector.importer import ImportFailed, ImportFormat, ImportReport, import_file

app = typer.Typer(help=CLI_HELP, no_args_is_help=True)
keys_app = typer.Typer(help="Create, list and revoke connector API keys.", no_args_is_help=True)
db_app = typer.Typer(help="Manage the connector's database.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(db_app, name="db")

out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages stay one line: easy to grep in logs
T = TypeVar("T")
SHOWN_ERRORS = 25
PROGRESS_MIN_BYTES = 1 << 20  # no bar for small files


@contextmanager
def _clean_errors() -> Iterator[None]:
    """Turn expected failures into one clear message and an exit code, never a traceback."""
    try:
        yield
    except ImportFailed as exc:
        _print_report(exc.report)
        err.print(f"[red]Import failed:[/red] {exc}")
        raise typer.Exit(1) from None
    except ConnectorUsageError as exc:
        err.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from None
    except ConnectorConfigError as exc:
        err.print(f"[red]Configuration error:[/red] {exc}")
        raise typer.Exit(2) from None
    except ValidationError as exc:
        problems = "; ".join(
            f"PARLEY_CONNECTOR_{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        err.print(f"[red]Configuration error:[/red] {problems}")
        raise typer.Exit(2) from None
    except OSError as exc:
        err.print(f"[red]Error:[/red] {exc.strerror or type(exc).__name__}: {exc.filename or ''}")
        raise typer.Exit(1) from None


def _settings() -> ConnectorSettings:
    return ConnectorSettings()


def _run(factory: Callable[[ConnectorSettings], T]) -> T:
    from parley.connector import setup

    with _clean_errors():
        settings = _settings()
        setup.upgrade_database(settings)
        return factory(settings)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind [default: 127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option(help="Port [default: 8001].", min=1, max=65535)] = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes [default: 1].", min=1, max=64)] = None,
) -> None:
    """Migrate the database and serve the connector (blocks until Ctrl-C)."""
    from parley.connector import setup

    with _clean_errors():
        settings = _settings()
        err.print(
            f"Order connector on http://{host or settings.host}:{port or settings.port} "
            f"({(workers or settings.workers)} worker(s))"
        )
        setup.serve(settings, host, port, workers)


def _print_report(report: ImportReport) -> None:
    where = report.format.value + (f", delimiter {report.delimiter!r}" if report.delimiter else "")
    err.print(f"{report.path}: {where}, encoding {report.encoding}; {report.records} record(s) read.")
    for note in report.notes:
        err.print(f"[yellow]Note:[/yellow] {note}")
    for problem in report.errors[:SHOWN_ERRORS]:
        err.print(f"  [red]{problem}[/red]")
    if report.invalid > SHOWN_ERRORS:
        err.print(f"  ... and {report.invalid - SHOWN_ERRORS} more invalid record(s).")


@app.command("import")
def import_(
    file: Annotated[
        Path, typer.Argument(help="CSV, JSON (array of objects) or JSONL export; names = Order fields.")
    ],
    fmt: Annotated[
        ImportFormat | None, typer.Option("--format", help="File format [default: from the extension].")
    ] = None,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="Import the valid records and report the invalid ones.")
    ] = False,
    encoding: Annotated[
        str | None, typer.Option(help="Text encoding [default: UTF-8 (BOM allowed), else Windows-1252].")
    ] = None,
) -> None:
    """Import orders (upsert by id). A file with invalid records changes nothing unless --skip-invalid."""

    def run(settings: ConnectorSettings) -> ImportReport:
        size = file.stat().st_size if file.is_file() else 0
        with Progress(
            TextColumn("Importing"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=True,
            disable=size < PROGRESS_MIN_BYTES or not err.is_terminal,
        ) as progress:
            task = progress.add_task("import", total=size or None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            async def go() -> ImportReport:
                async with engine_scope(settings) as engine:
                    return await import_file(
                        engine, file, fmt=fmt, skip_invalid=skip_invalid, encoding=encoding, progress=advance
                    )

            return asyncio.run(go())

    report = _run(run)
    _print_report(report)
    out.print(
        f"Imported {report.inserted + report.updated} order(s): {report.inserted} new, {report.updated} updated"
        + (f", {report.invalid} invalid skipped." if report.invalid else ".")
    )


@app.command()
def demo(
    count: Annotated[int, typer.Option(help="Number of orders.", min=1, max=5_000_000)] = 1000,
    seed: Annotated[int, typer.Option(help="Random seed: same seed and date, same orders.")] = 1,
    start_id: Annotated[int, typer.Option(help="First order id.", min=1)] = 1,
    reference_date: Annotated[
        str | None, typer.Option(help="Dates are spread around this day (YYYY-MM-DD) [default: today].")
    ] = None,
) -> None:
    """Generate realistic German repair-shop demo orders (upserts ids start-id .. start-id+count-1)."""
    try:
        reference = date.fromisoformat(reference_date) if reference_date else None
    except ValueError:
        err.print("[red]Error:[/red] --reference-date must be YYYY-MM-DD.")
        raise typer.Exit(2) from None

    def run(settings: ConnectorSettings) -> int:
        from parley.connector import setup

        return asyncio.run(
            setup.write_demo_orders(settings, count, seed=seed, start_id=start_id, reference=reference)
        )

    total = _run(run)
    out.print(
        f"Wrote {count} demo order(s) (ids {start_id}..{start_id + count - 1}); {total} order(s) in total."
    )


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option("--name", help="A label for the key, e.g. the agent using it.")],
) -> None:
    """Create a key and print it once, alone on the last line (store it now: only its hash is kept)."""
    from parley.connector import setup

    key = _run(lambda settings: setup.create_key(settings, name))
    err.print(f"Created key {name!r}. It is shown only this once:")
    print(key)  # plain stdout, so that `KEY=$(parley connector keys create --name x)` captures it


@keys_app.command("list")
def keys_list() -> None:
    """List keys (name, public id, created, revoked); secrets are never shown."""

    def run(settings: ConnectorSettings) -> list[key_ops.KeyInfo]:
        async def go() -> list[key_ops.KeyInfo]:
            async with engine_scope(settings) as engine:
                return await key_ops.list_keys(engine)

        return asyncio.run(go())

    infos = _run(run)
    table = Table("name", "key id", "created", "status")
    for info in infos:
        status = "active" if info.active else f"revoked {info.revoked_at:%Y-%m-%d %H:%M}"
        table.add_row(info.name, info.key_id, f"{info.created_at:%Y-%m-%d %H:%M}", status)
    out.print(table if infos else "No keys yet: create one with `parley connector keys create --name NAME`.")


@keys_app.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="Name of the active key to revoke.")]) -> None:
    """Revoke a key; running servers refuse it within about a second."""

    def run(settings: ConnectorSettings) -> None:
        async def go() -> None:
            async with engine_scope(settings) as engine:
                await key_ops.revoke_key(engine, name)

        asyncio.run(go())

    _run(run)
    out.print(f"Revoked key {name!r}.")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the connector's migrations (idempotent; `serve` does this on start too)."""
    _run(lambda _settings: None)
    out.print("Connector database is up to date.")
