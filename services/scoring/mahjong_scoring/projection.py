"""The settlement projection: the tracked consumer's handler for `mahjong.table.v1`.

For a batch of table events, in the consumer's one transaction (with their Kafka positions):

1. the event is stored in `scoring_table_events` (the inbox a game's fold is rebuilt from);
2. the game's pure fold (`game_settlement.settle_table_event`) says which settlement events it
   causes;
3. those are appended to the scoring event store (stream = table id), which writes them to the
   outbox for `mahjong.settlement.v1` in the same transaction, and recorded as projection rows
   (`scoring_lines`, `scoring_players`, `scoring_games`).

So an instruction is published if and only if its table event is marked applied: no dual write.

The inbox is also what makes the handler idempotent (`IDEMPOTENT_HANDLER`): an event at or before
its game's last applied sequence is looked up there and skipped when received before (a different
event at a taken sequence is refused), so the tracked consumer keeps no ``processed_events`` rows
for scoring (one row per table event, and a query per batch, less). A crash re-reads from the
positions stored in the batch's transaction; a re-send of the relay reaches the inbox check.

A batch costs a fixed number of statements, whatever its size: one query for each game's last
sequence in the inbox (an event at or before it is looked up there, as above), then the folds run
in memory, and one multi-row insert (or executemany) each for the inbox, the lines, the
settlement events, the new games and players, and one update each for the games and seats whose
figures the batch changed (a settlement line or `GameSettled`; most events change none: a game's
row is written at its opening, kongs, wins and end, not in every batch it appears in).
`apply_table_event` is a batch of one.

The fold of a game in progress is kept in memory between events, keyed by table id and checked
against the game's last sequence in the inbox before use: after a rollback (a failed handler, a
crash before commit) or a restart the memory no longer matches the database and the fold is
rebuilt from the inbox, so the memory can never make the projection diverge from what was
committed.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
from collections.abc import Sequence
from typing import Final

import sqlalchemy
from mahjong.v1 import envelope_pb2, settlement_events_pb2
from mahjong_platform.database import PerDialect, insert_rows
from mahjong_platform.driver_sql import Sql, run, run_many
from mahjong_platform.envelopes import parse_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.tracked_consumer import Delivery, MessagePosition
from sqlalchemy.orm import Session

from mahjong_scoring.game_facts import GameFactsError
from mahjong_scoring.game_settlement import (
    GameSettlementState,
    new_game_settlement,
    settle_table_event,
)
from mahjong_scoring.models import scoring_games, scoring_lines, scoring_players, scoring_table_events

logger = logging.getLogger(__name__)

CONSUMER_GROUP: Final = "scoring-settlement"
GAMES_IN_MEMORY_MAX: Final = 1_000
TABLE_PAYLOAD_FIELD_NUMBERS: Final = range(30, 80)
IDEMPOTENT_HANDLER: Final = True
"""The handler skips re-sent events through the inbox (see the module docstring): the tracked
consumer and the rebuild apply it without ``processed_events``."""


class SettlementProjection:
    """The `TrackedConsumer` handler of scoring: `projection(session, envelope, position)`.

    Holds only a cache of games in progress; every fact lives in the database, so one instance
    may serve a consumer that is closed and recreated (the service runtime restarts crashed
    workers with the same handler).
    """

    def __init__(self, event_store: EventStore, games_in_memory_max: int = GAMES_IN_MEMORY_MAX) -> None:
        assert games_in_memory_max >= 1, games_in_memory_max
        self._event_store = event_store
        self._games_in_memory_max = games_in_memory_max
        self._games: collections.OrderedDict[str, tuple[int, GameSettlementState]] = collections.OrderedDict()

    def __call__(self, session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        """Apply one table event (a batch of one); other payloads are ignored."""
        self.apply_batch(session, [Delivery(envelope, position)])

    def apply_batch(self, session: Session, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Apply a batch of table events in order (the tracked consumer's `BatchHandler`); the
        deliveries applied: all but the events received before (re-sends, see the module)."""
        received_before = apply_table_events(
            session,
            self._event_store,
            [delivery.envelope for delivery in deliveries if is_table_event(delivery.envelope)],
            self,
        )
        return [delivery for delivery in deliveries if delivery.envelope.event_id not in received_before]

    def cached(self, table_id: str, last_sequence: int) -> GameSettlementState | None:
        """The game's fold in memory, if it is the fold of exactly the stored events."""
        entry = self._games.get(table_id)
        if entry is None or entry[0] != last_sequence:
            return None
        self._games.move_to_end(table_id)
        return entry[1]

    def remember(self, table_id: str, last_sequence: int, state: GameSettlementState) -> None:
        """Keep the fold after `last_sequence` for the next event (forgotten once settled)."""
        if state.settled:
            self._games.pop(table_id, None)
            return
        self._games[table_id] = (last_sequence, state)
        self._games.move_to_end(table_id)
        while len(self._games) > self._games_in_memory_max:
            self._games.popitem(last=False)


