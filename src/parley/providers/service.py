"""Provider configurations: validated against the provider's model, secrets sealed to their row."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr
from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.kit.body import validate_body
from parley.kit.crypto import mask, row_secrets
from parley.kit.db import short_read
from parley.kit.errors import NotFound
from parley.kit.ids import new_id
from parley.kit.orgcache import cached, watch
from parley.kit.tenancy import scoped
from parley.providers.catalog import PROVIDERS, ProviderSettings, ProviderSpec
from parley.providers.checks import CheckResult, run_check
from parley.providers.models import ProviderConfig
from parley.providers.schemas import ProviderConfigOut, ProviderOut

MASK_PREFIX = "••••"


def get_spec(key: str) -> ProviderSpec:
    spec = PROVIDERS.get(key)
    if spec is None:
        raise NotFound(f"There is no provider {key!r}; the providers are {', '.join(sorted(PROVIDERS))}.")
    return spec


async def list_providers(session: AsyncSession, context: OrgContext, kind: str | None) -> list[ProviderOut]:
    configured = set(
        (
            await session.scalars(
                scoped(ProviderConfig, context.organization_id).with_only_columns(ProviderConfig.provider_key)
            )
        ).all()
    )
    return [
        ProviderOut(
            key=spec.key,
            kind=spec.kind,
            name=spec.name,
            description=spec.description,
            offline=spec.offline,
            default=spec.default,
            configured=spec.key in configured,
            secret_fields=spec.secret_fields,
            config_schema=spec.config_schema(),
        )
        for spec in PROVIDERS.values()
        if kind is None or spec.kind == kind
    ]


async def find_config(session: AsyncSession, context: OrgContext, key: str) -> ProviderConfig | None:
    return await session.scalar(
        scoped(ProviderConfig, context.organization_id).where(ProviderConfig.provider_key == key)
    )


# Which providers an organization has configured (their keys, no secret): a turn asks whether it may
# talk to the model. Kept per organization in the process, dropped when a configuration change commits.
_CONFIGURED = "providers.configured"
watch(_CONFIGURED, ProviderConfig)
_CONFIGURED_KEYS = select(ProviderConfig.provider_key).where(
    ProviderConfig.organization_id == bindparam("organization")
)


async def is_configured(session: AsyncSession, organization_id: str, key: str) -> bool:
    """Whether the organization has a configuration for provider ``key`` (cached, kit/orgcache.py)."""

    async def load() -> frozenset[str]:
        return frozenset((await session.scalars(_CONFIGURED_KEYS, {"organization": organization_id})).all())

    return key in await cached(session, _CONFIGURED, organization_id, load)


async def get_config(session: AsyncSession, context: OrgContext, spec: ProviderSpec) -> ProviderConfig:
    row = await find_config(session, context, spec.key)
    if row is None:
        raise NotFound(f"Provider {spec.key!r} is not configured in this organization.")
    return row


def to_out(settings: Settings, spec: ProviderSpec, row: ProviderConfig) -> ProviderConfigOut:
    secrets = row_secrets(settings, row).open_all(row.secrets)
    config: dict[str, Any] = dict(row.settings)
    for field in spec.secret_fields:
        config[field] = mask(secrets[field]) if field in secrets else None
    return ProviderConfigOut(
        key=spec.key,
        kind=spec.kind,
        config=config,
        secrets_set=sorted(secrets),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _is_kept(value: Any, stored: str | None) -> bool:
    """A secret left as it is: omitted, or sent back as the masked hint the API showed."""
    return (
        isinstance(value, str)
        and stored is not None
        and (value == mask(stored) or value.startswith(MASK_PREFIX))
    )


async def put_config(
    session: AsyncSession, settings: Settings, context: OrgContext, spec: ProviderSpec, body: dict[str, Any]
) -> ProviderConfig:
    row = await find_config(session, context, spec.key)
    stored = row_secrets(settings, row).open_all(row.secrets) if row is not None else {}
    data = dict(body)
    for field in spec.secret_fields:
        if field not in data or _is_kept(data[field], stored.get(field)):
            if field in stored:
                data[field] = stored[field]
            else:
                data.pop(field, None)
    config = validate_body(spec.config_model, data)

    plain_settings: dict[str, Any] = {}
    secret_values: dict[str, str] = {}
    for field, value in config:
        if field in spec.secret_fields:
            if isinstance(value, SecretStr):
                secret_values[field] = value.get_secret_value()
        else:
            plain_settings[field] = value

    if row is None:
        row = ProviderConfig(
            id=new_id("pcfg"),
            organization_id=context.organization_id,
            provider_key=spec.key,
            settings={},
            secrets={},
        )
        session.add(row)
    row.settings = plain_settings
    row.secrets = row_secrets(settings, row).seal_all(secret_values)
    row.updated_by = context.actor_user_id
    await session.flush()
    await session.refresh(row)
    return row


async def delete_config(session: AsyncSession, context: OrgContext, spec: ProviderSpec) -> ProviderConfig:
    row = await get_config(session, context, spec)
    await session.delete(row)
    await session.flush()
    return row


def load_config(settings: Settings, spec: ProviderSpec, row: ProviderConfig | None) -> ProviderSettings:
    """The validated configuration with its secrets in plain text, for talking to the provider."""
    if row is None:
        if not spec.offline:
            raise NotFound(f"Provider {spec.key!r} is not configured in this organization.")
        return spec.config_model()
    data: dict[str, Any] = {**row.settings, **row_secrets(settings, row).open_all(row.secrets)}
    return spec.config_model.model_validate(data)


async def check(
    session: AsyncSession, settings: Settings, context: OrgContext, spec: ProviderSpec
) -> tuple[CheckResult, float]:
    # Read in a short read of its own: no transaction or pool connection waits on the provider.
    async with short_read(session) as reader:
        row = await find_config(reader, context, spec.key)
        try:
            config = load_config(settings, spec, row)
        except ValueError:
            return CheckResult(
                False, "The stored configuration is incomplete (a secret no longer decrypts); save it again."
            ), 0.0
    return await run_check(settings, spec.key, config)
