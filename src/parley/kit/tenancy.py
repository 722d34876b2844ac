"""The one approved way to reach organization-owned rows: every query is scoped by organization.

Another organization's id is indistinguishable from a missing one (404), so ids cannot be probed.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Row, Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.db import read_first
from parley.kit.errors import NotFound
from parley.kit.prepared import one_row

T = TypeVar("T")


def scoped(model: type[T], organization_id: str) -> Select[T]:
    column: Any = model.organization_id  # type: ignore[attr-defined]
    return select(model).where(column == organization_id)


# One statement per model (and lock), built once: a request's look-up by id binds its two values
# instead of building a new statement (and its cache key) every time.
_BY_ID: dict[tuple[type[Any], bool], Select[Any]] = {}


def _by_id(model: type[T], lock: bool) -> Select[T]:
    statement = _BY_ID.get((model, lock))
    if statement is None:
        columns: Any = model
        statement = select(model).where(
            columns.organization_id == bindparam("organization_id"), columns.id == bindparam("resource_id")
        )
        if lock:
            statement = statement.with_for_update()
        _BY_ID[(model, lock)] = statement
    return statement


async def get_owned(
    session: AsyncSession,
    model: type[T],
    resource_id: str,
    organization_id: str,
    what: str,
    *,
    lock: bool = False,
) -> T:
    """The organization's row by id (``lock``: ``SELECT ... FOR UPDATE`` where the engine has it); a 404
    that reads the same for another organization's id as for a missing one."""
    row = await session.scalar(
        _by_id(model, lock), {"organization_id": organization_id, "resource_id": resource_id}
    )
    if row is None:
        raise NotFound(f"{what} {resource_id!r} was not found in this organization.")
    return row


# The same look-up as a plain row: the table's columns, no ORM instance (built once per model).
_ROW_BY_ID: dict[type[Any], Select[Any]] = {}


async def read_owned(
    session: AsyncSession, model: type[Any], resource_id: str, organization_id: str, what: str
) -> Row[Any]:
    """The organization's row by id as a read-only ``Row`` (its columns as attributes), for a handler
    that only answers it: no ORM instance, identity map or change tracking is built (≈ a tenth of a
    simple GET's time). The same 404 as :func:`get_owned`; use that one for anything that changes the
    row or follows its relationships."""
    statement = _ROW_BY_ID.get(model)
    if statement is None:
        table: Any = model.__table__
        statement = _ROW_BY_ID[model] = one_row(
            select(table).where(
                table.c.organization_id == bindparam("organization_id"),
                table.c.id == bindparam("resource_id"),
            )
        )
    row = await read_first(
        session, statement, {"organization_id": organization_id, "resource_id": resource_id}
    )
    if row is None:
        raise NotFound(f"{what} {resource_id!r} was not found in this organization.")
    return row
