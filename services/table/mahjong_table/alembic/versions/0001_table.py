"""Platform tables (the game event store), live table status and idempotent answers.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from mahjong_platform.schema import create_platform_tables, drop_platform_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_platform_tables(op)
    op.create_table(
        "table_status",
        sa.Column("table_id", sa.String(36), primary_key=True),
        sa.Column("room_id", sa.String(64), nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("ended", sa.Boolean, nullable=False),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_table_status_live_deadline", "table_status", ["ended", "deadline_at"])
    op.create_table(
        "table_answers",
        sa.Column("table_id", sa.String(36), nullable=False),
        sa.Column("player_id", sa.String(128), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("answer", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("table_id", "player_id", "idempotency_key"),
    )


def downgrade() -> None:
    op.drop_table("table_answers")
    op.drop_table("table_status")
    drop_platform_tables(op)
