"""The ``parley`` command: run the services, manage the database, mint tokens.

Every command reads the configuration once, when it runs (``PARLEY_*`` variables or ``.env``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from parley.config import ConfigError, Settings, prepare_settings
from parley.connector import CLI_HELP as CONNECTOR_HELP

if TYPE_CHECKING:
    from parley.demo.seed import SeedResult

CONNECTOR = "connector"


class _ParleyGroup(TyperGroup):
    """The ``parley`` command group, which loads ``parley connector``'s commands only when they are named.

    Importing parley.connector.cli (its key store, models and importer pull in SQLAlchemy) took about
    half of the start-up of every other command. Until a command line names ``connector``, a stand-in
    group of that name with the same help is registered: all that ``parley --help`` shows of it.
    Resolving the name (running one of its commands, its ``--help``, shell completion) puts the real
    group in its place.
    """

    # Any: the context and command types are click's, which newer typer versions vendor privately.
    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] == CONNECTOR:
            from parley.connector.cli import app as connector_app

            holder = typer.Typer()
            holder.add_typer(connector_app, name=CONNECTOR)  # built as add_typer on `app` would build it
            self.commands[CONNECTOR] = typer.main.get_group(holder).commands[CONNECTOR]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_ParleyGroup,
    help="Parley: build, run and operate AI phone agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database migrations of the platform API.", no_args_is_help=True)
token_app = typer.Typer(
    help="Local bearer tokens (HS256, signed with the configured secret).", no_args_is_help=True
)
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(typer.Typer(help=CONNECTOR_HELP, no_args_is_help=True), name=CONNECTOR)  # see _ParleyGroup
demo_app = typer.Typer(help="The demo repair shop and its order-status agent.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")
eval_app = typer.Typer(help="Evaluations: run a test suite against a flow.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

console = Console(stderr=True, soft_wrap=True)  # one sentence stays one line, for logs and scripts
out = Console(soft_wrap=True)

LOCAL_ADMIN_SUBJECT = "local-admin"


def _settings() -> Settings:
    try:
        return prepare_settings(Settings())
    except ConfigError as exc:
        console.print(f"[red]Configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc
    except ValueError as exc:  # pydantic validation of PARLEY_* values
        console.print(f"[red]Configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc


@contextmanager
def _database_errors(settings: Settings) -> Iterator[None]:
    """Turn an unreachable or unusable database into one sentence instead of a traceback."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    try:
        yield
    except (OSError, TimeoutError, SQLAlchemyError) as exc:
        url = make_url(settings.resolved_database_url).render_as_string(hide_password=True)
        cause = exc.orig if isinstance(exc, DBAPIError) else exc
        reason = (str(cause).splitlines() or [type(cause).__name__])[0]
        console.print(f"[red]The database {url} (PARLEY_DATABASE_URL) cannot be used:[/red] {reason}")
        raise typer.Exit(2) from exc


def _migrate(settings: Settings) -> None:
    from parley.kit.migrate import upgrade

    with _database_errors(settings):
        upgrade(settings.resolved_database_url)


# The standard library's event loop, not uvloop: on a saturated worker uvloop served some keep-alive
# connections far later than others (p99 1.3 s against a p50 of 66 ms at 64 connections, while each
# request took under 3 ms inside the app); asyncio's loop kept p99 within about twice the p50 for the
# same throughput (docs/benchmarks.md, "Platform API").
SERVER_LOOP = "asyncio"


def _run_platform(
    settings: Settings, host: str, port: int, workers: int, *, shutdown_timeout: int | None = None
) -> None:
    import uvicorn

    from parley.kit.logging import configure_logging

    configure_logging(settings.log_level, settings.log_json, redact=settings.log_redaction)
    _prepare_metrics_dir()
    if workers > 1:
        os.environ["PARLEY_HOST"], os.environ["PARLEY_PORT"] = host, str(port)
        uvicorn.run(
            "parley.app:create_app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            loop=SERVER_LOOP,
            access_log=False,
            log_level="warning",
        )
        return
    from parley.app import create_app
    from parley.kit.lifecycle import settle_heap

    app = create_app(settings)
    settle_heap()
    uvicorn.run(
        app,
        host=host,
        port=port,
        loop=SERVER_LOOP,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=shutdown_timeout,
    )


UP_SHUTDOWN_GRACE_SECONDS = 2.0  # `parley up`: how long a live call may take to say goodbye on Ctrl-C
UP_SHUTDOWN_TIMEOUT = 5  # `parley up`: open requests (streams, sockets) get this long after Ctrl-C


