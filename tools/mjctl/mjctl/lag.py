"""Settlement lag: how long after a game ends its money has moved (issue 5 Speed).

Measured from the `GameEnded` event's time (as recorded by the table engine, just before its
commit) to the game's last `TransferPosted` on the ledger topic, the rake transfers being the last
lines of every game's settlement: table engine → outbox → Kafka → scoring → outbox → Kafka → ledger
→ outbox → Kafka. A transfer's time is its Kafka record's: the ledger's outbox relay stamps it when
it publishes the transfer, right after the ledger committed it (the event's own `occurred_at` is
the settlement instruction's, kept for deterministic rebuilds, so it cannot say when the ledger
posted it).

`TopicLagProbe` also splits each game's lag into its three hops (`lag_hops`), from record times
the same way: the table (`GameEnded` occurred → its record on the seats topic, which the table's
relay publishes in the same round as the table topic's copy), scoring (→ the game's last
`SettlementInstructed` record: delivery, its consumer's linger, its batch and its relay) and the
ledger (→ the game's last `TransferPosted` record). A game's three hops add up to its lag.

Nothing is asked while the games are played: `TopicLagProbe` notes each game's end, and reads the
ledger topic once, after the run (`lags_seconds`), from the run's start until every noted game is
settled or `LAG_MAX_SECONDS` have passed. Where the bots cannot reach Kafka (only the services'
gRPC ports), `PollingLagProbe` polls `LedgerService.GetGameStatement` every `POLL_SECONDS` per
ended game instead (a finance token): each figure late by up to that much plus a call, and the
calls cost the ledger and the bots CPU during the run they measure. `settlement_lag_probe` picks.
"""

from __future__ import annotations

import datetime
import statistics
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
from mahjong.v1 import envelope_pb2, ledger_service_pb2_grpc
from mahjong_rules.seats import SEAT_COUNT

from mjctl.summary import wait_for_settlement

if TYPE_CHECKING:
    from mahjong_platform.config import Settings

LAG_MAX_SECONDS = 120.0
POLL_SECONDS = 0.02
KAFKA_CHECK_SECONDS = 5.0
CLOCK_MARGIN_SECONDS = 10.0
"""Records this much older than the probe's start are read too: the ledger's clock may run behind
the bots' a little (another host); the games are told apart by their table ids anyway."""
POLL_TIMEOUT_MS = 200


class GameTransfers:
    """The `TransferPosted` records seen of one game: how many rake transfers, the latest time."""

    def __init__(self) -> None:
        self.rakes = 0
        self.last_posted_ms = 0
        self._seen: set[str] = set()

    def add(self, event_id: str, reason: str, timestamp_ms: int) -> None:
        """One transfer's record; a re-sent one (the same event id, published again by a relay
        that restarted before marking it sent) keeps the first record's time."""
        if event_id in self._seen:
            return
        self._seen.add(event_id)
        self.rakes += reason == "rake"
        self.last_posted_ms = max(self.last_posted_ms, timestamp_ms)

    @property
    def settled(self) -> bool:
        return self.rakes >= SEAT_COUNT


def settlement_lags(
    ended: dict[str, datetime.datetime], transfers: dict[str, GameTransfers]
) -> tuple[list[float], int, float]:
    """Each settled game's lag (sorted), how many are not settled, and the epoch second the last
    settled game's last transfer was posted (0 for none)."""
    lags = []
    last = 0.0
    for table_id, ended_at in ended.items():
        game = transfers.get(table_id)
        if game is None or not game.settled:
            continue
        lags.append(game.last_posted_ms / 1000 - ended_at.timestamp())
        last = max(last, game.last_posted_ms / 1000)
    return sorted(lags), len(ended) - len(lags), last


def _envelope_of(record: Any, payload: str) -> envelope_pb2.Envelope | None:
    """The envelope a Kafka record of ours carries when its payload is `payload`, else None: for
    another event, or a record that does not decode (another writer's on a shared topic). The
    three record readers below skip those."""
    from mahjong_platform.envelopes import EnvelopeDecodeError, parse_envelope

    try:
        envelope = parse_envelope(record.value or b"")
    except EnvelopeDecodeError:
        return None
    return envelope if envelope.WhichOneof("payload") == payload else None


