"""``mjctl replay --table ID [--json]``: one table's events in order, with full information, for ops.

Every draw, discard, claim, kong and win (with its fans) of the table, and right after the event
that caused it each settlement line it triggered (who paid whom, how many beans) and the final
``GameSettled`` totals.

Two sources, chosen so that each is complete on its own:

- Kafka (default): the table's events from ``mahjong.table.v1`` and its settlement events from
  ``mahjong.settlement.v1``. Both topics are keyed by the table id, so only the key's partition is
  read (computed with kafka-python's default partitioner, the one the outbox relay's producer
  uses), from the beginning to its end offset at the start of the command.
- ``--database URL``: the table service's event store (``stored_events`` of the table database)
  and the scoring service's event store (``--scoring-database``, default the configured scoring
  database), for when the topics' retention has dropped the game.

A re-sent event (same event id) is shown once; table events are ordered by their sequence.
Reads only: no consumer group, nothing committed, nothing written.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, TextIO

from google.protobuf import json_format
from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import DefaultPartitioner
from mahjong.v1 import common_pb2, envelope_pb2, settlement_events_pb2, table_events_pb2
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import EnvelopeDecodeError, parse_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics

TOPIC_METADATA_TIMEOUT_SECONDS: Final = 30.0
READ_TIMEOUT_SECONDS: Final = 120.0
# A table has a few hundred events; a partition holds many tables, so bound what one read keeps.
TABLE_EVENTS_MAX: Final = 100_000
WIN_BY: Final = {
    common_pb2.WIN_BY_SELF_DRAW: "self-draw",
    common_pb2.WIN_BY_DISCARD: "discard",
    common_pb2.WIN_BY_ROB_KONG: "robbing a kong",
}
EXPOSURE: Final = {
    common_pb2.KONG_EXPOSURE_EXPOSED: "exposed",
    common_pb2.KONG_EXPOSURE_ADDED: "added",
    common_pb2.KONG_EXPOSURE_CONCEALED: "concealed",
}


class ReplayError(Exception):
    """The events cannot be read (unknown topic, broker unreachable, a stream with a gap)."""


def register(subparsers: Any) -> None:
    """Add ``replay`` to the ``mjctl`` command."""
    parser = subparsers.add_parser(
        "replay",
        help="one table's events in order, full information, with what was paid (ops)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--table", required=True, metavar="ID", help="the table id")
    parser.add_argument("--json", action="store_true", help="one JSON object per event (protobuf JSON)")
    parser.add_argument(
        "--database",
        metavar="URL",
        help="read the table service's event store at this SQLAlchemy URL instead of Kafka",
    )
    parser.add_argument(
        "--scoring-database",
        metavar="URL",
        help="with --database: the scoring database for the settlement lines (default: configured)",
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    """The ``replay`` subcommand: print the table's story; exit 1 when the table has no events."""
    settings = load_settings()
    try:
        if arguments.database:
            scoring_url = arguments.scoring_database or settings.database_url("scoring")
            table_events = read_event_store(arguments.database, arguments.table)
            settlement_events = read_event_store(scoring_url, arguments.table)
        else:
            topics = Topics.with_prefix(settings.topic_prefix)
            bootstrap = list(settings.kafka_bootstrap_servers)
            table_events = read_stream_from_kafka(bootstrap, topics.table, arguments.table)
            settlement_events = read_stream_from_kafka(bootstrap, topics.settlement, arguments.table)
    except ReplayError as error:
        print(f"mjctl replay: {error}", file=sys.stderr)
        return 1
    if not table_events:
        print(f"mjctl replay: no events for table {arguments.table!r}", file=sys.stderr)
        return 1
    ordered = interleave(table_events, settlement_events)
    if arguments.json:
        write_json(ordered, sys.stdout)
    else:
        for line in describe(ordered):
            print(line)
    return 0


# --- reading ------------------------------------------------------------------------------------


def read_event_store(database_url: str, stream_id: str) -> list[envelope_pb2.Envelope]:
    """The stream's events from a service's event store (``stored_events``), in sequence order."""
    engine = create_engine_for(database_url)
    try:
        with transaction(create_session_factory(engine)) as session:
            return EventStore().load(session, stream_id)
    finally:
        engine.dispose()


class _TopicMetadata:
    """The three questions kafka-python's `DefaultPartitioner` asks of the cluster metadata."""

    def __init__(self, topic: str, partitions: set[int]) -> None:
        self._topic = topic
        self._partitions = partitions

    def topics(self) -> set[str]:
        return {self._topic}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions if topic == self._topic else set()

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self.partitions_for_topic(topic)