def is_table_event(envelope: envelope_pb2.Envelope) -> bool:
    """Whether the envelope carries a table event (the only ones the projection applies)."""
    payload_name = envelope.WhichOneof("payload")
    assert payload_name is not None, "the tracked consumer only passes parsed envelopes"
    return _is_table_payload(payload_name)


@functools.cache
def _is_table_payload(payload_name: str) -> bool:
    field_number = envelope_pb2.Envelope.DESCRIPTOR.fields_by_name[payload_name].number
    return field_number in TABLE_PAYLOAD_FIELD_NUMBERS


def apply_table_event(
    session: Session,
    event_store: EventStore,
    envelope: envelope_pb2.Envelope,
    cache: SettlementProjection | None = None,
) -> None:
    """Apply one table event to the projection through `session` (no commit: the caller's job)."""
    apply_table_events(session, event_store, [envelope], cache)


@dataclasses.dataclass
class _Game:
    """One game while a batch is applied: where it started and where the batch has taken it."""

    first_sequence: int
    last_sequence: int
    state: GameSettlementState
    changed_at: int = 0
    """The sequence of the batch's last event that changed the game's row (its opening, or one
    with settlement events), 0 for none: what the row's `last_sequence` records."""
    settlement_events: list[envelope_pb2.Envelope] = dataclasses.field(default_factory=list)


def apply_table_events(
    session: Session,
    event_store: EventStore,
    envelopes: Sequence[envelope_pb2.Envelope],
    cache: SettlementProjection | None = None,
) -> set[str]:
    """Apply table events in order through `session` with set-based SQL (no commit); the ids of
    those skipped as received before."""
    received_before: set[str] = set()
    if not envelopes:
        return received_before
    table_ids = sorted({envelope.stream_id for envelope in envelopes})
    connection = session.connection()  # found once: each `session.connection()` costs a statement's worth
    stored_sequences = _last_sequences(session, table_ids, connection)
    games: dict[str, _Game] = {}
    inbox_rows: list[dict[str, object]] = []
    seen: set[str] = set()
    for envelope in envelopes:
        if envelope.event_id in seen:
            continue  # Repeated within the batch.
        seen.add(envelope.event_id)
        table_id = envelope.stream_id
        game = games.get(table_id)
        if game is None:
            game = games[table_id] = _load_game(session, table_id, stored_sequences[table_id], cache)
        if envelope.sequence <= game.last_sequence and _received(session, envelope.event_id):
            # A re-sent duplicate (the tracked consumer leaves them to this check, see
            # IDEMPOTENT_HANDLER): the inbox is read only for an event that is not after its
            # game's last one, not for every batch.
            received_before.add(envelope.event_id)
            continue
        _fold(game, table_id, envelope)
        inbox_rows.append(
            {
                "table_id": table_id,
                "sequence": envelope.sequence,
                "event_id": envelope.event_id,
                "envelope": serialize_envelope(envelope),
            }
        )
    if not inbox_rows:
        return received_before
    insert_rows(session, scoring_table_events, inbox_rows)
    _append_settlement_events(session, event_store, games)
    _store_games(session, connection, games)
    if cache is not None:
        for table_id, game in games.items():
            cache.remember(table_id, game.last_sequence, game.state)
    return received_before


def _load_game(
    session: Session, table_id: str, last_sequence: int, cache: SettlementProjection | None
) -> _Game:
    state = cache.cached(table_id, last_sequence) if cache is not None else None
    if state is None:
        # A game with nothing received yet (its TableOpened is in this batch) has nothing to
        # rebuild from: every new game came here, and its inbox query cost 5% of scoring's CPU.
        state = new_game_settlement() if last_sequence == 0 else _rebuild(session, table_id)
    return _Game(first_sequence=last_sequence, last_sequence=last_sequence, state=state)


