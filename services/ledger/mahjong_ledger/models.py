"""The ledger's own tables (SQLAlchemy Core), next to the platform's event store and outbox.

- `ledger_accounts`: the materialized balance per account, updated in the same transaction as the
  postings; a check constraint keeps every account except ``world`` at zero or above, so even a
  bug cannot commit a negative player balance.
- `ledger_transfers`: one row per posted order (settlement instruction or deposit), unique on
  (kind, order key): the idempotency key is enforced by the database, not only by the code.
- `ledger_postings`: the legs; ``posting_id`` orders them globally and is the keyset for paging.
  Each leg records the account's balance after it, so a statement needs no running sums.
- `ledger_games`: what ``GameSettled`` announced per table, for the "every instruction posted
  exactly once" check of reconciliation.

The migration history in ``alembic/versions`` spells these tables out; a test checks that the
migrated database and this metadata agree.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)

from mahjong_ledger.domain import (
    ACCOUNT_NAME_MAX_LENGTH,
    MEMO_MAX_LENGTH,
    ORDER_KEY_MAX_LENGTH,
    REASON_MAX_LENGTH,
    ROOM_ID_MAX_LENGTH,
    TABLE_ID_MAX_LENGTH,
)

TRANSFER_ID_LENGTH = 36
DIGEST_LENGTH = 64
KIND_MAX_LENGTH = 20
EVENT_ID_MAX_LENGTH = 36

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
_PostingId = BigInteger().with_variant(Integer(), "sqlite")

ledger_metadata = MetaData()

ledger_accounts = Table(
    "ledger_accounts",
    ledger_metadata,
    Column("account", String(ACCOUNT_NAME_MAX_LENGTH), primary_key=True),
    Column("balance_beans", BigInteger, nullable=False),
    Column("opened_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("account = 'world' OR balance_beans >= 0", name="ck_ledger_accounts_not_negative"),
)

ledger_transfers = Table(
    "ledger_transfers",
    ledger_metadata,
    Column("transfer_id", String(TRANSFER_ID_LENGTH), primary_key=True),
    Column("kind", String(KIND_MAX_LENGTH), nullable=False),
    Column("order_key", String(ORDER_KEY_MAX_LENGTH), nullable=False),
    Column("table_id", String(TABLE_ID_MAX_LENGTH), nullable=False),
    Column("room_id", String(ROOM_ID_MAX_LENGTH), nullable=False),
    Column("reason", String(REASON_MAX_LENGTH), nullable=False),
    Column("payer_account", String(ACCOUNT_NAME_MAX_LENGTH), nullable=False),
    Column("requested_beans", BigInteger, nullable=False),
    Column("posted_beans", BigInteger, nullable=False),
    Column("request_digest", String(DIGEST_LENGTH), nullable=False),
    Column("source_event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("line", Integer, nullable=False),
    Column("memo", String(MEMO_MAX_LENGTH), nullable=False),
    Column("posted_at", DateTime(timezone=True), nullable=False),
    # RULES.md 1.9a.1: for a kong refund or call transfer, the kong income it could move at most.
    Column("income_limit_beans", BigInteger, nullable=True),
    UniqueConstraint("kind", "order_key", name="uq_ledger_transfers_kind_order_key"),
    CheckConstraint(
        "posted_beans >= 0 AND posted_beans <= requested_beans", name="ck_ledger_transfers_posted"
    ),
    Index("ix_ledger_transfers_table_id", "table_id"),
    Index("ix_ledger_transfers_posted_at", "posted_at"),
)

ledger_postings = Table(
    "ledger_postings",
    ledger_metadata,
    Column("posting_id", _PostingId, primary_key=True, autoincrement=True),
    Column(
        "transfer_id",
        String(TRANSFER_ID_LENGTH),
        ForeignKey("ledger_transfers.transfer_id", name="fk_ledger_postings_transfer"),
        nullable=False,
    ),
    Column("account", String(ACCOUNT_NAME_MAX_LENGTH), nullable=False),
    Column("beans", BigInteger, nullable=False),
    Column("reason", String(REASON_MAX_LENGTH), nullable=False),
    Column("balance_after_beans", BigInteger, nullable=False),
    Column("posted_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("transfer_id", "account", name="uq_ledger_postings_transfer_account"),
    Index("ix_ledger_postings_account_posting_id", "account", "posting_id"),
)

ledger_games = Table(
    "ledger_games",
    ledger_metadata,
    Column("table_id", String(TABLE_ID_MAX_LENGTH), primary_key=True),
    Column("room_id", String(ROOM_ID_MAX_LENGTH), nullable=False),
    Column("instruction_count", Integer, nullable=False),
    Column("settled_at", DateTime(timezone=True), nullable=False),
)
"""One row per ``GameSettled``: how many instructions the scoring service says the game has."""

LEDGER_TABLES = (ledger_accounts, ledger_transfers, ledger_postings, ledger_games)


def all_metadata() -> list[MetaData]:
    """The platform's tables and the ledger's, for alembic's autogenerate comparison."""
    from mahjong_platform.schema import platform_metadata

    return [platform_metadata, ledger_metadata]


__all__ = [
    "LEDGER_TABLES",
    "all_metadata",
    "ledger_accounts",
    "ledger_games",
    "ledger_metadata",
    "ledger_postings",
    "ledger_transfers",
]