def partition_for_key(topic: str, partitions: set[int], key: bytes) -> int:
    """The partition the platform's producers put `key` in: kafka-python's default partitioner."""
    assert partitions, topic
    partition: int = DefaultPartitioner().partition(
        topic, None, key, None, None, _TopicMetadata(topic, partitions)
    )
    return partition


def topic_partitions(consumer: KafkaConsumer, topic: str) -> set[int]:
    """The topic's partition numbers, waiting for the client's metadata; ReplayError if unknown."""
    deadline = time.monotonic() + TOPIC_METADATA_TIMEOUT_SECONDS
    while True:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return set(partitions)
        if time.monotonic() > deadline:
            raise ReplayError(f"topic {topic!r} has no partitions (is the broker up, the prefix right?)")
        time.sleep(0.1)


def read_partitions_to_end(
    consumer: KafkaConsumer, partitions: Sequence[TopicPartition], records_max: int
) -> Iterable[Any]:
    """Every record of the partitions, from the beginning to the end offsets of now (a snapshot)."""
    consumer.assign(list(partitions))
    consumer.seek_to_beginning(*partitions)
    end_offsets: dict[TopicPartition, int] = consumer.end_offsets(list(partitions))
    pending = {partition for partition in partitions if end_offsets[partition] > consumer.position(partition)}
    read_count = 0
    deadline = time.monotonic() + READ_TIMEOUT_SECONDS
    while pending:
        if time.monotonic() > deadline:
            raise ReplayError(
                f"reading {len(partitions)} partitions did not finish in {READ_TIMEOUT_SECONDS:g} s"
            )
        for partition, records in consumer.poll(timeout_ms=500).items():
            for record in records:
                if record.offset >= end_offsets[partition]:
                    continue  # Written after the snapshot: not part of this read.
                read_count += 1
                if read_count > records_max:
                    raise ReplayError(f"more than {records_max} records to read; refusing to hold them all")
                yield record
            if consumer.position(partition) >= end_offsets[partition]:
                pending.discard(partition)
                consumer.pause(partition)


def read_stream_from_kafka(
    bootstrap_servers: list[str], topic: str, stream_id: str
) -> list[envelope_pb2.Envelope]:
    """The stream's events from its key's partition, duplicates (re-sends) dropped, sequence order."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False)
    try:
        key = stream_id.encode()
        partition = TopicPartition(topic, partition_for_key(topic, topic_partitions(consumer, topic), key))
        by_event_id: dict[str, envelope_pb2.Envelope] = {}
        for record in read_partitions_to_end(consumer, [partition], TABLE_EVENTS_MAX * 100):
            if record.key != key:
                continue
            try:
                envelope = parse_envelope(record.value or b"")
            except EnvelopeDecodeError:
                continue  # The consumers dead-lettered it; it is not part of the story.
            by_event_id.setdefault(envelope.event_id, envelope)
            if len(by_event_id) > TABLE_EVENTS_MAX:
                raise ReplayError(f"stream {stream_id!r} has more than {TABLE_EVENTS_MAX} events")
    finally:
        consumer.close(autocommit=False)
    return sorted(by_event_id.values(), key=lambda envelope: envelope.sequence)


# --- ordering -----------------------------------------------------------------------------------


def interleave(
    table_events: Sequence[envelope_pb2.Envelope], settlement_events: Sequence[envelope_pb2.Envelope]
) -> list[envelope_pb2.Envelope]:
    """Table events in order, each followed by the settlement lines it caused; the rest at the end."""
    caused_by: dict[str, list[envelope_pb2.Envelope]] = {}
    unplaced: list[envelope_pb2.Envelope] = []
    table_event_ids = {envelope.event_id for envelope in table_events}
    for envelope in settlement_events:
        source = (
            envelope.settlement_instructed.source_event_id
            if envelope.HasField("settlement_instructed")
            else ""
        )
        if source in table_event_ids:
            caused_by.setdefault(source, []).append(envelope)
        else:
            unplaced.append(envelope)
    ordered: list[envelope_pb2.Envelope] = []
    for envelope in table_events:
        ordered.append(envelope)
        ordered.extend(caused_by.get(envelope.event_id, []))
    return ordered + unplaced


def write_json(events: Iterable[envelope_pb2.Envelope], output: TextIO) -> None:
    """One compact JSON object per line: the envelope in protobuf's JSON mapping (field names kept)."""
    for envelope in events:
        document = json_format.MessageToDict(envelope, preserving_proto_field_name=True)
        output.write(json.dumps(document, ensure_ascii=False, sort_keys=True) + "\n")


