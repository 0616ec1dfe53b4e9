"""Platform schema version 4: one outbox message per event and topic (the seats topic's copies).

Revision ID: 0006
Revises: 0005
"""

from alembic import op
from mahjong_platform.schema import make_outbox_unique_per_event, make_outbox_unique_per_topic

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    make_outbox_unique_per_topic(op)


def downgrade() -> None:
    make_outbox_unique_per_event(op)