def add_settlement_records(
    records: Iterable[Any], wanted: Container[str], instructed: dict[str, GameTransfers]
) -> None:
    """Note the `SettlementInstructed` of the `wanted` tables among Kafka `records` of the
    settlement topic (only their latest time is used: `lag_hops`)."""
    for record in records:
        envelope = _envelope_of(record, "settlement_instructed")
        if envelope is None:
            continue
        instruction = envelope.settlement_instructed
        if instruction.table_id in wanted:
            game = instructed.setdefault(instruction.table_id, GameTransfers())
            game.add(envelope.event_id, instruction.reason, record.timestamp)


def add_seat_records(records: Iterable[Any], wanted: Container[str], published_ms: dict[str, int]) -> None:
    """Note when the `GameEnded` of the `wanted` tables was published, from Kafka `records` of the
    seats topic (a re-sent one keeps the first publication's time)."""
    for record in records:
        envelope = _envelope_of(record, "game_ended")
        if envelope is not None and envelope.stream_id in wanted:
            first = published_ms.get(envelope.stream_id, record.timestamp)
            published_ms[envelope.stream_id] = min(first, record.timestamp)


HOPS = ("table", "scoring", "ledger")
"""The hops of `lag_hops`, in order."""


def lag_hops(
    ended: dict[str, datetime.datetime],
    ended_published_ms: dict[str, int],
    instructed: dict[str, GameTransfers],
    transfers: dict[str, GameTransfers],
) -> dict[str, list[float]]:
    """Each hop's seconds over the settled games whose `GameEnded` and instructions were read, each
    list in the games' order (so the i-th of every hop is the same game's: they add up to its lag)."""
    hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for table_id, ended_at in ended.items():
        game = transfers.get(table_id)
        published_ms = ended_published_ms.get(table_id)
        instructions = instructed.get(table_id)
        if game is None or not game.settled or published_ms is None or instructions is None:
            continue
        instructed_ms = instructions.last_posted_ms
        hops["table"].append(published_ms / 1000 - ended_at.timestamp())
        hops["scoring"].append((instructed_ms - published_ms) / 1000)
        hops["ledger"].append((game.last_posted_ms - instructed_ms) / 1000)
    return hops


def add_ledger_records(
    records: Iterable[Any], wanted: Container[str], transfers: dict[str, GameTransfers]
) -> None:
    """Note the `TransferPosted` of the `wanted` tables among Kafka `records` of the ledger topic."""
    for record in records:
        table_id = (record.key or b"").decode(errors="replace")
        if table_id not in wanted:
            continue  # an account's stream (a deposit, a grant) or another run's game
        envelope = _envelope_of(record, "transfer_posted")
        if envelope is None:
            continue
        transfer = envelope.transfer_posted
        game = transfers.setdefault(table_id, GameTransfers())
        game.add(envelope.event_id, transfer.reason, record.timestamp)


