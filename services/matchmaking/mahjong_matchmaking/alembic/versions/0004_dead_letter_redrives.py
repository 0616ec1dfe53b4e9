"""Platform schema version 3: the dead letters re-driven into this service (mjctl dlq redrive).

Revision ID: 0004
Revises: 0003
"""

from alembic import op
from mahjong_platform.schema import create_dead_letter_redrives_table, drop_dead_letter_redrives_table

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_dead_letter_redrives_table(op)


def downgrade() -> None:
    drop_dead_letter_redrives_table(op)
