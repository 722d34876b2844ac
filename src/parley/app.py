"""The platform API application factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from parley.admin.router import router as admin_router
from parley.admin.router import telephony_router as telephony_admin_router
from parley.api_keys.router import router as api_keys_router
from parley.assets.router import router as assets_router
from parley.assets.router import uploads_router
from parley.audit.dependencies import audit_mutations
from parley.audit.router import router as audit_router
from parley.auth.cache import IdentityBus, identity_cache_of
from parley.auth.dependencies import on_authenticated
from parley.auth.router import router as me_router
from parley.auth.service import KnownUsers
from parley.auth.tokens import TokenVerifier
from parley.billing.router import router as billing_router
from parley.brain.router import router as brain_router
from parley.calls.router import outbound_router as outbound_calls_router
from parley.calls.router import router as calls_router
from parley.campaigns.router import router as campaigns_router
from parley.channels.router import router as channels_router
from parley.config import Settings, prepare_settings
from parley.console.router import router as console_router
from parley.datasets.router import router as datasets_router
from parley.evaluations.router import router as evaluations_router
from parley.flows.router import router as flows_router
from parley.integrations.router import router as integrations_router
from parley.integrations.tasks import TokenRefresher
from parley.kit.blobs import blob_store_from_settings
from parley.kit.db import Database
from parley.kit.errors import install_error_handlers
from parley.kit.jobs import JobContext, JobRunner
from parley.kit.lifecycle import DrainMiddleware, SignalDrain, lifecycle_of, settle_heap
from parley.kit.logging import configure_logging
from parley.kit.middleware import BodySizeLimitMiddleware, RequestContextMiddleware
from parley.kit.orgcache import OrgBus, org_cache_of_database
from parley.kit.outbound import close_kept_connections, outbound_policy
from parley.kit.queue import queue_from_settings
from parley.kit.ratelimit import limiter_from_settings
from parley.kit.responses import JSONBytesResponse
from parley.kit.routing import check_route_classes, install_route_index
from parley.kit.tracing import install_tracing, instrument_engine, shutdown_tracing
from parley.knowledge.router import router as knowledge_router
from parley.knowledge.service import MAX_DOCUMENT_BYTES
from parley.llm.router import router as llm_router
from parley.login.router import router as login_router
from parley.monitoring.router import live_router as live_sessions_router
from parley.monitoring.router import router as monitoring_router
from parley.notifications.router import router as notifications_router
from parley.openapi import install_openapi
from parley.organizations.router import router as organizations_router
from parley.playground.router import router as playground_router
from parley.privacy.router import router as privacy_router
from parley.privacy.tasks import RetentionSweeper
from parley.providers.router import router as providers_router
from parley.reporting.router import router as reporting_router
from parley.sessions.registry import registry_from_settings
from parley.sessions.router import router as sessions_router
from parley.sessions.router import voice_router as session_voice_router
from parley.sessions.service import use_phone_lines
from parley.sessions.tasks import IdleSweeper
from parley.system.router import router as system_router
from parley.telephony.handover import PhoneLine
from parley.telephony.router import router as telephony_router
from parley.telephony.service import place_outbound_call
from parley.tools.router import router as tools_router
from parley.voice.engines import sphinx_host
from parley.voice.engines.sphinx import warm_pool
from parley.voice.router import router as inference_router
from parley.voice.transport_ws import session_audio_socket
from parley.webhooks.router import router as webhooks_router
from parley.worker import load_tasks

DESCRIPTION = (
    "Parley's platform API: organizations, API keys, flows, tools, knowledge, sessions, calls and more. "
    "Authenticate with `Authorization: Bearer <JWT or API key>`; pick the organization with "
    "`X-Organization-Id` when you belong to several."
)

ROUTERS = (
    system_router,
    me_router,
    organizations_router,
    api_keys_router,
    audit_router,
    admin_router,
    flows_router,
    tools_router,
    knowledge_router,
    datasets_router,
    evaluations_router,
    providers_router,
    assets_router,
    uploads_router,
    llm_router,
    sessions_router,
    session_voice_router,
    live_sessions_router,
    calls_router,
    monitoring_router,
    brain_router,
    channels_router,
    notifications_router,
    webhooks_router,
    billing_router,
    reporting_router,
    inference_router,
    telephony_router,
    telephony_admin_router,
    outbound_calls_router,
    campaigns_router,
    integrations_router,
    privacy_router,
    playground_router,
    login_router,
    console_router,
)


def _operation_id(route: APIRoute) -> str:
    return route.name


def _load_recognizers(settings: Settings) -> None:
    """Start the decoder processes (each warms its own pool), or warm this process's pool without them."""
    if settings.voice_decoder_processes > 0:
        sphinx_host.start(settings.voice_decoder_processes, settings.voice_decoder_pool)
    else:
        warm_pool(settings.voice_decoder_pool)


