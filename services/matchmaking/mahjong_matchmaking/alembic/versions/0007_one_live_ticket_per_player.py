"""At most one live (queued or seated) ticket per player, kept by the database: two Enqueues of one
player into two rooms lock two different `room_queues` rows, so on PostgreSQL neither saw the
other's uncommitted ticket and both committed. With this partial unique index the second insert
waits for the first transaction and fails once it commits (`servicer` answers it as the refusal of
a player already queued or seated).

Built CONCURRENTLY on PostgreSQL (`create_index_concurrently`). The upgrade fails while a player
has two live tickets (what the race left; PostgreSQL's error names the player): cancel one first.

Revision ID: 0007
Revises: 0006
"""

from alembic import op
from mahjong_platform.schema import create_index_concurrently

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_index_concurrently(
        op,
        "uq_tickets_live_player",
        "tickets",
        ["player_id"],
        unique=True,
        where="state IN ('queued', 'seated')",
    )


def downgrade() -> None:
    op.drop_index("uq_tickets_live_player", table_name="tickets")
