"""The table service's own tables besides the event store: live status (for deadlines and
listing) and the first answer of every idempotent Act."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
)

metadata = MetaData()

table_status = Table(
    "table_status",
    metadata,
    Column("table_id", String(36), primary_key=True),
    Column("room_id", String(64), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("phase", String(16), nullable=False),
    Column("ended", Boolean, nullable=False),
    Column("last_event_at", DateTime(timezone=True), nullable=False),
    # When the server acts for whoever it waits on; NULL when it waits on nobody.
    Column("deadline_at", DateTime(timezone=True), nullable=True),
)

table_answers = Table(
    "table_answers",
    metadata,
    Column("table_id", String(36), nullable=False),
    Column("player_id", String(128), nullable=False),
    Column("idempotency_key", String(128), nullable=False),
    Column("answer", LargeBinary, nullable=False),
    # `mahjong_platform.idempotency.request_digest` of the first request; NULL on older rows.
    Column("request_digest", String(64), nullable=True),
    PrimaryKeyConstraint("table_id", "player_id", "idempotency_key"),
)
