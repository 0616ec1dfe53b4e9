"""The request digest next to each stored first answer (the one idempotency rule): a retry with the
same key and a different request is refused instead of answered. NULL on answers stored before.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("idempotent_answers") as batch:
        batch.add_column(sa.Column("request_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("idempotent_answers") as batch:
        batch.drop_column("request_digest")
