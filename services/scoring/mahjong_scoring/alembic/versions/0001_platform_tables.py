"""Platform tables: event store, outbox, consumer positions, processed events.

Revision ID: 0001
Revises:
"""

from alembic import op
from mahjong_platform.schema import create_platform_tables, drop_platform_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_platform_tables(op)


def downgrade() -> None:
    drop_platform_tables(op)