# --- describing ---------------------------------------------------------------------------------


class _Seats:
    """Who sits where, as learnt from ``TableOpened``."""

    def __init__(self) -> None:
        self.players: dict[int, str] = {}

    def name(self, seat: int) -> str:
        player = self.players.get(seat)
        return f"seat {seat} ({player})" if player else f"seat {seat}"


def describe(events: Iterable[envelope_pb2.Envelope]) -> list[str]:
    """One line per event (settlement lines indented under their cause), for a human."""
    seats = _Seats()
    lines: list[str] = []
    for envelope in events:
        kind = envelope.WhichOneof("payload")
        if kind in ("settlement_instructed", "game_settled"):
            lines.extend("        " + line for line in _describe_settlement(envelope))
            continue
        text = _describe_table_event(envelope, seats)
        lines.append(f"#{envelope.sequence:<4} {_time(envelope)}  {text}")
    return lines


def _time(envelope: envelope_pb2.Envelope) -> str:
    moment = envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _tiles(tiles: Iterable[str]) -> str:
    return " ".join(tiles) or "-"


def _melds(melds: Iterable[common_pb2.Meld]) -> str:
    parts = []
    for meld in melds:
        exposure = f" {EXPOSURE[meld.exposure]}" if meld.exposure in EXPOSURE else ""
        claimed = meld.kind == "pong" or meld.exposure == common_pb2.KONG_EXPOSURE_EXPOSED
        source = f" from seat {meld.from_seat}" if claimed and meld.from_seat >= 0 else ""
        parts.append(f"{meld.kind}{exposure} {meld.tile}{source}")
    return ", ".join(parts)


def _flag(condition: bool, text: str) -> str:
    return f" [{text}]" if condition else ""


def _describe_table_event(envelope: envelope_pb2.Envelope, seats: _Seats) -> str:
    kind = envelope.WhichOneof("payload")
    if kind == "table_opened":
        return _describe_opened(envelope.table_opened, seats)
    if kind == "hands_dealt":
        dealt = envelope.hands_dealt
        hands = "; ".join(f"{seats.name(hand.seat)} {_tiles(hand.tiles)}" for hand in dealt.hands)
        return f"hands dealt: {hands}; wall {dealt.wall_remaining} left"
    if kind == "exchange_picked":
        picked = envelope.exchange_picked
        automatic = _flag(picked.automatic, "auto")
        return f"{seats.name(picked.seat)} picks {_tiles(picked.tiles)} to exchange{automatic}"
    if kind == "tiles_exchanged":
        exchanged = envelope.tiles_exchanged
        transfers = "; ".join(
            f"seat {transfer.from_seat} → seat {transfer.to_seat}: {_tiles(transfer.tiles)}"
            for transfer in exchanged.transfers
        )
        return f"tiles exchanged {exchanged.direction}: {transfers}"
    if kind == "missing_suit_chosen":
        chosen = envelope.missing_suit_chosen
        return (
            f"{seats.name(chosen.seat)} chooses missing suit {chosen.suit}{_flag(chosen.automatic, 'auto')}"
        )
    if kind == "missing_suits_declared":
        suits = envelope.missing_suits_declared.suits
        return "missing suits declared: " + ", ".join(
            f"seat {seat} {suit}" for seat, suit in enumerate(suits)
        )
    if kind == "tile_drawn":
        drawn = envelope.tile_drawn
        return (
            f"{seats.name(drawn.seat)} draws {drawn.tile}{_flag(drawn.from_tail, 'from the tail')}"
            f" (wall {drawn.wall_remaining} left)"
        )
    if kind == "tile_discarded":
        discarded = envelope.tile_discarded
        return f"{seats.name(discarded.seat)} discards {discarded.tile}{_flag(discarded.automatic, 'auto')}"
    if kind == "claim_passed":
        passed = envelope.claim_passed
        win = _flag(passed.passed_win, f"passed a win ×{passed.passed_win_multiplier}")
        return f"{seats.name(passed.seat)} passes on {passed.tile}{win}{_flag(passed.automatic, 'auto')}"
    if kind == "pong_claimed":
        pong = envelope.pong_claimed
        return f"{seats.name(pong.seat)} pongs {pong.tile} from {seats.name(pong.from_seat)}"
    if kind == "kong_declared":
        kong = envelope.kong_declared
        source = (
            f" from {seats.name(kong.from_seat)}"
            if kong.from_seat >= 0 and kong.exposure == common_pb2.KONG_EXPOSURE_EXPOSED
            else ""
        )
        return (
            f"{seats.name(kong.seat)} declares {EXPOSURE.get(kong.exposure, '?')} kong of {kong.tile}{source}"
        )
    if kind == "kong_robbed":
        robbed = envelope.kong_robbed
        winners = ", ".join(seats.name(seat) for seat in robbed.winner_seats)
        return f"kong of {robbed.tile} by {seats.name(robbed.kong_seat)} robbed by {winners}"
    if kind == "player_won":
        return _describe_win(envelope.player_won, seats)
    if kind == "player_left":
        left = envelope.player_left
        return (
            f"{seats.name(left.seat)} leaves ({left.reason or 'no reason'}){_flag(left.had_won, 'had won')}"
        )
    if kind == "turn_timed_out":
        timed_out = envelope.turn_timed_out
        return f"{seats.name(timed_out.seat)} timed out ({timed_out.phase})"
    if kind == "wall_exhausted":
        return "wall exhausted"
    if kind == "game_ended":
        ended = envelope.game_ended
        hands = "; ".join(
            f"{seats.name(hand.seat)} {_tiles(hand.concealed)}"
            + (f" + {_melds(hand.melds)}" if hand.melds else "")
            + _flag(hand.won, "won")
            + _flag(hand.left, "left")
            for hand in ended.hands
        )
        return f"game ended ({ended.reason}): {hands}"
    return f"{kind or 'empty event'} (event {envelope.event_id})"


