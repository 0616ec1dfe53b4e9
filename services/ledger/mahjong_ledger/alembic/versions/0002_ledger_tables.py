"""Ledger tables: accounts (materialized balances), transfers, postings, settled games.

Spelled out rather than read from models.py, so this migration never changes with the code.

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
        "ledger_accounts",
        sa.Column("account", sa.String(71), primary_key=True),
        sa.Column("balance_beans", sa.BigInteger(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("account = 'world' OR balance_beans >= 0", name="ck_ledger_accounts_not_negative"),
    )
    op.create_table(
        "ledger_transfers",
        sa.Column("transfer_id", sa.String(36), primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("order_key", sa.String(300), nullable=False),
        sa.Column("table_id", sa.String(200), nullable=False),
        sa.Column("room_id", sa.String(100), nullable=False),
        sa.Column("reason", sa.String(50), nullable=False),
        sa.Column("payer_account", sa.String(71), nullable=False),
        sa.Column("requested_beans", sa.BigInteger(), nullable=False),
        sa.Column("posted_beans", sa.BigInteger(), nullable=False),
        sa.Column("request_digest", sa.String(64), nullable=False),
        sa.Column("source_event_id", sa.String(36), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("memo", sa.String(500), nullable=False),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kind", "order_key", name="uq_ledger_transfers_kind_order_key"),
        sa.CheckConstraint(
            "posted_beans >= 0 AND posted_beans <= requested_beans", name="ck_ledger_transfers_posted"
        ),
    )
    op.create_index("ix_ledger_transfers_table_id", "ledger_transfers", ["table_id"])
    op.create_index("ix_ledger_transfers_posted_at", "ledger_transfers", ["posted_at"])
    op.create_table(
        "ledger_postings",
        sa.Column(
            "posting_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column(
            "transfer_id",
            sa.String(36),
            sa.ForeignKey("ledger_transfers.transfer_id", name="fk_ledger_postings_transfer"),
            nullable=False,
        ),
        sa.Column("account", sa.String(71), nullable=False),
        sa.Column("beans", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(50), nullable=False),
        sa.Column("balance_after_beans", sa.BigInteger(), nullable=False),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("transfer_id", "account", name="uq_ledger_postings_transfer_account"),
    )
    op.create_index("ix_ledger_postings_account_posting_id", "ledger_postings", ["account", "posting_id"])
    op.create_table(
        "ledger_games",
        sa.Column("table_id", sa.String(200), primary_key=True),
        sa.Column("room_id", sa.String(100), nullable=False),
        sa.Column("instruction_count", sa.Integer(), nullable=False),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ledger_games")
    op.drop_index("ix_ledger_postings_account_posting_id", table_name="ledger_postings")
    op.drop_table("ledger_postings")
    op.drop_index("ix_ledger_transfers_posted_at", table_name="ledger_transfers")
    op.drop_index("ix_ledger_transfers_table_id", table_name="ledger_transfers")
    op.drop_table("ledger_transfers")
    op.drop_table("ledger_accounts")
