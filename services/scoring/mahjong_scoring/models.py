"""The scoring service's own tables (SQLAlchemy Core), next to the platform's event store and outbox.

- `scoring_games`: one row per table: room, coefficient N, whether scoring settles its variant
  (always true now that both families settle; kept until a migration drops it), the number of
  settlement lines, whether `GameSettled` was emitted, and `last_sequence`: the sequence of the
  table event that last changed the row (its `TableOpened`, an event with settlement lines, the
  `GameEnded`), so the row is written when its figures change, not for every batch of events.
  (It used to be the last event applied, written on every batch: the same value once a game has
  ended, `GameEnded` being its last event. The last event applied is the inbox's highest.)
- `scoring_table_events`: the table events of every game as received (the consumer's inbox), so
  the in-memory fold of a game can be rebuilt after a restart without re-reading Kafka.
- `scoring_lines`: every `SettlementInstructed`, keyed by its instruction id, in line order, with
  the serialized message (what `GetGameSettlement` returns) and its main columns for queries.
- `scoring_players`: per game and seat: the account, signed points and beans, and the rake.

Nothing here holds a wall-clock time: a rebuild from the same table events gives identical rows.
The migration history in ``alembic/versions`` spells these tables out; a test checks that the
migrated database and this metadata agree.
"""

from __future__ import annotations

from mahjong_platform.schema import platform_metadata
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)

TABLE_ID_MAX_LENGTH = 200
ROOM_ID_MAX_LENGTH = 200
EVENT_ID_MAX_LENGTH = 36
ACCOUNT_MAX_LENGTH = 200
REASON_MAX_LENGTH = 40

scoring_metadata = MetaData()

scoring_games = Table(
    "scoring_games",
    scoring_metadata,
    Column("table_id", String(TABLE_ID_MAX_LENGTH), primary_key=True),
    Column("room_id", String(ROOM_ID_MAX_LENGTH), nullable=False),
    Column("coefficient", BigInteger, nullable=False),
    Column("settles", Boolean, nullable=False),
    Column("last_sequence", BigInteger, nullable=False),
    Column("line_count", Integer, nullable=False),
    Column("settled", Boolean, nullable=False),
)

scoring_table_events = Table(
    "scoring_table_events",
    scoring_metadata,
    Column("table_id", String(TABLE_ID_MAX_LENGTH), nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("envelope", LargeBinary, nullable=False),
    PrimaryKeyConstraint("table_id", "sequence", name="pk_scoring_table_events"),
    UniqueConstraint("event_id", name="uq_scoring_table_events_event_id"),
)

scoring_lines = Table(
    "scoring_lines",
    scoring_metadata,
    Column("instruction_id", String(EVENT_ID_MAX_LENGTH), primary_key=True),
    Column("table_id", String(TABLE_ID_MAX_LENGTH), nullable=False),
    Column("line", Integer, nullable=False),
    Column("reason", String(REASON_MAX_LENGTH), nullable=False),
    Column("payer_account", String(ACCOUNT_MAX_LENGTH), nullable=False),
    Column("total_beans", BigInteger, nullable=False),
    Column("source_event_id", String(EVENT_ID_MAX_LENGTH), nullable=False),
    Column("instruction", LargeBinary, nullable=False),
    UniqueConstraint("table_id", "line", name="uq_scoring_lines_table_line"),
    Index("ix_scoring_lines_source_event_id", "source_event_id"),
)

scoring_players = Table(
    "scoring_players",
    scoring_metadata,
    Column("table_id", String(TABLE_ID_MAX_LENGTH), nullable=False),
    Column("seat", Integer, nullable=False),
    Column("account", String(ACCOUNT_MAX_LENGTH), nullable=False),
    Column("points", BigInteger, nullable=False),
    Column("beans", BigInteger, nullable=False),
    Column("rake_beans", BigInteger, nullable=False),
    PrimaryKeyConstraint("table_id", "seat", name="pk_scoring_players"),
)

PROJECTION_TABLES = (scoring_games, scoring_table_events, scoring_lines, scoring_players)
"""The scoring projection's tables, in the order a digest or comparison reads them."""


def all_metadata() -> list[MetaData]:
    """The platform's and scoring's metadata: everything the scoring database holds."""
    return [platform_metadata, scoring_metadata]