def _fold(game: _Game, table_id: str, envelope: envelope_pb2.Envelope) -> None:
    if envelope.sequence <= game.last_sequence:
        raise GameFactsError(
            f"table {table_id}: event {envelope.event_id} has sequence {envelope.sequence}, "
            f"but sequence {game.last_sequence} was already applied with another event id"
        )
    opened_before = game.state.opened is not None
    game.state, output = settle_table_event(game.state, envelope)
    for notice in output.notices:
        logger.warning(
            "settlement notice: %s",
            notice.message,
            extra={"table_id": table_id, "source_event_id": notice.source},
        )
    game.last_sequence = envelope.sequence
    game.settlement_events.extend(output.envelopes)
    if output.envelopes or not opened_before:
        game.changed_at = envelope.sequence


def _append_settlement_events(session: Session, event_store: EventStore, games: dict[str, _Game]) -> None:
    streams = [table_id for table_id, game in games.items() if game.settlement_events]
    if not streams:
        return
    # Without a savepoint: every caller rolls its whole transaction back on any error (the tracked
    # consumer's batch, then each event alone); a writer that appended to a stream since the
    # versions were read fails the append on the stream's unique key.
    event_store.append_after_current(
        session, [(table_id, games[table_id].settlement_events) for table_id in streams], savepoint=False
    )
    lines = [
        _line_row(envelope.settlement_instructed)
        for table_id in streams
        for envelope in games[table_id].settlement_events
        if envelope.WhichOneof("payload") == "settlement_instructed"
    ]
    if lines:
        insert_rows(session, scoring_lines, lines)


# The statements, built once (building one costs more than running it on SQLite).
_RECEIVED = sqlalchemy.select(scoring_table_events.c.event_id).where(
    scoring_table_events.c.event_id == sqlalchemy.bindparam("wanted_event_id")
)


def _last_sequences_statement(dialect_name: str) -> sqlalchemy.TextClause:
    """Each listed game's highest sequence in the inbox (NULL for none), one correlated ``max``
    per game: both databases read it from the end of the game's range of the (table id,
    sequence) primary key. The ``GROUP BY`` over ``table_id IN (...)`` it replaces read every
    event received of each game of the batch: for 32 games of 250 events, ~89,000 VM steps and
    1.9 ms on SQLite (650 steps and 0.2-0.5 ms now), 8,000 rows and 1.9 ms on PostgreSQL (32
    backward index probes, 0.5 ms now); one query per batch, a fifth of scoring's Python samples
    at saturation. The ids are one parameter: a JSON array on SQLite, an array on PostgreSQL."""
    ids, table_id = (
        ("json_each(:table_ids) AS ids", "ids.value")
        if dialect_name == "sqlite"
        else ("unnest(CAST(:table_ids AS VARCHAR[])) AS ids(table_id)", "ids.table_id")
    )
    return sqlalchemy.text(
        f"SELECT {table_id} AS table_id, (SELECT max(events.sequence) FROM scoring_table_events AS"
        f" events WHERE events.table_id = {table_id}) AS last_sequence FROM {ids}"
    )


_LAST_SEQUENCES = PerDialect(_last_sequences_statement)
_LAST_SEQUENCES_SQLITE = Sql.of(str(_last_sequences_statement("sqlite")).replace(":table_ids", "?"))
_RECEIVED_OF_GAME = (
    sqlalchemy.select(scoring_table_events.c.envelope)
    .where(scoring_table_events.c.table_id == sqlalchemy.bindparam("rebuilt_table_id"))
    .order_by(scoring_table_events.c.sequence)
)
_UPDATE_GAME = scoring_games.update().where(scoring_games.c.table_id == sqlalchemy.bindparam("game_of"))
_UPDATE_PLAYER = scoring_players.update().where(
    scoring_players.c.table_id == sqlalchemy.bindparam("game_of"),
    scoring_players.c.seat == sqlalchemy.bindparam("seat_of"),
)
_GAME_COLUMNS_SET = ("room_id", "coefficient", "settles", "last_sequence", "line_count", "settled")
_UPDATE_GAME_SQLITE = Sql.of(
    f"UPDATE scoring_games SET {', '.join(f'{column} = ?' for column in _GAME_COLUMNS_SET)} "
    "WHERE table_id = ?"
)
_UPDATE_PLAYER_SQLITE = Sql.of(
    "UPDATE scoring_players SET points = ?, beans = ?, rake_beans = ? WHERE table_id = ? AND seat = ?"
)