def hops_summary(hops: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """`lag_hops` as figures: each hop's p50 and p99 (ms), and the hops of the slowest game."""
    if not hops or not hops[HOPS[0]]:
        return {}
    count = len(hops[HOPS[0]])
    summary: dict[str, dict[str, float]] = {}
    for hop in HOPS:
        ordered = sorted(hops[hop])
        summary[hop] = {
            "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(count - 1, int(count * 0.99))] * 1000,
        }
    slowest = max(range(count), key=lambda index: sum(hops[hop][index] for hop in HOPS))
    summary["slowest"] = {hop: hops[hop][slowest] * 1000 for hop in HOPS}
    return summary


def lag_summary_line(measured: list[float], unsettled: int) -> str:
    """The figures of `lags_seconds` as the line ``mjctl bots --settlement-lag`` prints."""
    if not measured:
        return f"settlement lag: no game settled ({unsettled} unsettled after {LAG_MAX_SECONDS:.0f} s)"
    p50 = statistics.median(measured) * 1000
    p99 = measured[min(len(measured) - 1, int(len(measured) * 0.99))] * 1000
    missing = f", {unsettled} unsettled" if unsettled else ""
    return (
        f"settlement lag GameEnded → last TransferPosted over {len(measured)} games: "
        f"p50 {p50:.0f} ms, p99 {p99:.0f} ms{missing}"
    )


class TopicLagProbe:
    """Notes each finished game (`game_ended`), then reads the lags from the ledger topic once
    (`lags_seconds`, `summary_line`); `bootstrap_servers` and `ledger_topic` as the services'
    settings give them (``Settings.kafka_bootstrap_servers``, ``Topics.ledger``)."""

    source = "ledger topic"

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        ledger_topic: str,
        settlement_topic: str | None = None,
        seats_topic: str | None = None,
    ) -> None:
        self._bootstrap_servers = list(bootstrap_servers)
        self._topic = ledger_topic
        self._settlement_topic = settlement_topic
        self._seats_topic = seats_topic
        self._since = time.time() - CLOCK_MARGIN_SECONDS
        self._ended: dict[str, datetime.datetime] = {}
        self._result: tuple[list[float], int, float] | None = None
        self._hops: dict[str, list[float]] = {}

    def game_ended(self, table_id: str, ended_at: datetime.datetime) -> None:
        """Measure `table_id`, whose `GameEnded` event occurred at `ended_at` (aware)."""
        self._ended[table_id] = ended_at
        self._result = None

    def _read(self) -> tuple[list[float], int, float]:
        from mahjong_platform.topic_reading import reading_consumer

        transfers: dict[str, GameTransfers] = {}
        consumer = reading_consumer(self._bootstrap_servers)
        try:
            self._seek_since(consumer, self._topic)
            deadline = time.monotonic() + LAG_MAX_SECONDS
            while time.monotonic() < deadline:
                batches = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                for records in batches.values():
                    add_ledger_records(records, self._ended, transfers)
                if all(table_id in transfers and transfers[table_id].settled for table_id in self._ended):
                    break
            if self._settlement_topic is not None and self._seats_topic is not None:
                # Every settled game's instructions and end were published before its transfers.
                instructed: dict[str, GameTransfers] = {}
                published_ms: dict[str, int] = {}
                for records in self._read_to_end(consumer, self._settlement_topic):
                    add_settlement_records(records, self._ended, instructed)
                for records in self._read_to_end(consumer, self._seats_topic):
                    add_seat_records(records, self._ended, published_ms)
                self._hops = lag_hops(self._ended, published_ms, instructed, transfers)
        finally:
            consumer.close(autocommit=False)
        return settlement_lags(self._ended, transfers)

    def _seek_since(self, consumer: Any, topic: str) -> dict[Any, int]:
        """Assign `consumer` the topic's partitions from the probe's start; return their end offsets."""
        from kafka import TopicPartition
        from mahjong_platform.topic_reading import topic_partitions

        partitions = [TopicPartition(topic, number) for number in sorted(topic_partitions(consumer, topic))]
        consumer.assign(partitions)
        since_ms = int(self._since * 1000)
        starts = consumer.offsets_for_times({partition: since_ms for partition in partitions})
        ends: dict[Any, int] = consumer.end_offsets(partitions)
        for partition in partitions:
            start = starts.get(partition)
            consumer.seek(partition, ends[partition] if start is None else start.offset)
        return ends

    def _read_to_end(self, consumer: Any, topic: str) -> Iterator[list[Any]]:
        """The topic's records from the probe's start to its end now, a partition's batch at a time."""
        ends = self._seek_since(consumer, topic)
        deadline = time.monotonic() + LAG_MAX_SECONDS
        while time.monotonic() < deadline and any(
            consumer.position(partition) < end for partition, end in ends.items()
        ):
            yield from consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values()

    def lags_seconds(self) -> tuple[list[float], int]:
        """Every measured lag (sorted) and how many games were not settled within LAG_MAX_SECONDS
        of the read (the ledger topic read now, once; again only after more games ended)."""
        if self._result is None:
            self._result = self._read() if self._ended else ([], 0, 0.0)
        lags, unsettled, _last = self._result
        return lags, unsettled

    def hops(self) -> dict[str, dict[str, float]]:
        """Each hop's p50 and p99 and the slowest game's hops (`hops_summary`); {} when the
        probe was given no settlement and seats topics."""
        self.lags_seconds()
        return hops_summary(self._hops)

    def last_settled_at(self) -> float:
        """When (epoch seconds, the ledger's clock) the last settled game's last transfer was
        posted; 0 before any."""
        self.lags_seconds()
        assert self._result is not None
        return self._result[2]

    def summary_line(self) -> str:
        return lag_summary_line(*self.lags_seconds())


