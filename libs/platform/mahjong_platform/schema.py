"""The platform's own tables: event store, outbox, consumer positions and processed events.

Two views of the same schema live here on purpose:

* `platform_metadata` and its `Table`s are what the runtime code queries. Services may pass it
  to alembic (together with their own metadata) so autogenerate sees these tables as known.
* `create_platform_tables(op)` / `drop_platform_tables(op)` are the frozen migration steps a
  service calls from its first alembic revision. A migration must not change when the code
  changes, so they spell the columns out instead of reading `platform_metadata`; a later change
  to the platform schema comes as a new pair of functions that services call from a new revision.
  A test checks that the migrated database and `platform_metadata` agree.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)

STREAM_ID_MAX_LENGTH = 200
EVENT_ID_MAX_LENGTH = 36
EVENT_TYPE_MAX_LENGTH = 200
TOPIC_MAX_LENGTH = 249
CONSUMER_GROUP_MAX_LENGTH = 200

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
_OutboxId = BigInteger().with_variant(Integer(), "sqlite")

platform_metadata = MetaData()

stored_events = Table(
    "stored_events",
    platform_metadata,
    Column("stream_id", String(STREAM_ID_MAX_LENGTH), nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("event_type", String(EVENT_TYPE_MAX_LENGTH), nullable=False),
    Column("topic", String(TOPIC_MAX_LENGTH), nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("envelope", LargeBinary, nullable=False),
    PrimaryKeyConstraint("stream_id", "sequence", name="pk_stored_events"),
    UniqueConstraint("event_id", name="uq_stored_events_event_id"),
)
"""Every event ever appended, one row per event; (stream_id, sequence) unique forbids forks."""

outbox_messages = Table(
    "outbox_messages",
    platform_metadata,
    Column("id", _OutboxId, primary_key=True, autoincrement=True),
    Column("topic", String(TOPIC_MAX_LENGTH), nullable=False),
    Column("message_key", String(STREAM_ID_MAX_LENGTH), nullable=False),
    Column("message_value", LargeBinary, nullable=False),
    Column("event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sent_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("event_id", "topic", name="uq_outbox_messages_event_id_topic"),
    Index(
        "ix_outbox_messages_unsent",
        "id",
        postgresql_where=sqlalchemy.text("sent_at IS NULL"),
        sqlite_where=sqlalchemy.text("sent_at IS NULL"),
    ),
    Index("ix_outbox_messages_sent_at", "sent_at"),
)
"""Messages waiting for the relay; written in the same transaction as the events they carry. One
message per event and topic: a seat-releasing event has two (`Topics.destinations`)."""

consumer_positions = Table(
    "consumer_positions",
    platform_metadata,
    Column("consumer_group", String(CONSUMER_GROUP_MAX_LENGTH), nullable=False),
    Column("topic", String(TOPIC_MAX_LENGTH), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("consumer_group", "topic", "partition", name="pk_consumer_positions"),
)
"""Where each consumer group resumes per partition: the source of truth, not Kafka's offsets."""