def _received(session: Session, event_id: str) -> bool:
    return session.execute(_RECEIVED, {"wanted_event_id": event_id}).first() is not None


def _last_sequences(
    session: Session, table_ids: Sequence[str], connection: sqlalchemy.Connection | None = None
) -> dict[str, int]:
    """Each game's last sequence received, 0 for a game with nothing received yet (SQLite: on the
    driver's cursor, the same text as `_LAST_SEQUENCES`' there). `connection`: the session's."""
    if connection is None:
        connection = session.connection()
    if connection.dialect.name == "sqlite":
        rows = run(connection, _LAST_SEQUENCES_SQLITE, (json.dumps(list(table_ids)),))
        return {table_id: last_sequence or 0 for table_id, last_sequence in rows}
    return {
        row.table_id: int(row.last_sequence or 0)
        for row in session.execute(_LAST_SEQUENCES(session), {"table_ids": list(table_ids)})
    }


def _rebuild(session: Session, table_id: str) -> GameSettlementState:
    """The game's fold from the events received so far (their outputs were recorded then)."""
    state = new_game_settlement()
    for row in session.execute(_RECEIVED_OF_GAME, {"rebuilt_table_id": table_id}):
        state, _ = settle_table_event(state, parse_envelope(bytes(row.envelope)))
    return state


def _line_row(instruction: settlement_events_pb2.SettlementInstructed) -> dict[str, object]:
    return {
        "instruction_id": instruction.instruction_id,
        "table_id": instruction.table_id,
        "line": instruction.line,
        "reason": instruction.reason,
        "payer_account": instruction.payer_account,
        "total_beans": sum(payee.beans for payee in instruction.payees),
        "source_event_id": instruction.source_event_id,
        "instruction": instruction.SerializeToString(deterministic=True),
    }


def _store_games(session: Session, connection: sqlalchemy.Connection, games: dict[str, _Game]) -> None:
    """The rows and seats of the games whose figures the batch changed, as it left them: inserted
    when new, else updated. The row's `last_sequence` is the sequence of the event that last
    changed it, so the rows do not depend on where the batches were cut (a rebuild compares)."""
    new_games: list[dict[str, object]] = []
    new_players: list[dict[str, object]] = []
    game_updates: list[dict[str, object]] = []
    player_updates: list[dict[str, object]] = []
    for table_id, game in games.items():
        if not game.changed_at:
            continue  # Nothing the row shows changed (the events are in the inbox).
        opened = game.state.opened
        assert opened is not None, "settle_table_event raised for an event before TableOpened"
        values = {
            "room_id": opened.room_id,
            "coefficient": opened.options.coefficient,
            "settles": True,
            "last_sequence": game.changed_at,
            "line_count": game.state.line_count,
            "settled": game.state.settled,
        }
        seats = [
            {"points": total.points, "beans": total.beans, "rake_beans": total.rake_beans}
            for total in game.state.totals
        ]
        if game.first_sequence == 0:
            new_games.append({"table_id": table_id, **values})
            new_players.extend(
                {"table_id": table_id, "seat": seat, "account": account, **seats[seat]}
                for seat, account in enumerate(opened.accounts)
            )
            continue
        game_updates.append({"game_of": table_id, **values})
        player_updates.extend(
            {"game_of": table_id, "seat_of": seat, **totals} for seat, totals in enumerate(seats)
        )
    insert_rows(session, scoring_games, new_games)
    insert_rows(session, scoring_players, new_players)
    if game_updates and connection.dialect.name == "sqlite":
        # On the driver's cursor (`driver_sql`), the values in the texts' order (booleans as the
        # driver binds them: 1 and 0, as SQLAlchemy's Boolean does on SQLite).
        run_many(
            connection,
            _UPDATE_GAME_SQLITE,
            [(*(row[column] for column in _GAME_COLUMNS_SET), row["game_of"]) for row in game_updates],
        )
        run_many(
            connection,
            _UPDATE_PLAYER_SQLITE,
            [
                (row["points"], row["beans"], row["rake_beans"], row["game_of"], row["seat_of"])
                for row in player_updates
            ],
        )
        return
    for statement, rows in ((_UPDATE_GAME, game_updates), (_UPDATE_PLAYER, player_updates)):
        if rows:
            session.execute(statement, rows)