def _describe_opened(opened: table_events_pb2.TableOpened, seats: _Seats) -> str:
    seats.players = {seat.seat: seat.player_id for seat in opened.seats}
    rules = opened.rules
    wildcard = (
        f", wildcard {opened.wildcard} (indicator {opened.wildcard_indicator})" if opened.wildcard else ""
    )
    return (
        f"table {opened.table_id} opened in room {opened.room_id} "
        f"(coefficient {rules.coefficient}, rake {rules.rake_beans} beans): "
        + ", ".join(seats.name(seat) for seat in sorted(seats.players))
        + f"; dealer seat {opened.dealer_seat}"
        + f"; dice {opened.die_1}+{opened.die_2} by seat {opened.dice_roller_seat}"
        + f"; exchange {opened.exchange_direction or '-'}{wildcard}"
        + f"; wall ({len(opened.wall)} tiles) {_tiles(opened.wall)}"
    )


def _describe_win(won: table_events_pb2.PlayerWon, seats: _Seats) -> str:
    source = f" from {seats.name(won.from_seat)}" if won.from_seat >= 0 else ""
    fans = " · ".join(
        f"{fan.name or fan.id} ×{fan.multiplier}" + (f" (×{fan.count})" if fan.count > 1 else "")
        for fan in won.fans
    )
    circumstances = (
        _flag(won.after_kong, "after a kong")
        + _flag(won.last_tile, "last tile")
        + _flag(won.first_turn, "first turn")
    )
    melds = f" + {_melds(won.melds)}" if won.melds else ""
    return (
        f"{seats.name(won.seat)} wins (#{won.win_order}) on {won.win_tile} "
        f"by {WIN_BY.get(won.win_by, '?')}{source}"
        f"{circumstances}: {fans or 'no fans'} = ×{won.multiplier}; hand {_tiles(won.concealed)}{melds}"
    )


def _describe_settlement(envelope: envelope_pb2.Envelope) -> list[str]:
    if envelope.HasField("game_settled"):
        return _describe_game_settled(envelope.game_settled)
    instructed: settlement_events_pb2.SettlementInstructed = envelope.settlement_instructed
    payees = ", ".join(
        f"{payee.account} {payee.beans} beans ({payee.points} points"
        + (f", {payee.reason}" if payee.reason and payee.reason != instructed.reason else "")
        + ")"
        for payee in instructed.payees
    )
    fans = " · ".join(f"{fan.name or fan.id} ×{fan.multiplier}" for fan in instructed.fans)
    detail = f" [{fans} = ×{instructed.multiplier}, N={instructed.coefficient}]" if fans else ""
    total = sum(payee.beans for payee in instructed.payees)
    return [
        f"paid, line {instructed.line} {instructed.reason}: {instructed.payer_account} pays {total} beans → "
        f"{payees}{detail}"
    ]


def _describe_game_settled(settled: settlement_events_pb2.GameSettled) -> list[str]:
    lines = [f"settled: {settled.instruction_count} lines"]
    for player in sorted(settled.players, key=lambda player: player.seat):
        lines.append(
            f"  seat {player.seat} {player.account}: {player.beans:+d} beans "
            f"({player.points:+d} points, rake {player.rake_beans})"
        )
    return lines