def _prepare_metrics_dir() -> None:
    """With PROMETHEUS_MULTIPROC_DIR (several workers), start from an empty directory: files left by an
    earlier run would be added to this run's counters."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink(missing_ok=True)


@app.command()
def up(
    host: Annotated[str, typer.Option(help="Address of the platform API.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the platform API.")] = 8000,
    connector_port: Annotated[int, typer.Option(help="Port of the order connector.")] = 8001,
    demo_orders: Annotated[int, typer.Option(help="Demo orders to generate on first run.")] = 20000,
) -> None:
    """Start the embedded default: platform API and order connector, SQLite, first-run setup.

    Applies migrations, generates secrets and demo orders on first run, prints both URLs, an admin
    token and a connector key, then serves until Ctrl-C.
    """
    settings = _settings()
    settings.host, settings.port = host, port
    settings.connector_url = f"http://{host}:{connector_port}"
    if "PARLEY_SHUTDOWN_GRACE_SECONDS" not in os.environ:
        # Interactive: one Ctrl-C stops everything within seconds; a live call is told goodbye, not
        # waited for (production's SIGTERM drain keeps its longer grace).
        settings.shutdown_grace_seconds = UP_SHUTDOWN_GRACE_SECONDS
    _migrate(settings)

    from parley.auth.tokens import mint_token
    from parley.connector import setup as connector_setup
    from parley.connector.config import ConnectorSettings

    connector_settings = ConnectorSettings(data_dir=settings.data_dir)
    connector_setup.upgrade_database(connector_settings)
    with console.status("Preparing demo orders..."):
        orders = connector_setup.ensure_demo_orders(connector_settings, count=demo_orders)
    connector_key = _local_connector_key(settings)
    demo = _seed(settings, LOCAL_ADMIN_SUBJECT, settings.connector_url, connector_key)
    token = mint_token(
        settings,
        subject=LOCAL_ADMIN_SUBJECT,
        name="Local admin",
        admin=True,
        ttl_seconds=min(30 * 24 * 3600, settings.auth_max_token_lifetime_seconds),
    )

    child = subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments; the connector runs as its own process
        [sys.executable, "-m", "parley", "connector", "serve", "--host", host, "--port", str(connector_port)],
        env={**os.environ, "PARLEY_DATA_DIR": str(Path(settings.data_dir).resolve())},
    )
    out.print(f"\n[bold green]Parley is running[/bold green] (data in {Path(settings.data_dir).resolve()})")
    out.print(f"  Platform API:    http://{host}:{port}   (OpenAPI docs at /docs)")
    out.print(f"  Order connector: http://{host}:{connector_port}   ({orders} orders)")
    out.print("  Demo shop: the order-status agent in German and English, with the order_lookup tool")
    out.print("  Its test suite: parley eval run Auftragsstatus --suite 'Order status regression'")
    out.print("\n  Paste these lines into another shell (admin token valid 30 days):")
    exports = {
        "PARLEY_URL": f"http://{host}:{port}",
        "TOKEN": token,
        "PARLEY_TOKEN": "$TOKEN",
        "KEY": connector_key,
        "ORG": demo.organization_id,
        "PARLEY_ORG": "$ORG",
        "TOOL": demo.tool_id,
        "FLOW_DE": demo.flow_ids["de"],
        "FLOW_EN": demo.flow_ids["en"],
    }
    for name, value in exports.items():
        out.print(f"export {name}={value}", soft_wrap=True)
    out.print(
        f'\n  Try: curl http://{host}:{port}/api/flows -H "Authorization: Bearer $TOKEN" '
        '-H "X-Organization-Id: $ORG"\n',
        soft_wrap=True,
    )
    try:
        _run_platform(settings, host, port, workers=1, shutdown_timeout=UP_SHUTDOWN_TIMEOUT)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


def _seed(settings: Settings, owner: str, connector_url: str, connector_key: str) -> SeedResult:
    import asyncio

    from parley.demo.seed import run_seed

    with _database_errors(settings):
        return asyncio.run(
            run_seed(settings, owner_subject=owner, connector_url=connector_url, connector_key=connector_key)
        )


@demo_app.command("seed")
def demo_seed(
    owner: Annotated[
        str, typer.Option(help="Subject (user id) that owns the demo organization.")
    ] = LOCAL_ADMIN_SUBJECT,
    connector_url: Annotated[
        str | None,
        typer.Option(help="Order connector the order_lookup tool calls (default: PARLEY_CONNECTOR_URL)."),
    ] = None,
    connector_key: Annotated[
        str | None,
        typer.Option(help="Its X-API-Key (default: the local connector's demo key, created if needed)."),
    ] = None,
) -> None:
    """Create or refresh the demo organization, its order_lookup tool and the published order-status agents.

    Safe to run again: what exists is reused, what changed is updated.
    """
    settings = _settings()
    _migrate(settings)
    if connector_key is None:
        connector_key = _local_connector_key(settings)
    result = _seed(settings, owner, connector_url or settings.connector_url, connector_key)
    out.print(f"organization {result.organization_id}")
    out.print(f"tool {result.tool_id}")
    for language, flow_id in result.flow_ids.items():
        out.print(f"flow {language} {flow_id}")
    out.print(f"suite {result.suite_id}")


def _local_connector_key(settings: Settings) -> str:
    """The embedded connector's demo key, kept in the data dir so every start prints the same one."""
    from parley.connector import setup as connector_setup
    from parley.connector.config import ConnectorSettings

    key_file = settings.data_dir / "connector_key"
    if not key_file.exists():
        connector_settings = ConnectorSettings(data_dir=settings.data_dir)
        connector_setup.upgrade_database(connector_settings)
        key_file.write_text(connector_setup.create_key(connector_settings, "local-demo") + "\n")
        key_file.chmod(0o600)
    return key_file.read_text().strip()


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker processes.")] = 1,
) -> None:
    """Serve the platform API only (apply migrations first with `parley db upgrade`)."""
    settings = _settings()
    from parley.kit.migrate import is_current

    with _database_errors(settings):
        current = is_current(settings.resolved_database_url)
    if not current:
        console.print("[red]The database schema is not up to date;[/red] run `parley db upgrade` first.")
        raise typer.Exit(2)
    _run_platform(settings, host, port, workers)


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Jobs run at the same time.")] = 4,
    grace: Annotated[
        int, typer.Option(min=0, max=3600, help="Seconds running jobs get to finish on SIGTERM.")
    ] = 30,
    metrics_port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Serve Prometheus metrics on this port.")
    ] = None,
) -> None:
    """Run background jobs from the Redis queue (distributed mode; needs PARLEY_REDIS_URL).

    Knowledge ingestion, call analysis and every other job run here with the same handlers as in the
    embedded default. On SIGTERM or Ctrl-C the worker takes no new jobs, lets the running ones finish
    (up to --grace seconds; the rest go back to the queue) and exits.
    """
    settings = _settings()
    if not settings.redis_url:
        console.print(
            "[red]PARLEY_REDIS_URL is not set;[/red] without Redis, jobs run inside `parley serve`/`parley up`."
        )
        raise typer.Exit(2)
    import asyncio

    from parley.kit.logging import configure_logging
    from parley.kit.migrate import is_current
    from parley.kit.redis import redacted_url
    from parley.worker import run as run_worker

    configure_logging(settings.log_level, settings.log_json, redact=settings.log_redaction)
    with _database_errors(settings):
        current = is_current(settings.resolved_database_url)
    if not current:
        console.print("[red]The database schema is not up to date;[/red] run `parley db upgrade` first.")
        raise typer.Exit(2)
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr=settings.host)
    console.print(f"Parley worker: jobs from {redacted_url(settings.redis_url)}, {concurrency} at a time.")
    asyncio.run(run_worker(settings, concurrency=concurrency, grace=grace))


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "heads") -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    settings = _settings()
    from parley.kit.migrate import upgrade

    with _database_errors(settings):
        upgrade(settings.resolved_database_url, revision)
    console.print(f"Database upgraded to {revision}.")


