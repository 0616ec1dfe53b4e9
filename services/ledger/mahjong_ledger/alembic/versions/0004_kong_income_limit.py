"""Ledger transfers record the kong income a refund or call transfer was limited to (RULES.md 1.9a.1).

NULL for every other transfer (and for every transfer posted before this version).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ledger_transfers", sa.Column("income_limit_beans", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger_transfers") as batch:
        batch.drop_column("income_limit_beans")