def create_app(settings: Settings | None = None, *, database: Database | None = None) -> FastAPI:
    """Build the platform app. ``database`` lets tests hand in a connection-bound session factory."""
    settings = prepare_settings(settings)
    load_tasks()  # the job handlers the in-process runner may run (parley/worker.py lists them)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = database is None
        app.state.db = database or Database.from_settings(settings)
        # Keys and memberships every request reads, invalidated on change (through Redis across processes).
        app.state.identity_cache = identity_cache_of(app.state.db)
        # Per-organization configuration a turn reads (kit/orgcache.py), invalidated the same way.
        app.state.org_cache = org_cache_of_database(app.state.db, distributed=bool(settings.redis_url))
        buses = (
            [
                IdentityBus.from_settings(app.state.identity_cache, settings),
                OrgBus.from_settings(app.state.org_cache, settings),
            ]
            if settings.redis_url
            else []
        )
        for bus in buses:
            bus.start()
        # Background jobs run in this process, or with PARLEY_REDIS_URL in `parley worker` processes;
        # unfinished work recorded in the database is re-queued.
        if getattr(app.state, "jobs", None) is None:
            app.state.jobs = queue_from_settings(JobContext(db=app.state.db, state=app.state), settings)
        app.state.jobs.start()
        await app.state.jobs.recover()
        # Live audio streams held by this process, and control messages for them from any process.
        app.state.live_sessions = registry_from_settings(settings)
        await app.state.live_sessions.start()
        # Live sessions nobody writes to end after PARLEY_SESSION_IDLE_SECONDS (with their call record).
        app.state.session_sweeper = IdleSweeper(
            app.state.db, settings.session_idle_seconds, jobs=app.state.jobs, live=app.state.live_sessions
        )
        app.state.session_sweeper.start()
        # OAuth2 tokens about to expire are refreshed in the background.
        app.state.token_refresher = TokenRefresher(
            app.state.jobs, settings.integrations_refresh_interval_seconds
        )
        app.state.token_refresher.start()
        # Calls, recordings and transcripts past each organization's retention are deleted by a job.
        app.state.retention_sweeper = RetentionSweeper(
            app.state.jobs, settings.privacy_retention_interval_seconds
        )
        app.state.retention_sweeper.start()
        # SIGTERM drains first: no new sessions, live calls get PARLEY_SHUTDOWN_GRACE_SECONDS to finish.
        signal_drain = SignalDrain(lifecycle_of(app))
        signal_drain.install()
        instrument_engine(app, app.state.db.engine)
        # Offline recognizer decoders hold the GIL while they load: they load and decode in helper
        # processes (PARLEY_VOICE_DECODER_PROCESSES), each warming its pool at start; with none, they
        # load here in a thread before callers arrive (the pool is per process, so a second app finds
        # it full).
        warming = asyncio.create_task(asyncio.to_thread(_load_recognizers, settings))
        try:
            yield
        finally:
            warming.cancel()
            if settings.voice_decoder_processes > 0:
                await asyncio.to_thread(sphinx_host.stop)
            signal_drain.uninstall()
            shutdown_tracing(app)
            await app.state.token_refresher.stop()
            await app.state.retention_sweeper.stop()
            await app.state.session_sweeper.stop()
            await app.state.jobs.stop()
            await app.state.live_sessions.stop()
            await app.state.rate_limiter.aclose()
            await close_kept_connections()  # the tools' keep-alive connections
            for bus in buses:
                await bus.stop()
            if owned:
                await app.state.db.dispose()

    # /docs loads its scripts and styles from fastapi-offline's package, never from a CDN, so a
    # self-hosted or air-gapped install has working API docs. ReDoc is not offered: its bundle still
    # fetches a logo from its vendor's CDN.
    app = FastAPIOffline(
        static_url="/docs-assets",
        redoc_url=None,
        title="Parley Platform API",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        default_response_class=JSONBytesResponse,
        generate_unique_id_function=_operation_id,
        # Parley traces with OpenTelemetry's FastAPI instrumentation when PARLEY_OTEL_ENDPOINT is set
        # (install_tracing below); FastAPI's own telemetry would only ask, on every request, whether a
        # global provider has been configured.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    outbound_policy(settings)  # the one outbound (SSRF) policy, built here; every client shares it
    app.state.token_verifier = TokenVerifier(settings)
    app.state.rate_limiter = limiter_from_settings(settings)
    app.state.known_users = KnownUsers()
    app.state.authenticated_hooks = []  # auth.dependencies.on_authenticated adds to it (tests do)
    app.state.blobs = blob_store_from_settings(settings)
    if database is not None:
        app.state.db = database
        app.state.identity_cache = identity_cache_of(database)
        app.state.org_cache = org_cache_of_database(database, distributed=bool(settings.redis_url))
        # A handed-in database may be one shared connection (the tests' rollback-per-test set-up):
        # jobs then run when drained, never beside a request on that connection.
        app.state.jobs = JobRunner(JobContext(db=database, state=app.state), workers=0)
    install_error_handlers(app)
    # Mutating requests are audited once their principal is known; auth itself imports no audit.
    on_authenticated(app, audit_mutations)
    # POST /api/calls/outbound dials through telephony, which calls cannot import (it builds on them).
    app.state.outbound_dialer = place_outbound_call
    # The sessions' audio WebSocket is spoken by the voice pipeline, which builds on sessions.
    app.state.session_audio = session_audio_socket
    # Transfers move the call through telephony, which builds on sessions.
    use_phone_lines(PhoneLine)
    for router in ROUTERS:
        check_route_classes(router.routes)  # each route must end its request's unit of work
        app.include_router(router)
    # Uploads get their own, larger limits; the routes check their exact limits again.
    upload_limits = {
        "/api/assets": settings.asset_max_bytes + 64 * 1024,
        "/api/knowledge/documents": MAX_DOCUMENT_BYTES + 64 * 1024,
        "/api/inference/stt": 10 * 1024 * 1024 + 64 * 1024,
        "/api/campaigns/": 64 * 1024 * 1024,  # contact lists: 100,000 rows and more (checked per row)
    }
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        per_path=upload_limits,
        read_timeout=settings.request_body_timeout,
    )
    app.add_middleware(DrainMiddleware)
    app.add_middleware(RequestContextMiddleware)
    install_tracing(app, settings)  # off unless PARLEY_OTEL_ENDPOINT is set (docs/observability.md)
    install_openapi(app, routers=ROUTERS, title=app.title, version="1.0.0", description=DESCRIPTION)
    install_route_index(app)
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` (multi-worker serving): settings are read when a worker starts."""
    settings = prepare_settings()
    configure_logging(settings.log_level, settings.log_json, redact=settings.log_redaction)
    app = create_app(settings)
    settle_heap()
    return app
