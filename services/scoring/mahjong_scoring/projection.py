"""The settlement projection: the tracked consumer's handler for `mahjong.table.v1`.

For each table event, in the consumer's one transaction (with its Kafka position):

1. the event is stored in `scoring_table_events` (the inbox a game's fold is rebuilt from);
2. the game's pure fold (`game_settlement.settle_table_event`) says which settlement events it
   causes;
3. those are appended to the scoring event store (stream = table id), which writes them to the
   outbox for `mahjong.settlement.v1` in the same transaction, and recorded as projection rows
   (`scoring_lines`, `scoring_players`, `scoring_games`).

So an instruction is published if and only if its table event is marked applied: no dual write.

The fold of a game in progress is kept in memory between events, keyed by table id and checked
against the stored `last_sequence` before use: after a rollback (a failed handler, a crash before
commit) or a restart the memory no longer matches the database and the fold is rebuilt from the
inbox, so the memory can never make the projection diverge from what was committed.
"""

from __future__ import annotations

import collections
import logging
from typing import Final

import sqlalchemy
from mahjong.v1 import envelope_pb2, settlement_events_pb2
from mahjong_platform.envelopes import parse_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.tracked_consumer import MessagePosition
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
        """Apply one table event (see the module docstring); other payloads are ignored."""
        payload_name = envelope.WhichOneof("payload")
        assert payload_name is not None, "the tracked consumer only passes parsed envelopes"
        if envelope.DESCRIPTOR.fields_by_name[payload_name].number not in TABLE_PAYLOAD_FIELD_NUMBERS:
            return
        apply_table_event(session, self._event_store, envelope, self)

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


def apply_table_event(
    session: Session,
    event_store: EventStore,
    envelope: envelope_pb2.Envelope,
    cache: SettlementProjection | None = None,
) -> None:
    """Apply one table event to the projection through `session` (no commit: the caller's job)."""
    table_id = envelope.stream_id
    if _already_received(session, envelope.event_id):
        return  # A re-sent duplicate: the platform dedupes too, this keeps the handler idempotent.
    last_sequence = _last_sequence(session, table_id)
    if envelope.sequence <= last_sequence:
        raise GameFactsError(
            f"table {table_id}: event {envelope.event_id} has sequence {envelope.sequence}, "
            f"but sequence {last_sequence} was already applied with another event id"
        )
    state = cache.cached(table_id, last_sequence) if cache is not None else None
    if state is None:
        state = _rebuild(session, table_id)
    state, output = settle_table_event(state, envelope)
    for notice in output.notices:
        logger.warning(
            "settlement notice: %s",
            notice.message,
            extra={"table_id": table_id, "source_event_id": notice.source},
        )
    session.execute(
        _INSERT_TABLE_EVENT,
        {
            "table_id": table_id,
            "sequence": envelope.sequence,
            "event_id": envelope.event_id,
            "envelope": serialize_envelope(envelope),
        },
    )
    if output.envelopes:
        version = event_store.stream_version(session, table_id)
        event_store.append(session, table_id, version, output.envelopes)
        _record(session, output.envelopes)
    _store_game(
        session,
        table_id,
        envelope.sequence,
        state,
        is_new=last_sequence == 0,
        totals_changed=bool(output.envelopes),
    )
    if cache is not None:
        cache.remember(table_id, envelope.sequence, state)


# The per-event statements, built once (building one costs more than running it on SQLite).
_ALREADY_RECEIVED = sqlalchemy.select(scoring_table_events.c.event_id).where(
    scoring_table_events.c.event_id == sqlalchemy.bindparam("event_id")
)
_LAST_SEQUENCE = sqlalchemy.select(sqlalchemy.func.max(scoring_table_events.c.sequence)).where(
    scoring_table_events.c.table_id == sqlalchemy.bindparam("table_id")
)
_INSERT_TABLE_EVENT = scoring_table_events.insert()
_UPDATE_GAME = scoring_games.update().where(scoring_games.c.table_id == sqlalchemy.bindparam("game_of"))
_UPDATE_PLAYER = scoring_players.update().where(
    scoring_players.c.table_id == sqlalchemy.bindparam("game_of"),
    scoring_players.c.seat == sqlalchemy.bindparam("seat_of"),
)


def _already_received(session: Session, event_id: str) -> bool:
    return session.execute(_ALREADY_RECEIVED, {"event_id": event_id}).first() is not None


def _last_sequence(session: Session, table_id: str) -> int:
    value = session.execute(_LAST_SEQUENCE, {"table_id": table_id}).scalar_one()
    return 0 if value is None else int(value)


def _rebuild(session: Session, table_id: str) -> GameSettlementState:
    """The game's fold from the events received so far (their outputs were recorded then)."""
    query = (
        sqlalchemy.select(scoring_table_events.c.envelope)
        .where(scoring_table_events.c.table_id == table_id)
        .order_by(scoring_table_events.c.sequence)
    )
    state = new_game_settlement()
    for row in session.execute(query):
        state, _ = settle_table_event(state, parse_envelope(bytes(row.envelope)))
    return state


def _record(session: Session, envelopes: tuple[envelope_pb2.Envelope, ...]) -> None:
    for envelope in envelopes:
        if envelope.WhichOneof("payload") == "settlement_instructed":
            _record_line(session, envelope.settlement_instructed)


def _record_line(session: Session, instruction: settlement_events_pb2.SettlementInstructed) -> None:
    session.execute(
        scoring_lines.insert().values(
            instruction_id=instruction.instruction_id,
            table_id=instruction.table_id,
            line=instruction.line,
            reason=instruction.reason,
            payer_account=instruction.payer_account,
            total_beans=sum(payee.beans for payee in instruction.payees),
            source_event_id=instruction.source_event_id,
            instruction=instruction.SerializeToString(deterministic=True),
        )
    )


def _store_game(
    session: Session,
    table_id: str,
    sequence: int,
    state: GameSettlementState,
    *,
    is_new: bool,
    totals_changed: bool,
) -> None:
    opened = state.opened
    assert opened is not None, "apply_table_event raised for an event before TableOpened"
    values = {
        "room_id": opened.room_id,
        "coefficient": 0 if opened.options is None else opened.options.coefficient,
        "settles": opened.options is not None,
        "last_sequence": sequence,
        "line_count": state.line_count,
        "settled": state.settled,
    }
    if is_new:
        session.execute(scoring_games.insert().values(table_id=table_id, **values))
        for seat, account in enumerate(opened.accounts):
            session.execute(
                scoring_players.insert().values(
                    table_id=table_id, seat=seat, account=account, points=0, beans=0, rake_beans=0
                )
            )
        return
    session.execute(_UPDATE_GAME, {"game_of": table_id, **values})
    if not totals_changed:
        return
    session.execute(
        _UPDATE_PLAYER,
        [
            {
                "game_of": table_id,
                "seat_of": seat,
                "points": total.points,
                "beans": total.beans,
                "rake_beans": total.rake_beans,
            }
            for seat, total in enumerate(state.totals)
        ],
    )
