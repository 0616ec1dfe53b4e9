"""The input topics a consumer group no longer reads (the seat releases left the table topic for
mahjong.seats.v1: `mahjong_matchmaking.table_topic_backlog` records here that the table topic's
backlog is applied).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "retired_inputs",
        sa.Column("consumer_group", sa.String(200), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("consumer_group", "topic"),
    )


def downgrade() -> None:
    op.drop_table("retired_inputs")