processed_events = Table(
    "processed_events",
    platform_metadata,
    Column("consumer_group", String(CONSUMER_GROUP_MAX_LENGTH), nullable=False),
    Column("event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("processed_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("consumer_group", "event_id", name="pk_processed_events"),
    Index("ix_processed_events_processed_at", "processed_at"),
)
"""Event ids a consumer group has applied, so a re-sent duplicate is recognised and skipped."""

dead_letter_redrives = Table(
    "dead_letter_redrives",
    platform_metadata,
    Column("dlq_topic", String(TOPIC_MAX_LENGTH), nullable=False),
    Column("dlq_partition", Integer, nullable=False),
    Column("dlq_offset", BigInteger, nullable=False),
    Column("consumer_group", String(CONSUMER_GROUP_MAX_LENGTH), nullable=False),
    Column("event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("redriven_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("dlq_topic", "dlq_partition", "dlq_offset", name="pk_dead_letter_redrives"),
)
"""Dead letters re-driven into this service (`dead_letters.redrive`), written in the transaction
that applied them; never pruned, so a dead letter is re-driven once however old it is."""


def create_platform_tables(op: Any) -> None:
    """Alembic upgrade step (platform schema version 1): create the four platform tables.

    Call it from a service's first revision: `def upgrade(): create_platform_tables(op)`.
    `op` is `alembic.op` (typed loosely because alembic's proxy module has no useful type).
    """
    op.create_table(
        "stored_events",
        sqlalchemy.Column("stream_id", sqlalchemy.String(200), nullable=False),
        sqlalchemy.Column("sequence", sqlalchemy.BigInteger(), nullable=False),
        sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
        sqlalchemy.Column("event_type", sqlalchemy.String(200), nullable=False),
        sqlalchemy.Column("topic", sqlalchemy.String(249), nullable=False),
        sqlalchemy.Column("occurred_at", sqlalchemy.DateTime(timezone=True), nullable=False),
        sqlalchemy.Column("recorded_at", sqlalchemy.DateTime(timezone=True), nullable=False),
        sqlalchemy.Column("envelope", sqlalchemy.LargeBinary(), nullable=False),
        sqlalchemy.PrimaryKeyConstraint("stream_id", "sequence", name="pk_stored_events"),
        sqlalchemy.UniqueConstraint("event_id", name="uq_stored_events_event_id"),
    )
    op.create_table(
        "outbox_messages",
        sqlalchemy.Column(
            "id",
            sqlalchemy.BigInteger().with_variant(sqlalchemy.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sqlalchemy.Column("topic", sqlalchemy.String(249), nullable=False),
        sqlalchemy.Column("message_key", sqlalchemy.String(200), nullable=False),
        sqlalchemy.Column("message_value", sqlalchemy.LargeBinary(), nullable=False),
        sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
        sqlalchemy.Column("created_at", sqlalchemy.DateTime(timezone=True), nullable=False),
        sqlalchemy.Column("sent_at", sqlalchemy.DateTime(timezone=True), nullable=True),
        sqlalchemy.UniqueConstraint("event_id", name="uq_outbox_messages_event_id"),
    )
    op.create_index(
        "ix_outbox_messages_unsent",
        "outbox_messages",
        ["id"],
        postgresql_where=sqlalchemy.text("sent_at IS NULL"),
        sqlite_where=sqlalchemy.text("sent_at IS NULL"),
    )
    op.create_table(
        "consumer_positions",
        sqlalchemy.Column("consumer_group", sqlalchemy.String(200), nullable=False),
        sqlalchemy.Column("topic", sqlalchemy.String(249), nullable=False),
        sqlalchemy.Column("partition", sqlalchemy.Integer(), nullable=False),
        sqlalchemy.Column("next_offset", sqlalchemy.BigInteger(), nullable=False),
        sqlalchemy.Column("updated_at", sqlalchemy.DateTime(timezone=True), nullable=False),
        sqlalchemy.PrimaryKeyConstraint("consumer_group", "topic", "partition", name="pk_consumer_positions"),
    )
    op.create_table(
        "processed_events",
        sqlalchemy.Column("consumer_group", sqlalchemy.String(200), nullable=False),
        sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
        sqlalchemy.Column("processed_at", sqlalchemy.DateTime(timezone=True), nullable=False),
        sqlalchemy.PrimaryKeyConstraint("consumer_group", "event_id", name="pk_processed_events"),
    )


def drop_platform_tables(op: Any) -> None:
    """Alembic downgrade step matching `create_platform_tables`: drop the four platform tables."""
    op.drop_table("processed_events")
    op.drop_table("consumer_positions")
    op.drop_index("ix_outbox_messages_unsent", table_name="outbox_messages")
    op.drop_table("outbox_messages")
    op.drop_table("stored_events")


def create_retention_indexes(op: Any) -> None:
    """Alembic upgrade step (platform schema version 2): the indexes `retention` prunes by.

    Call it from a service revision after `create_platform_tables`. On PostgreSQL the indexes are
    built CONCURRENTLY (outside the migration's transaction), so a deploy onto tables that grew for
    a long time does not block the outbox and the consumers while they build.
    """
    create_index_concurrently(op, "ix_outbox_messages_sent_at", "outbox_messages", ["sent_at"])
    create_index_concurrently(op, "ix_processed_events_processed_at", "processed_events", ["processed_at"])


def create_index_concurrently(
    op: Any, name: str, table: str, columns: list[str], *, unique: bool = False, where: str | None = None
) -> None:
    """Create an index (partial when `where` is given: an SQL condition on the table's columns), on
    PostgreSQL CONCURRENTLY (in an autocommit block), so that it can be retried after a failed attempt.

    The build of a large table outlasts the engine's statement timeout (`create_engine_for`), so it
    runs with none (reset afterwards: the connection goes back to the pool). A cancelled or crashed
    CONCURRENTLY build leaves an INVALID index of that name, which made every later upgrade fail
    ("already exists"): such a leftover is dropped first; a valid one (built, but the revision's
    later steps failed) is kept (IF NOT EXISTS).
    """
    condition = None if where is None else sqlalchemy.text(where)
    with op.get_context().autocommit_block():
        if op.get_bind().dialect.name != "postgresql":
            op.create_index(name, table, columns, unique=unique, sqlite_where=condition)
            return
        op.execute("SET statement_timeout = 0")
        try:
            if op.get_bind().execute(_INDEX_IS_INVALID, {"name": name}).scalar():
                op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.create_index(
                name,
                table,
                columns,
                unique=unique,
                postgresql_concurrently=True,
                postgresql_where=condition,
                if_not_exists=True,
            )
        finally:
            op.execute("RESET statement_timeout")


_INDEX_IS_INVALID = sqlalchemy.text(
    "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"
)


def drop_retention_indexes(op: Any) -> None:
    """Alembic downgrade step matching `create_retention_indexes`."""
    op.drop_index("ix_processed_events_processed_at", table_name="processed_events")
    op.drop_index("ix_outbox_messages_sent_at", table_name="outbox_messages")


def create_dead_letter_redrives_table(op: Any) -> None:
    """Alembic upgrade step (platform schema version 3): the table `dead_letters.redrive` records in."""
    op.create_table(
        "dead_letter_redrives",
        sqlalchemy.Column("dlq_topic", sqlalchemy.String(249), nullable=False),
        sqlalchemy.Column("dlq_partition", sqlalchemy.Integer(), nullable=False),
        sqlalchemy.Column("dlq_offset", sqlalchemy.BigInteger(), nullable=False),
        sqlalchemy.Column("consumer_group", sqlalchemy.String(200), nullable=False),
        sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
        sqlalchemy.Column("outcome", sqlalchemy.String(32), nullable=False),
        sqlalchemy.Column("redriven_at", sqlalchemy.DateTime(timezone=True), nullable=False),
        sqlalchemy.PrimaryKeyConstraint(
            "dlq_topic", "dlq_partition", "dlq_offset", name="pk_dead_letter_redrives"
        ),
    )


def drop_dead_letter_redrives_table(op: Any) -> None:
    """Alembic downgrade step matching `create_dead_letter_redrives_table`."""
    op.drop_table("dead_letter_redrives")


_OUTBOX_EVENT_ID_UNIQUE = "uq_outbox_messages_event_id"
_OUTBOX_EVENT_ID_TOPIC_UNIQUE = "uq_outbox_messages_event_id_topic"


def make_outbox_unique_per_topic(op: Any) -> None:
    """Alembic upgrade step (platform schema version 4): an event may have one outbox message per
    topic (unique event id and topic, instead of unique event id), so a seat-releasing table event
    is queued for `mahjong.seats.v1` too, in the same transaction (`Topics.destinations`).

    PostgreSQL: the new unique index is built CONCURRENTLY (the outbox keeps being written), then
    becomes the constraint, then the old one is dropped: the event id stays unique per topic all
    along. SQLite cannot drop a table constraint: the table is copied (its indexes named and made
    again, the partial one with its WHERE).
    """
    if op.get_bind().dialect.name == "postgresql":
        create_index_concurrently(
            op, _OUTBOX_EVENT_ID_TOPIC_UNIQUE, "outbox_messages", ["event_id", "topic"], unique=True
        )
        op.execute(
            f"ALTER TABLE outbox_messages ADD CONSTRAINT {_OUTBOX_EVENT_ID_TOPIC_UNIQUE} "
            f"UNIQUE USING INDEX {_OUTBOX_EVENT_ID_TOPIC_UNIQUE}"
        )
        op.drop_constraint(_OUTBOX_EVENT_ID_UNIQUE, "outbox_messages", type_="unique")
        return
    _recreate_sqlite_outbox(
        op, drop=_OUTBOX_EVENT_ID_UNIQUE, add=(_OUTBOX_EVENT_ID_TOPIC_UNIQUE, ["event_id", "topic"])
    )


def make_outbox_unique_per_event(op: Any) -> None:
    """Alembic downgrade step matching `make_outbox_unique_per_topic`; fails while an event has two
    outbox messages (delete the sent seats-topic copies first)."""
    if op.get_bind().dialect.name == "postgresql":
        op.create_unique_constraint(_OUTBOX_EVENT_ID_UNIQUE, "outbox_messages", ["event_id"])
        op.drop_constraint(_OUTBOX_EVENT_ID_TOPIC_UNIQUE, "outbox_messages", type_="unique")
        return
    _recreate_sqlite_outbox(
        op, drop=_OUTBOX_EVENT_ID_TOPIC_UNIQUE, add=(_OUTBOX_EVENT_ID_UNIQUE, ["event_id"])
    )


def _recreate_sqlite_outbox(op: Any, *, drop: str, add: tuple[str, list[str]]) -> None:
    # The indexes are dropped before and made after the copy, so that they come back exactly as
    # `create_platform_tables` and `create_retention_indexes` made them.
    op.drop_index("ix_outbox_messages_unsent", table_name="outbox_messages")
    op.drop_index("ix_outbox_messages_sent_at", table_name="outbox_messages")
    with op.batch_alter_table("outbox_messages", recreate="always") as batch:
        batch.drop_constraint(drop, type_="unique")
        batch.create_unique_constraint(add[0], add[1])
    op.create_index(
        "ix_outbox_messages_unsent",
        "outbox_messages",
        ["id"],
        sqlite_where=sqlalchemy.text("sent_at IS NULL"),
    )
    op.create_index("ix_outbox_messages_sent_at", "outbox_messages", ["sent_at"])
