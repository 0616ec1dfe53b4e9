"""Table-engine replicas (README "Scale-out: replicas"): the owner directory, one row per partition
of the match topic naming the replica that owns its tables (its address) and the claim's epoch, and
each table's match partition on its status row (so a replica's timers read only its own tables).
NULL on tables opened before; every replica may act on those (the expected-version append keeps
that to one action each).

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "table_partition_owners",
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("owner_address", sa.String(255), nullable=False),
        sa.Column("owner_instance", sa.String(64), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition"),
    )
    with op.batch_alter_table("table_status") as batch:
        batch.add_column(sa.Column("match_partition", sa.Integer, nullable=True))
    op.create_index("ix_table_status_partition_live", "table_status", ["match_partition", "ended"])


def downgrade() -> None:
    op.drop_index("ix_table_status_partition_live", "table_status")
    with op.batch_alter_table("table_status") as batch:
        batch.drop_column("match_partition")
    op.drop_table("table_partition_owners")
