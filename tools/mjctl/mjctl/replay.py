"""``mjctl replay --table ID [--json]``: one table's events in order, in words, with full
information, and what was paid (ops and finance).

Every event of the game (the wall, the deal, draws, discards, passes, pongs, chows, kongs, flowers,
wins with their fans and totals, the bird, escapes, the end) in words, and right after the event
that caused it each settlement line it triggered (who paid whom, how many beans) and the final
``GameSettled`` totals. ``--json``: one protobuf-JSON object per event instead.

Sources (each reads O(game), never a whole topic):

- default, the public gRPC API: ``TableService.Watch`` with an ops token (full information, read
  from the table service's event store by table id) and ``ScoringService.GetGameSettlement``. A game
  still in progress is followed to its end (Ctrl-C stops). The token is minted with the configured
  ``MAHJONG_JWT_SECRET`` unless ``--token`` gives one.
- ``--database URL``: the table service's event store (``stored_events`` of the table database)
  and the scoring service's event store (``--scoring-database``, default the configured scoring
  database), for when the services are down.
- ``--kafka --since DATE [--until DATE]``: the table's key partition of ``mahjong.table.v1`` and
  ``mahjong.settlement.v1``, from the first offset at ``--since`` (Kafka's time index) to the one
  at ``--until`` (default: the end now). Without ``--since`` it reads the partition from offset 0,
  which grows with history.

A re-sent event (same event id) is shown once; table events are ordered by their sequence.
Reads only: nothing is committed or written. Exit 1 when the table has no events or a source fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

if TYPE_CHECKING:
    from mahjong.v1 import envelope_pb2
    from mahjong_platform.topic_reading import Window

# A table has a few hundred events; a partition holds many tables, so bound what one read keeps.
TABLE_EVENTS_MAX: Final = 100_000
RPC_TIMEOUT_SECONDS: Final = 30.0
OPS_TOKEN_TTL_SECONDS: Final = 600


class ReplayError(Exception):
    """The events cannot be read (unknown topic, broker or service unreachable, a stream gap)."""


def register(subparsers: Any) -> None:
    """Add ``replay`` to the ``mjctl`` command."""
    parser = subparsers.add_parser(
        "replay",
        help="one table's events in words, full information, with what was paid",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--table", required=True, metavar="ID", help="the table id")
    parser.add_argument("--json", action="store_true", help="one JSON object per event (protobuf JSON)")
    parser.add_argument(
        "--token",
        metavar="JWT",
        help="default source: an ops or finance token (default: one minted with MAHJONG_JWT_SECRET)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--database",
        metavar="URL",
        help="read the table service's event store at this SQLAlchemy URL instead of the services",
    )
    source.add_argument(
        "--kafka",
        action="store_true",
        help="read the table's key partition of the table and settlement topics instead of the services",
    )
    parser.add_argument(
        "--scoring-database",
        metavar="URL",
        help="with --database: the scoring database for the settlement lines (default: configured)",
    )
    parser.add_argument(
        "--since",
        type=_parse_time,
        metavar="DATE",
        help="with --kafka: start at the first offset written at or after this UTC time (ISO 8601)",
    )
    parser.add_argument(
        "--until",
        type=_parse_time,
        metavar="DATE",
        help="with --kafka: stop at the first offset written after this UTC time (default: now)",
    )
    parser.set_defaults(handler=run)


def _parse_time(text: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or date-time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def run(arguments: argparse.Namespace) -> int:
    """The ``replay`` subcommand: print the table's story; exit 1 when the table has no events."""
    from mahjong_platform.config import load_settings
    from mahjong_platform.topic_reading import TopicReadError

    settings = load_settings()
    if (arguments.since or arguments.until) and not arguments.kafka:
        print("mjctl replay: --since and --until go with --kafka", file=sys.stderr)
        return 2
    try:
        if arguments.database:
            scoring_url = arguments.scoring_database or settings.database_url("scoring")
            table_events = read_event_store(arguments.database, arguments.table)
            settlement_events = read_event_store(scoring_url, arguments.table)
        elif arguments.kafka:
            from mahjong_platform.topics import Topics

            topics = Topics.with_prefix(settings.topic_prefix)
            bootstrap = list(settings.kafka_bootstrap_servers)
            window = (arguments.since, arguments.until)
            table_events = read_stream_from_kafka(bootstrap, topics.table, arguments.table, window)
            settlement_events = read_stream_from_kafka(bootstrap, topics.settlement, arguments.table, window)
        else:
            token = arguments.token or _ops_token(settings.jwt_secret)
            table_target, scoring_target = settings.grpc_target("table"), settings.grpc_target("scoring")
            table_events = read_from_services(table_target, token, arguments.table)
            settlement_events = read_settlement_from_services(scoring_target, token, arguments.table)
    except (ReplayError, TopicReadError) as error:
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


