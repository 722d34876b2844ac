"""Cursor pagination: ``limit`` (default 50, max 200) and an opaque ``cursor``; newest first.

Ids are time-sortable ULIDs, so the cursor is simply the last id seen, wrapped so clients treat it as
opaque.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Query
from pydantic import BaseModel
from sqlalchemy import ColumnElement, Select, bindparam
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql.elements import KeyedColumnElement

from parley.kit.errors import BadRequest

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class PageParams(BaseModel):
    limit: int = DEFAULT_LIMIT
    after_id: str | None = None


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(f"v1:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise BadRequest("The cursor is not valid; pass the next_cursor of a previous page.") from exc
    if not raw.startswith("v1:") or len(raw) > 100:
        raise BadRequest("The cursor is not valid; pass the next_cursor of a previous page.")
    return raw[3:]


async def _page_params(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page (1-200).")] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, Query(max_length=120, description="next_cursor of the previous page.")
    ] = None,
) -> PageParams:
    return PageParams(limit=limit, after_id=decode_cursor(cursor) if cursor else None)


Pagination = Annotated[PageParams, Depends(_page_params)]


def _keyset(stmt: Select[Any], id_column: InstrumentedAttribute[str], params: PageParams) -> Select[Any]:
    if params.after_id is not None:
        stmt = stmt.where(id_column < params.after_id)
    return stmt.order_by(id_column.desc()).limit(params.limit + 1)


def _page(
    rows: list[Any], id_column: InstrumentedAttribute[str], params: PageParams
) -> tuple[list[Any], str | None]:
    next_cursor = None
    if len(rows) > params.limit:
        rows = rows[: params.limit]
        next_cursor = encode_cursor(getattr(rows[-1], id_column.key))
    return rows, next_cursor


async def paginate(
    session: AsyncSession, stmt: Select[Any], id_column: InstrumentedAttribute[str], params: PageParams
) -> tuple[list[Any], str | None]:
    """Run ``stmt`` newest first from the cursor on; return the rows and the next cursor."""
    rows = list((await session.scalars(_keyset(stmt, id_column, params))).all())
    return _page(rows, id_column, params)


def bound_keyset(stmt: Select[Any], id_column: KeyedColumnElement[str], *, after: bool) -> Select[Any]:
    """:func:`paginate`'s order and limit with bound values (``keyset_values``), for a statement built
    once and run for many pages (``after``: it continues from a cursor)."""
    if after:
        stmt = stmt.where(id_column < bindparam("after_id"))
    limit: ColumnElement[int] = bindparam("page_limit")
    return stmt.order_by(id_column.desc()).limit(limit)


def keyset_values(params: PageParams) -> dict[str, Any]:
    """The values :func:`bound_keyset`'s statement binds: one row more than the page shows, so that
    whether there is a next page is known."""
    values: dict[str, Any] = {"page_limit": params.limit + 1}
    if params.after_id is not None:
        values["after_id"] = params.after_id
    return values


def page_of(
    rows: list[Any], params: PageParams, last_id: Callable[[Any], str]
) -> tuple[list[Any], str | None]:
    """The page's rows of a :func:`bound_keyset` result and the next cursor (``last_id``: a row's id)."""
    if len(rows) > params.limit:
        del rows[params.limit :]
        return rows, encode_cursor(last_id(rows[-1]))
    return rows, None