@db_app.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Argument(help="Target revision, e.g. -1 or base.")]) -> None:
    """Revert migrations down to REVISION."""
    settings = _settings()
    from parley.kit.migrate import downgrade

    with _database_errors(settings):
        downgrade(settings.resolved_database_url, revision)
    console.print(f"Database downgraded to {revision}.")


@db_app.command("current")
def db_current() -> None:
    """Show the revision the database is at."""
    settings = _settings()
    from parley.kit.migrate import current

    with _database_errors(settings):
        out.print(current(settings.resolved_database_url))


@token_app.command("create")
def token_create(
    sub: Annotated[str, typer.Option("--sub", help="Subject (user id) of the token.")],
    email: Annotated[str | None, typer.Option(help="Email claim.")] = None,
    name: Annotated[str | None, typer.Option(help="Name claim.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make the bearer a platform admin.")] = False,
    ttl: Annotated[int, typer.Option(min=60, max=365 * 24 * 3600, help="Lifetime in seconds.")] = 12 * 3600,
) -> None:
    """Mint an HS256 token signed with PARLEY_AUTH_JWT_SECRET and print it alone on one line."""
    settings = _settings()
    from parley.auth.tokens import mint_token

    if settings.jwt_secret_value() is None:
        console.print(
            "[red]No HS256 secret is configured[/red] (PARLEY_AUTH_JWT_SECRET); tokens come from your identity provider."
        )
        raise typer.Exit(2)
    if ttl > settings.auth_max_token_lifetime_seconds:
        console.print(
            f"[red]--ttl {ttl} is longer than the maximum token lifetime[/red] of "
            f"{settings.auth_max_token_lifetime_seconds} s (PARLEY_AUTH_MAX_TOKEN_LIFETIME_SECONDS); "
            "the API would refuse the token."
        )
        raise typer.Exit(2)
    out.print(
        mint_token(settings, subject=sub, email=email, name=name, admin=admin, ttl_seconds=ttl),
        soft_wrap=True,
    )


