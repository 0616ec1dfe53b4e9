"""Platform schema version 2: the indexes the retention worker prunes by.

Revision ID: 0003
Revises: 0002
"""

from alembic import op
from mahjong_platform.schema import create_retention_indexes, drop_retention_indexes

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_retention_indexes(op)


def downgrade() -> None:
    drop_retention_indexes(op)
