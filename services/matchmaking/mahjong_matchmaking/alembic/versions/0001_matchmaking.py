"""Platform tables, tickets, room queues and idempotent answers.

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
        "tickets",
        sa.Column("ticket_id", sa.String(36), primary_key=True),
        sa.Column("player_id", sa.String(128), nullable=False),
        sa.Column("room_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("queued_order", sa.BigInteger, nullable=False),
        sa.Column("table_id", sa.String(36), nullable=True),
        sa.Column("seat", sa.Integer, nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_tickets_room_state_order", "tickets", ["room_id", "state", "queued_order"])
    op.create_index("ix_tickets_player_state", "tickets", ["player_id", "state"])
    op.create_index("ix_tickets_table", "tickets", ["table_id"])
    op.create_table(
        "room_queues",
        sa.Column("room_id", sa.String(64), primary_key=True),
        sa.Column("last_order", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "idempotent_answers",
        sa.Column("player_id", sa.String(128), nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("answer", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("player_id", "method", "idempotency_key"),
    )


def downgrade() -> None:
    op.drop_table("idempotent_answers")
    op.drop_table("room_queues")
    op.drop_table("tickets")
    drop_platform_tables(op)