@app.command()
def chat(
    flow: Annotated[
        str | None, typer.Argument(help="Flow id or name (default: the only or first published flow).")
    ] = None,
    url: Annotated[
        str, typer.Option(envvar="PARLEY_URL", help="The platform API.")
    ] = "http://127.0.0.1:8000",
    token: Annotated[
        str | None, typer.Option(envvar="PARLEY_TOKEN", help="A JWT or API key (pk_...).", show_default=False)
    ] = None,
    org: Annotated[str | None, typer.Option(envvar="PARLEY_ORG", help="The organization id.")] = None,
    language: Annotated[str | None, typer.Option(help="Start language, e.g. de or en.")] = None,
    channel: Annotated[str, typer.Option(help="Session channel: web, phone, whatsapp or test.")] = "web",
) -> None:
    """Chat with an agent in the terminal, through the HTTP API; ends with the flow or Ctrl-D."""
    from parley.sessions.chat import ChatError, run_chat

    if not token:
        console.print("[red]No token:[/red] pass --token or set PARLEY_TOKEN (see `parley token create`).")
        raise typer.Exit(2)
    try:
        run_chat(url=url, token=token, flow=flow, org=org, language=language, channel=channel, console=out)
    except ChatError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc


@eval_app.command("run")
def eval_run(
    flow: Annotated[str, typer.Argument(help="Flow id or name.")],
    suite: Annotated[str, typer.Option(help="The test suite: its name or dataset id (ds_...).")],
    version: Annotated[
        int | None, typer.Option(help="A published version (default: the flow's draft).", show_default=False)
    ] = None,
    voice: Annotated[
        bool, typer.Option("--voice", help="Voice mode: speak the caller's lines through the voice pipeline.")
    ] = False,
    pace: Annotated[
        str | None,
        typer.Option(
            help="Voice mode's pace: fast (default; the waiting is skipped) or realtime (the caller's audio "
            "streams at the rate it is spoken).",
            show_default=False,
        ),
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML here.", show_default=False)] = None,
    json_file: Annotated[
        Path | None,
        typer.Option("--json", help="Write the run and its results as JSON here.", show_default=False),
    ] = None,
    url: Annotated[
        str, typer.Option(envvar="PARLEY_URL", help="The platform API.")
    ] = "http://127.0.0.1:8000",
    token: Annotated[
        str | None, typer.Option(envvar="PARLEY_TOKEN", help="A JWT or API key (pk_...).", show_default=False)
    ] = None,
    org: Annotated[str | None, typer.Option(envvar="PARLEY_ORG", help="The organization id.")] = None,
    timeout: Annotated[
        float, typer.Option(help="Give up (and cancel the run) after this many seconds.")
    ] = 1800,
) -> None:
    """Run a test suite against a flow through the HTTP API; exits 1 unless every scenario passed."""
    from parley.evaluations.client import EvalError, run_eval

    if not token:
        console.print("[red]No token:[/red] pass --token or set PARLEY_TOKEN (see `parley token create`).")
        raise typer.Exit(2)
    if pace is not None and (not voice or pace not in ("fast", "realtime")):
        console.print("[red]--pace is voice mode's:[/red] pass --voice with --pace fast or --pace realtime.")
        raise typer.Exit(2)
    try:
        passed = run_eval(
            url=url,
            token=token,
            org=org,
            flow=flow,
            suite=suite,
            version=version,
            voice=voice,
            pace=pace,
            junit_path=junit,
            json_path=json_file,
            timeout=timeout,
            console=console,
            out=out,
        )
    except EvalError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    raise typer.Exit(0 if passed else 1)


def main() -> None:
    app()
