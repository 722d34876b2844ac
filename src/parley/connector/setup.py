"""Synchronous entry points for whoever starts the connector (``parley up``, the CLI, tests).

Each function takes the settings explicitly and runs its own event loop where it needs one, so call
them from plain (non-async) code, or through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, date, datetime

import uvicorn

from parley.connector import keys
from parley.connector.app import configure_logging, create_connector_app
from parley.connector.config import ConnectorSettings
from parley.connector.db import engine_scope, upgrade
from parley.connector.demo import generate_orders
from parley.connector.repository import count_orders, order_row, upsert_orders

DEMO_BATCH = 1000


def upgrade_database(settings: ConnectorSettings) -> None:
    """Apply the connector's migrations (idempotent)."""
    upgrade(settings)


async def write_demo_orders(
    settings: ConnectorSettings,
    count: int,
    *,
    seed: int = 1,
    start_id: int = 1,
    reference: date | None = None,
) -> int:
    """Upsert ``count`` demo orders (ids ``start_id..``) in one transaction; return the table's row count."""
    now = datetime.now(UTC)
    async with engine_scope(settings) as engine:
        async with engine.begin() as conn:
            batch = []
            for order in generate_orders(count, seed=seed, start_id=start_id, reference=reference):
                batch.append(order_row(order, now))
                if len(batch) >= DEMO_BATCH:
                    await upsert_orders(conn, batch)
                    batch.clear()
            await upsert_orders(conn, batch)
        return await count_orders(engine)


def ensure_demo_orders(settings: ConnectorSettings, count: int = 20000) -> int:
    """Seed ``count`` demo orders only when the order table is empty; return the rows present."""

    async def run() -> int:
        async with engine_scope(settings) as engine:
            present = await count_orders(engine)
        if present:
            return present
        return await write_demo_orders(settings, count)

    return asyncio.run(run())


def create_key(settings: ConnectorSettings, name: str) -> str:
    """Create an active key called ``name`` and return its plaintext (the only time it exists)."""

    async def run() -> str:
        async with engine_scope(settings) as engine:
            return await keys.create_key(engine, name)

    return asyncio.run(run())


def export_settings(settings: ConnectorSettings) -> None:
    """Put the effective settings into the environment, for worker processes that rebuild them."""
    os.environ["PARLEY_DATA_DIR"] = str(settings.data_dir)
    os.environ["PARLEY_CONNECTOR_DATABASE_URL"] = settings.resolved_database_url
    for name in ("rate_limit", "auth_failure_limit", "key_cache_seconds", "pg_pool_size", "log_level"):
        os.environ[f"PARLEY_CONNECTOR_{name.upper()}"] = str(getattr(settings, name))


def server_config(settings: ConnectorSettings, host: str, port: int) -> uvicorn.Config:
    """Uvicorn configuration of one connector server (usable to embed it in another process's loop)."""
    return uvicorn.Config(
        create_connector_app(settings),
        host=host,
        port=port,
        http="httptools",
        loop="uvloop",
        # uvicorn's access log would record client addresses and order ids.
        access_log=False,
        log_level=settings.log_level.lower(),
        server_header=False,
    )


def serve(
    settings: ConnectorSettings, host: str | None = None, port: int | None = None, workers: int | None = None
) -> None:
    """Migrate the database, then serve the connector until interrupted (blocking)."""
    configure_logging(settings)
    upgrade_database(settings)
    host, port, workers = host or settings.host, port or settings.port, workers or settings.workers
    if workers == 1:
        uvicorn.Server(server_config(settings, host, port)).run()
        return
    export_settings(settings)  # each worker process rebuilds the app from the environment
    uvicorn.run(
        "parley.connector.app:create_app_from_env",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        http="httptools",
        loop="uvloop",
        access_log=False,
        log_level=settings.log_level.lower(),
        server_header=False,
    )