def _ops_token(secret: str) -> str:
    from mahjong_platform.auth import ROLE_OPS, mint_token

    return mint_token(secret, "mjctl-replay", [ROLE_OPS], ttl_seconds=OPS_TOKEN_TTL_SECONDS)


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying `token` (plaintext channels, like `grpc_client.open_channel`)."""
    return (("authorization", f"Bearer {token}"),)


def read_from_services(target: str, token: str, table_id: str) -> list[envelope_pb2.Envelope]:
    """The table's events with full information from ``TableService.Watch`` (ops token): the table
    service reads them from its event store by table id, from the opening to ``GameEnded``."""
    import grpc
    from mahjong.v1 import table_service_pb2, table_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = table_service_pb2_grpc.TableServiceStub(channel)
        request = table_service_pb2.WatchRequest(table_id=table_id)
        try:
            return list(stub.Watch(request, metadata=_bearer(token)))
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise ReplayError(
                f"TableService.Watch at {target}: {error.code().name}: {error.details()}"
            ) from None


def read_settlement_from_services(target: str, token: str, table_id: str) -> list[envelope_pb2.Envelope]:
    """The game's settlement lines and, once settled, its totals, from
    ``ScoringService.GetGameSettlement``, as the envelopes scoring published them in."""
    import grpc
    from mahjong.v1 import envelope_pb2, scoring_service_pb2, scoring_service_pb2_grpc, settlement_events_pb2

    with grpc.insecure_channel(target) as channel:
        stub = scoring_service_pb2_grpc.ScoringServiceStub(channel)
        request = scoring_service_pb2.GetGameSettlementRequest(table_id=table_id)
        try:
            answer = stub.GetGameSettlement(request, timeout=RPC_TIMEOUT_SECONDS, metadata=_bearer(token))
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise ReplayError(
                f"ScoringService.GetGameSettlement at {target}: {error.code().name}: {error.details()}"
            ) from None
    events = [
        envelope_pb2.Envelope(event_id=line.instruction_id, stream_id=table_id, settlement_instructed=line)
        for line in answer.lines
    ]
    if answer.settled:
        room_id = answer.lines[0].room_id if answer.lines else ""
        settled = settlement_events_pb2.GameSettled(
            table_id=table_id, room_id=room_id, players=answer.totals, instruction_count=len(answer.lines)
        )
        events.append(envelope_pb2.Envelope(stream_id=table_id, game_settled=settled))
    return events


def read_event_store(database_url: str, stream_id: str) -> list[envelope_pb2.Envelope]:
    """The stream's events from a service's event store (``stored_events``), in sequence order."""
    from mahjong_platform.database import create_engine_for, create_session_factory, transaction
    from mahjong_platform.event_store import EventStore

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
    from kafka.partitioner.default import DefaultPartitioner

    assert partitions, topic
    partition: int = DefaultPartitioner().partition(
        topic, None, key, None, None, _TopicMetadata(topic, partitions)
    )
    return partition


def read_stream_from_kafka(
    bootstrap_servers: list[str], topic: str, stream_id: str, window: Window = (None, None)
) -> list[envelope_pb2.Envelope]:
    """The stream's events from its key's partition (within `window`), duplicates (re-sends)
    dropped, in sequence order."""
    from kafka import TopicPartition
    from mahjong_platform.envelopes import EnvelopeDecodeError, parse_envelope
    from mahjong_platform.topic_reading import read_partitions_to_end, reading_consumer, topic_partitions

    consumer = reading_consumer(bootstrap_servers)
    try:
        key = stream_id.encode()
        partition = TopicPartition(topic, partition_for_key(topic, topic_partitions(consumer, topic), key))
        by_event_id: dict[str, envelope_pb2.Envelope] = {}
        for record in read_partitions_to_end(consumer, [partition], TABLE_EVENTS_MAX * 100, window):
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
    from google.protobuf import json_format

    for envelope in events:
        document = json_format.MessageToDict(envelope, preserving_proto_field_name=True)
        output.write(json.dumps(document, ensure_ascii=False, sort_keys=True) + "\n")


def describe(events: Iterable[envelope_pb2.Envelope]) -> Iterator[str]:
    """One line per table event (``#sequence time  words``), settlement lines indented under their
    cause; every event type in words (`mahjong_platform.events`)."""
    from mahjong_platform.events import Story, describe_event

    story = Story()
    for envelope in events:
        text = describe_event(envelope, story)
        if envelope.WhichOneof("payload") in ("settlement_instructed", "game_settled"):
            for line in text.splitlines():
                yield "        " + line
        else:
            yield f"#{envelope.sequence:<4} {_time(envelope)}  {text}"


def _time(envelope: envelope_pb2.Envelope) -> str:
    moment = envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