class PollingLagProbe:
    """`TopicLagProbe` for bots that reach only the services' gRPC ports: each finished game's
    statement polled in a background thread (`ledger_channel` carries a finance token)."""

    source = "ledger polls"

    def __init__(self, ledger_channel: grpc.Channel, workers: int = 8) -> None:
        self._ledger = ledger_service_pb2_grpc.LedgerServiceStub(ledger_channel)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="settlement-lag")
        self._futures: list[Future[float | None]] = []
        self._lock = threading.Lock()
        self._last_settled = 0.0

    def game_ended(self, table_id: str, ended_at: datetime.datetime) -> None:
        """Start measuring `table_id`, whose `GameEnded` event occurred at `ended_at` (aware)."""
        future = self._pool.submit(self._measure, table_id, ended_at)
        with self._lock:
            self._futures.append(future)

    def _measure(self, table_id: str, ended_at: datetime.datetime) -> float | None:
        statement = wait_for_settlement(
            self._ledger, table_id, SEAT_COUNT, timeout_seconds=LAG_MAX_SECONDS, poll_seconds=POLL_SECONDS
        )
        if statement is None:
            return None
        now = time.time()
        with self._lock:
            self._last_settled = max(self._last_settled, now)
        return now - ended_at.timestamp()

    def last_settled_at(self) -> float:
        """When (epoch seconds) the last game seen settled was seen settled; 0 before any."""
        with self._lock:
            return self._last_settled

    def hops(self) -> dict[str, dict[str, float]]:
        """Polls see only the ledger: no hops."""
        return {}

    def lags_seconds(self) -> tuple[list[float], int]:
        """Every measured lag (sorted) and how many games were not settled within LAG_MAX_SECONDS."""
        with self._lock:
            futures = list(self._futures)
        results = [future.result() for future in futures]
        self._pool.shutdown(wait=True)
        measured = sorted(lag for lag in results if lag is not None)
        return measured, sum(lag is None for lag in results)

    def summary_line(self) -> str:
        return lag_summary_line(*self.lags_seconds())


def settlement_lag_probe(
    settings: Settings, finance_channel: Callable[[], grpc.Channel] | None = None
) -> TopicLagProbe | PollingLagProbe:
    """The probe for `settings`: `TopicLagProbe` when the ledger topic can be read (the broker
    answers within `KAFKA_CHECK_SECONDS`), else `PollingLagProbe` on `finance_channel()` (by
    default a channel to the ledger with a finance token minted from the settings' secret)."""
    from kafka.errors import KafkaError
    from mahjong_platform.topic_reading import reading_consumer
    from mahjong_platform.topics import Topics

    topics = Topics.with_prefix(settings.topic_prefix)
    topic = topics.ledger
    servers = list(settings.kafka_bootstrap_servers)
    readable = False
    try:
        consumer = reading_consumer(servers, bootstrap_timeout_seconds=KAFKA_CHECK_SECONDS)
    except KafkaError:
        consumer = None
    if consumer is not None:
        try:
            deadline = time.monotonic() + KAFKA_CHECK_SECONDS
            readable = bool(consumer.partitions_for_topic(topic))
            while not readable and time.monotonic() < deadline:
                time.sleep(0.1)
                readable = bool(consumer.partitions_for_topic(topic))
        finally:
            consumer.close(autocommit=False)
    if readable:
        return TopicLagProbe(servers, topic, topics.settlement, topics.seats)
    if finance_channel is None:
        return PollingLagProbe(_finance_channel(settings))
    return PollingLagProbe(finance_channel())


def _finance_channel(settings: Settings) -> grpc.Channel:
    from mahjong_platform.auth import mint_token
    from mahjong_platform.grpc_client import open_channel

    token = mint_token(settings.jwt_secret, "bots-finance", ["finance"], ttl_seconds=24 * 3600)
    channel: grpc.Channel = open_channel(settings.grpc_target("ledger"), token)
    return channel
