"""Matchmaking's tables: tickets (the projection of ticket events), per-room queue counters, the
first answer of every idempotent call, and the input topics the seat-release consumer no longer reads."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
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

TICKET_QUEUED = "queued"
TICKET_SEATED = "seated"
TICKET_CANCELLED = "cancelled"
TICKET_FINISHED = "finished"
LIVE_TICKET_STATES = (TICKET_QUEUED, TICKET_SEATED)
"""A player has at most one ticket in these states (the unique index `uq_tickets_live_player`)."""

tickets = Table(
    "tickets",
    metadata,
    Column("ticket_id", String(36), primary_key=True),
    Column("player_id", String(128), nullable=False),
    Column("room_id", String(64), nullable=False),
    # queued → seated → finished, or queued → cancelled.
    Column("state", String(16), nullable=False),
    # Position in the room's queue: first come, first seated.
    Column("queued_order", BigInteger, nullable=False),
    Column("table_id", String(36), nullable=True),
    Column("seat", Integer, nullable=True),
    Column("queued_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

room_queues = Table(
    "room_queues",
    metadata,
    Column("room_id", String(64), primary_key=True),
    # Locked FOR UPDATE by every enqueue of the room, so two enqueues never form overlapping tables.
    Column("last_order", BigInteger, nullable=False),
)

idempotent_answers = Table(
    "idempotent_answers",
    metadata,
    Column("player_id", String(128), nullable=False),
    Column("method", String(64), nullable=False),
    Column("idempotency_key", String(128), nullable=False),
    Column("answer", LargeBinary, nullable=False),
    # `mahjong_platform.idempotency.request_digest` of the first request; NULL on older rows.
    Column("request_digest", String(64), nullable=True),
    PrimaryKeyConstraint("player_id", "method", "idempotency_key"),
)

retired_inputs = Table(
    "retired_inputs",
    metadata,
    Column("consumer_group", String(200), nullable=False),
    Column("topic", String(249), nullable=False),
    Column("retired_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("consumer_group", "topic"),
)
"""A topic a consumer group read before and reads no more, once everything it had there is applied:
the seat releases moved from `mahjong.table.v1` to `mahjong.seats.v1` (`table_topic_backlog`)."""
