"""evaluation suites, runs and per-scenario results

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "evaluation_suites",
        sa.Column("dataset_id", sa.String(length=40), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=True),
        sa.Column("required_for_publish", sa.Boolean(), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_evaluation_suites_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_evaluation_suites")),
    )
    with op.batch_alter_table("evaluation_suites", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evaluation_suites_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_evaluation_suites_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "evaluation_runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("dataset_id", sa.String(length=40), nullable=False),
        sa.Column("suite_name", sa.String(length=200), nullable=False),
        sa.Column("suite_hash", sa.String(length=64), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=False),
        sa.Column("flow_name", sa.String(length=200), nullable=False),
        sa.Column("flow_version", sa.Integer(), nullable=True),
        sa.Column("definition_hash", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=10), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluation_runs")),
    )
    with op.batch_alter_table("evaluation_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evaluation_runs_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_evaluation_runs_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_evaluation_runs_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "evaluation_results",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("item_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("chunk", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scenario", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("failures", sa.JSON(), nullable=False),
        sa.Column("transcript", sa.JSON(), nullable=False),
        sa.Column("tool_calls", sa.JSON(), nullable=False),
        sa.Column("turns", sa.JSON(), nullable=False),
        sa.Column("signals", sa.JSON(), nullable=False),
        sa.Column("rubric", sa.JSON(), nullable=False),
        sa.Column("variables", sa.JSON(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("end_reason", sa.String(length=60), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["evaluation_runs.id"],
            name=op.f("fk_evaluation_results_run_id_evaluation_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluation_results")),
    )
    with op.batch_alter_table("evaluation_results", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evaluation_results_run_id"), ["run_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_evaluation_results_organization_id"), ["organization_id"], unique=False
        )


def downgrade() -> None:
    op.drop_table("evaluation_results")
    op.drop_table("evaluation_runs")
    op.drop_table("evaluation_suites")
