"""Cursor pagination: ``limit`` (default 50, max 200) and an opaque ``cursor``; newest first.

Ids are time-sortable ULIDs, so the cursor is simply the last id seen, wrapped so clients treat it as
opaque.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Query
from pydantic import BaseModel
from sqlalchemy import Row, Select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

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


async def paginate_rows(
    session: AsyncSession, stmt: Select[Any], id_column: InstrumentedAttribute[str], params: PageParams
) -> tuple[list[Row[Any]], str | None]:
    """:func:`paginate` for a select of columns (``id_column`` among them): rows, not ORM objects, so a
    list reads only what its items show."""
    rows = list((await session.execute(_keyset(stmt, id_column, params))).all())
    return _page(rows, id_column, params)
