"""The one approved way to reach organization-owned rows: every query is scoped by organization.

Another organization's id is indistinguishable from a missing one (404), so ids cannot be probed.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.errors import NotFound

T = TypeVar("T")


def scoped(model: type[T], organization_id: str) -> Select[T]:
    column: Any = model.organization_id  # type: ignore[attr-defined]
    return select(model).where(column == organization_id)


async def get_owned(
    session: AsyncSession, model: type[T], resource_id: str, organization_id: str, what: str
) -> T:
    column: Any = model.id  # type: ignore[attr-defined]
    row = await session.scalar(scoped(model, organization_id).where(column == resource_id))
    if row is None:
        raise NotFound(f"{what} {resource_id!r} was not found in this organization.")
    return row
