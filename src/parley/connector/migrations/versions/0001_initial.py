"""Initial schema: orders (typed columns plus the pre-serialized JSON payload) and API keys.

Revision ID: 0001
Revises:
Create Date: 2025-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "connector_orders",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("station_id", sa.Integer(), nullable=False),
        sa.Column("missing_parts", sa.Integer(), nullable=False),
        sa.Column("zu_verplanen", sa.Integer(), nullable=False),
        sa.Column("est_hours_karo", sa.Double(), nullable=False),
        sa.Column("est_hours_lack", sa.Double(), nullable=False),
        sa.Column("est_hours_mech", sa.Double(), nullable=False),
        sa.Column("total_net_cost", sa.Double(), nullable=False),
        sa.Column("total_gross_cost", sa.Double(), nullable=False),
        sa.Column("insurance_json", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("costs_json", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("short_name", sa.Text(), nullable=False),
        sa.Column("plate", sa.Text(), nullable=False),
        sa.Column("person", sa.Text(), nullable=False),
        sa.Column("phone", sa.Text(), nullable=False),
        sa.Column("email", sa.Text(), nullable=False),
        sa.Column("damage", sa.Text(), nullable=False),
        sa.Column("project_status", sa.Text(), nullable=False),
        sa.Column("station_state", sa.Text(), nullable=False),
        sa.Column("parts_status", sa.Text(), nullable=False),
        sa.Column("shop_date", sa.Text(), nullable=False),
        sa.Column("repair_date", sa.Text(), nullable=False),
        sa.Column("finish_date", sa.Text(), nullable=False),
        sa.Column("planned_delivery_date", sa.Text(), nullable=False),
        sa.Column("appointment_date", sa.Text(), nullable=False),
        sa.Column("vin", sa.Text(), nullable=False),
        sa.Column("kba", sa.Text(), nullable=False),
        sa.Column("manufacturer_name", sa.Text(), nullable=False),
        sa.Column("model_name", sa.Text(), nullable=False),
        sa.Column("sub_model_name", sa.Text(), nullable=False),
        sa.Column("engine_type", sa.Text(), nullable=False),
        sa.Column("engine_size", sa.Text(), nullable=False),
        sa.Column("engine_power", sa.Text(), nullable=False),
        sa.Column("engine_code", sa.Text(), nullable=False),
        sa.Column("curb_weight", sa.Text(), nullable=False),
        sa.Column("gross_weight", sa.Text(), nullable=False),
        sa.Column("first_registration", sa.Text(), nullable=False),
        sa.Column("last_registration", sa.Text(), nullable=False),
        sa.Column("hu_au", sa.Text(), nullable=False),
        sa.Column("mileage", sa.Text(), nullable=False),
        sa.Column("country_of_origin", sa.Text(), nullable=False),
        sa.Column("vehicle_owner", sa.Text(), nullable=False),
        sa.Column("owner_phone", sa.Text(), nullable=False),
        sa.Column("owner_address", sa.Text(), nullable=False),
        sa.Column("external_calculation", sa.Text(), nullable=False),
        sa.Column("express_link", sa.Text(), nullable=False),
        sa.Column("address", sa.Text(), nullable=False),
        sa.Column("zip_code", sa.Text(), nullable=False),
        sa.Column("city", sa.Text(), nullable=False),
        sa.Column("country", sa.Text(), nullable=False),
        sa.Column("plate_city", sa.Text(), nullable=False),
        sa.Column("plate_city_phonetic", sa.Text(), nullable=False),
        sa.Column("remarks", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connector_orders")),
    )
    op.create_table(
        "connector_api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connector_api_keys")),
        sa.UniqueConstraint("key_id", name=op.f("uq_connector_api_keys_key_id")),
    )
    op.create_index(
        "uq_connector_api_keys_active_name",
        "connector_api_keys",
        ["name"],
        unique=True,
        sqlite_where=sa.text("revoked_at IS NULL"),
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_connector_api_keys_active_name", table_name="connector_api_keys")
    op.drop_table("connector_api_keys")
    op.drop_table("connector_orders")
