"""One typed settings object, read once at start-up (never at import time).

Every setting comes from the environment with the prefix ``PARLEY_`` (or a ``.env`` file).
``prepare_settings`` turns the raw values into a consistent, ready-to-use configuration: it creates
the data directory and, in the embedded default, generates the JWT secret and the key for secrets at
rest on first run. Inconsistent values raise :class:`ConfigError` with one clear sentence.
"""

from __future__ import annotations

import ipaddress
import secrets
from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class ConfigError(Exception):
    """A setting is missing, malformed or inconsistent; the message names the setting."""


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _log_level(value: str) -> str:
    level = value.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
    return level


LogLevel = Annotated[str, AfterValidator(_log_level)]
"""A log level name, any case, stored upper-case (shared by the platform and the connector)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PARLEY_", env_file=".env", extra="ignore")

    data_dir: Path = Path(".parley")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default is a SQLite file in the data dir."
    )
    db_pool_size: int = Field(default=20, ge=1, le=500)
    db_pool_timeout: float = Field(default=10.0, gt=0)
    db_connect_timeout: float = Field(
        default=5.0, gt=0, le=120, description="Seconds to open a PostgreSQL connection before giving up."
    )
    db_statement_timeout: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds one PostgreSQL statement may run (server and client side).",
    )
    db_busy_timeout: float = Field(
        default=10.0, gt=0, le=600, description="SQLite: seconds a writer waits for the write lock."
    )
    turn_slots_per_organization: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Conversation turns of one organization running at once in a process; 0: 4 on "
        "SQLite, the pool size minus 2 on PostgreSQL. More wait in line (one organization's slow "
        "tools cannot take every other organization's turns).",
    )
    request_body_timeout: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds a client may take to send a request's whole body; slower: 408.",
    )
    db_pool_recycle: float = Field(
        default=1800.0, gt=0, description="Seconds after which a pooled connection is replaced."
    )
    shutdown_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="On SIGTERM, seconds live calls may take to finish before they are ended (reason shutdown).",
    )
    otel_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP endpoint for traces (e.g. http://collector:4318/v1/traces); tracing is off without it.",
    )
    otel_service_name: str = "parley-platform"

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    public_url: str | None = None
    connector_url: str = "http://127.0.0.1:8001"

    auth_jwt_secret: SecretStr | None = None
    auth_jwks_url: str | None = None
    auth_issuer: str | None = None
    auth_audience: str | None = None
    auth_jwks_cache_seconds: float = Field(default=300.0, gt=0)
    auth_jwks_refetch_cooldown: float = Field(default=30.0, ge=0)
    auth_leeway_seconds: int = Field(default=30, ge=0, le=600)
    auth_max_token_lifetime_seconds: int = Field(
        default=30 * 24 * 3600,
        ge=60,
        description="The longest lifetime (exp - iat) a login JWT may have; longer ones are refused.",
    )
    admin_subjects: Annotated[list[str], NoDecode] = Field(default_factory=list)

    secret_key: SecretStr | None = None

    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    rate_limit_per_minute: int = Field(default=600, ge=0)
    rate_limit_org_per_minute: int = Field(
        default=3000, ge=0, description="Requests per minute of one organization, all its callers together."
    )
    rate_limit_address_per_minute: int = Field(
        default=600, ge=0, description="Unauthenticated requests (webhooks, OAuth callbacks) per address."
    )
    auth_failures_per_minute: int = Field(
        default=30, ge=0, description="Failed authentications per address before it is refused with 429."
    )
    outbound_allowlist: Annotated[list[str], NoDecode] = Field(default_factory=list)
    outbound_timeout: float = Field(default=10.0, gt=0)
    # Campaigns: how long a running campaign waits between dialing rounds when nothing else wakes it
    # (a finished call's status callback starts the next round at once).
    campaign_poll_seconds: float = Field(default=5.0, gt=0, le=3600)
    llm_timeout: float = Field(default=60.0, gt=0, le=600, description="Seconds an LLM call may take.")

    log_level: LogLevel = "INFO"
    log_json: bool = True

    # Blob storage (recordings, assets, avatars, documents): empty or file:///path → a local directory
    # (default <data_dir>/blobs); s3://bucket/prefix → S3-compatible object storage.
    blob_url: str = ""
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    asset_max_bytes: int = Field(default=25 * 1024 * 1024, ge=1024, description="Largest asset upload.")
    session_idle_seconds: float = Field(
        default=300.0, gt=0, description="A live session without a message this long ends (abandoned)."
    )
    whatsapp_graph_url: str = Field(
        default="https://graph.facebook.com", description="Base URL of Meta's Graph API (WhatsApp Cloud API)."
    )
    whatsapp_graph_version: str = Field(default="v21.0", pattern=r"^v\d+\.\d+$")
    whatsapp_send_attempts: int = Field(
        default=4, ge=1, le=10, description="Tries per WhatsApp reply when the Graph API fails transiently."
    )
    whatsapp_retry_seconds: float = Field(
        default=1.0, ge=0, le=60, description="First pause between tries; doubles each time."
    )
    # Notifications: Slack webhooks may only go to these hosts; failed deliveries are retried after these
    # delays (seconds, the last one repeats) until the attempts run out.
    notification_slack_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["hooks.slack.com"]
    )
    notification_retry_seconds: Annotated[list[Annotated[float, Field(ge=0, le=86400)]], NoDecode] = Field(
        default_factory=lambda: [30.0, 120.0, 600.0, 1800.0]
    )
    notification_max_attempts: int = Field(default=5, ge=1, le=20)
    notification_timeout: float = Field(default=10.0, gt=0, le=120, description="Seconds one send may take.")

    # Call events (webhooks to the customer's systems, docs/webhooks.md): a failing delivery is retried
    # after these delays (seconds, the last one repeats) until the attempts run out. The default spreads
    # 10 attempts over about 24 hours (30 s, 2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h, 8 h).
    webhook_retry_seconds: Annotated[list[Annotated[float, Field(ge=0, le=86400)]], NoDecode] = Field(
        default_factory=lambda: [30.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 28800.0]
    )
    webhook_max_attempts: int = Field(default=10, ge=1, le=30)
    webhook_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds one delivery may take.")

    telephony_sync_lease_seconds: float = Field(
        default=300.0,
        gt=0,
        le=3600,
        description="A telephony sync's lease; a dead process frees it after this.",
    )
    voice_decoder_pool: int = Field(
        default=2,
        ge=0,
        le=16,
        description="Offline recognizer decoders of each kind loaded at start-up (in each decoder process), off the event loop; 0 loads on first use.",
    )
    voice_decoder_processes: int = Field(
        default=2,
        ge=0,
        le=16,
        description=(
            "Helper processes that load and run the offline recognizer, so a loading decoder never "
            "stalls a call; 0 decodes in the server's own process."
        ),
    )
    voice_recording_max_seconds: int = Field(
        default=900,
        ge=0,
        le=4 * 3600,
        description="A voiced session's stereo recording keeps its first this many seconds; 0 records nothing.",
    )

    # Signing in to the console through an identity provider (docs/console.md): an OAuth 2.0 / OpenID
    # Connect provider's authorization code flow with PKCE, done by the server as a confidential client.
    # The person's subject is the provider's userinfo `sub`; Parley then issues its own login JWT (HS256,
    # so PARLEY_AUTH_JWT_SECRET must be available). Off unless the client id and the three URLs are set.
    login_provider_name: str = Field(default="identity provider", min_length=1, max_length=60)
    login_authorize_url: str | None = None
    login_token_url: str | None = None
    login_userinfo_url: str | None = None
    login_client_id: str | None = None
    login_client_secret: SecretStr | None = None
    login_scopes: str = Field(default="openid email profile", max_length=500)
    login_token_ttl_seconds: int = Field(default=8 * 3600, ge=300, le=7 * 86400)

    # OAuth2 integrations: origins (scheme://host[:port]) a connect's return_to may name besides
    # public_url; how long a pending state lives; how early and how often tokens are refreshed.
    integrations_return_to_allowlist: Annotated[list[str], NoDecode] = Field(default_factory=list)
    integrations_state_ttl_seconds: int = Field(default=600, ge=30, le=3600)
    integrations_refresh_margin_seconds: float = Field(default=300.0, ge=0, le=86400)
    integrations_refresh_interval_seconds: float = Field(
        default=300.0, ge=0, description="How often expiring tokens are refreshed; 0 turns it off."
    )

    # Privacy (docs/privacy.md): how often each organization's retention is applied (0: never, e.g.
    # when only `parley worker` hosts should queue it), and whether log lines have phone numbers,
    # e-mail addresses, IBANs and card numbers replaced.
    privacy_retention_interval_seconds: float = Field(
        default=3600.0, ge=0, description="How often calls past their retention are deleted; 0 turns it off."
    )
    log_redaction: bool = True

    # Distributed mode (docs/scale-out.md): with a Redis URL, background jobs go to a Redis queue worked
    # by `parley worker` processes, and rate limits, the live-session registry and session control
    # (pub/sub) are shared by every API process. Without it everything stays in the process.
    redis_url: str | None = Field(default=None, description="redis:// or rediss:// URL (distributed mode).")
    redis_prefix: str = Field(
        default="parley",
        min_length=1,
        max_length=60,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Prefix of every Redis key and channel Parley uses (several deployments can share a server).",
    )
    job_max_tries: int = Field(default=5, ge=1, le=50, description="Tries of a job failing transiently.")

    @field_validator(
        "admin_subjects",
        "outbound_allowlist",
        "integrations_return_to_allowlist",
        "notification_slack_hosts",
        "notification_retry_seconds",
        "webhook_retry_seconds",
        mode="before",
    )
    @classmethod
    def _csv(cls, value: object) -> object:
        return _split_csv(value)

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'parley.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    def jwt_secret_value(self) -> str | None:
        return self.auth_jwt_secret.get_secret_value() if self.auth_jwt_secret else None

    def secret_key_bytes(self) -> bytes:
        if self.secret_key is None:
            raise ConfigError("PARLEY_SECRET_KEY is not set; call prepare_settings() first.")
        return _decode_secret_key(self.secret_key.get_secret_value())


def _decode_secret_key(value: str) -> bytes:
    import base64
    import binascii

    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ConfigError("PARLEY_SECRET_KEY must be 32 bytes encoded as URL-safe base64.") from exc
    if len(raw) != 32:
        raise ConfigError(
            f"PARLEY_SECRET_KEY must decode to 32 bytes (AES-256), it decodes to {len(raw)} bytes."
        )
    return raw


def _read_or_create(path: Path, make: str) -> str:
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(make + "\n")
    path.chmod(0o600)
    return make


def _new_secret_key() -> str:
    import base64

    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def prepare_settings(settings: Settings | None = None) -> Settings:
    """Validate the configuration and fill in first-run secrets kept in the data dir."""
    settings = settings or Settings()
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"PARLEY_DATA_DIR {settings.data_dir} cannot be created: {exc.strerror}.") from exc

    url = settings.resolved_database_url
    if not (url.startswith("sqlite+aiosqlite://") or url.startswith("postgresql+asyncpg://")):
        raise ConfigError(
            "PARLEY_DATABASE_URL must start with sqlite+aiosqlite:// or postgresql+asyncpg:// "
            f"(got a URL starting with {url.split('://', 1)[0]!r})."
        )
    if bool(settings.auth_issuer) != bool(settings.auth_audience) and settings.auth_jwks_url:
        # An external identity provider is trusted only for a named issuer and audience pair.
        raise ConfigError("PARLEY_AUTH_ISSUER and PARLEY_AUTH_AUDIENCE must be set together with a JWKS URL.")
    if settings.auth_jwks_url and not settings.auth_jwks_url.startswith(("https://", "http://")):
        raise ConfigError("PARLEY_AUTH_JWKS_URL must be an http(s) URL.")
    if settings.auth_jwt_secret is not None and len(settings.auth_jwt_secret.get_secret_value()) < 32:
        raise ConfigError("PARLEY_AUTH_JWT_SECRET must be at least 32 characters long.")
    login = (settings.login_authorize_url, settings.login_token_url, settings.login_userinfo_url)
    if settings.login_client_id or any(login):
        if not (settings.login_client_id and all(login)):
            raise ConfigError(
                "Signing in through an identity provider needs PARLEY_LOGIN_CLIENT_ID, "
                "PARLEY_LOGIN_AUTHORIZE_URL, PARLEY_LOGIN_TOKEN_URL and PARLEY_LOGIN_USERINFO_URL together."
            )
        if not all(url.startswith(("https://", "http://")) for url in login if url):
            raise ConfigError(
                "PARLEY_LOGIN_AUTHORIZE_URL, _TOKEN_URL and _USERINFO_URL must be http(s) URLs."
            )
    for entry in settings.outbound_allowlist:
        _check_allowlist_entry(entry)
    if settings.redis_url is not None:
        _check_redis_url(settings)

    if settings.auth_jwt_secret is None and not settings.auth_jwks_url:
        secret = _read_or_create(settings.data_dir / "jwt_secret", secrets.token_urlsafe(48))
        settings.auth_jwt_secret = SecretStr(secret)
    if settings.secret_key is None:
        settings.secret_key = SecretStr(_read_or_create(settings.data_dir / "secret_key", _new_secret_key()))
    settings.secret_key_bytes()  # raises ConfigError when malformed
    return settings


def _check_redis_url(settings: Settings) -> None:
    # The URL may carry a password: messages name the scheme only, never the URL.
    url = settings.redis_url.strip() if settings.redis_url else ""
    if not url:
        settings.redis_url = None
        return
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in ("redis", "rediss"):
        shown = f"a URL starting with {scheme!r}" if scheme else "a value without a scheme"
        raise ConfigError(f"PARLEY_REDIS_URL must start with redis:// or rediss:// (got {shown}).")
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        raise ConfigError(
            "PARLEY_REDIS_URL is not a valid URL (check the host, port and password)."
        ) from None
    if not parts.hostname:
        raise ConfigError("PARLEY_REDIS_URL must name a host, e.g. redis://127.0.0.1:6379/0.")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ConfigError("PARLEY_REDIS_URL's path must be a database number, e.g. redis://host:6379/0.")
    settings.redis_url = url


def _check_allowlist_entry(entry: str) -> None:
    if "/" in entry:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError as exc:
            raise ConfigError(f"PARLEY_OUTBOUND_ALLOWLIST entry {entry!r} is not a valid CIDR.") from exc
