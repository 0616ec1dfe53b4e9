"""The table service's own tables besides the event store: live status (for deadlines and
listing), the first answer of every idempotent Act, and which replica owns which partition."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
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
    # The `mahjong.match.v1` partition its TableAssigned was read from: which replica owns it
    # (`ownership`). NULL on tables opened before replicas (migration 0005) or without Kafka.
    Column("match_partition", Integer, nullable=True),
)

table_partition_owners = Table(
    "table_partition_owners",
    metadata,
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    # Where the owning replica serves TableService (its advertised host:port).
    Column("owner_address", String(255), nullable=False),
    # The owning process (a fresh id per start), so a restarted replica's claim is a new epoch.
    Column("owner_instance", String(64), nullable=False),
    # Raised by every change of owner: a replica that finds its own epoch still there owned the
    # partition all along and keeps its tables in memory; otherwise it reloads them from the store.
    Column("epoch", BigInteger, nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("topic", "partition"),
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
