"""Scoring tables: games, received table events, settlement lines, player totals.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scoring_games",
        sa.Column("table_id", sa.String(200), primary_key=True),
        sa.Column("room_id", sa.String(200), nullable=False),
        sa.Column("coefficient", sa.BigInteger(), nullable=False),
        sa.Column("settles", sa.Boolean(), nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), nullable=False),
        sa.Column("line_count", sa.Integer(), nullable=False),
        sa.Column("settled", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "scoring_table_events",
        sa.Column("table_id", sa.String(200), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "sequence", name="pk_scoring_table_events"),
        sa.UniqueConstraint("event_id", name="uq_scoring_table_events_event_id"),
    )
    op.create_table(
        "scoring_lines",
        sa.Column("instruction_id", sa.String(36), primary_key=True),
        sa.Column("table_id", sa.String(200), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.Column("payer_account", sa.String(200), nullable=False),
        sa.Column("total_beans", sa.BigInteger(), nullable=False),
        sa.Column("source_event_id", sa.String(36), nullable=False),
        sa.Column("instruction", sa.LargeBinary(), nullable=False),
        sa.UniqueConstraint("table_id", "line", name="uq_scoring_lines_table_line"),
    )
    op.create_index("ix_scoring_lines_source_event_id", "scoring_lines", ["source_event_id"])
    op.create_table(
        "scoring_players",
        sa.Column("table_id", sa.String(200), nullable=False),
        sa.Column("seat", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(200), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.Column("beans", sa.BigInteger(), nullable=False),
        sa.Column("rake_beans", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "seat", name="pk_scoring_players"),
    )


def downgrade() -> None:
    op.drop_table("scoring_players")
    op.drop_index("ix_scoring_lines_source_event_id", table_name="scoring_lines")
    op.drop_table("scoring_lines")
    op.drop_table("scoring_table_events")
    op.drop_table("scoring_games")
