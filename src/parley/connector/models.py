"""Tables of the connector's own database (migrated by ``parley/connector/migrations``).

``connector_orders`` keeps every Order field as a typed column (queryable, inspectable) plus
``payload``: the order's JSON, serialized once at import time so that a lookup is bytes out.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from parley.connector.schemas import ORDER_FIELDS, FieldKind

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

_COLUMN_TYPES: dict[FieldKind, Any] = {
    FieldKind.INTEGER: sa.Integer(),
    FieldKind.NUMBER: sa.Double(),
    FieldKind.JSON: sa.JSON(none_as_null=True),
    FieldKind.STRING: sa.Text(),
    FieldKind.DATE: sa.Text(),  # ISO 8601 text of varying precision (date, date-time or year-month)
}


def _order_columns() -> list[sa.Column[Any]]:
    columns: list[sa.Column[Any]] = [sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=False)]
    for name, kind in ORDER_FIELDS[1:]:
        nullable = kind is FieldKind.JSON
        columns.append(sa.Column(name, _COLUMN_TYPES[kind], nullable=nullable))
    return columns


orders = sa.Table(
    "connector_orders",
    metadata,
    *_order_columns(),
    sa.Column("payload", sa.LargeBinary(), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

api_keys = sa.Table(
    "connector_api_keys",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("key_id", sa.String(32), nullable=False, unique=True),
    sa.Column("key_hash", sa.String(64), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    # A name identifies one active key; a revoked key keeps its name for the record.
    sa.Index(
        "uq_connector_api_keys_active_name",
        "name",
        unique=True,
        sqlite_where=sa.text("revoked_at IS NULL"),
        postgresql_where=sa.text("revoked_at IS NULL"),
    ),
)
