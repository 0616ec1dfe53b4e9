"""Settlement lag: how long after a game ends its money has moved (issue 5 Speed).

Measured from the `GameEnded` event's time (as recorded by the table engine, just before its
commit) to the game's last `TransferPosted` on the ledger topic, the rake transfers being the last
lines of every game's settlement: table engine → outbox → Kafka → scoring → outbox → Kafka → ledger
→ outbox → Kafka. A transfer's time is its Kafka record's: the ledger's outbox relay stamps it when
it publishes the transfer, right after the ledger committed it (the event's own `occurred_at` is
the settlement instruction's, kept for deterministic rebuilds, so it cannot say when the ledger
posted it).

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
from collections.abc import Callable, Container, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
from mahjong.v1 import ledger_service_pb2_grpc
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


def add_ledger_records(
    records: Iterable[Any], wanted: Container[str], transfers: dict[str, GameTransfers]
) -> None:
    """Note the `TransferPosted` of the `wanted` tables among Kafka `records` of the ledger topic."""
    from mahjong_platform.envelopes import EnvelopeDecodeError, parse_envelope

    for record in records:
        table_id = (record.key or b"").decode(errors="replace")
        if table_id not in wanted:
            continue  # an account's stream (a deposit, a grant) or another run's game
        try:
            envelope = parse_envelope(record.value or b"")
        except EnvelopeDecodeError:
            continue
        if envelope.WhichOneof("payload") != "transfer_posted":
            continue
        transfer = envelope.transfer_posted
        game = transfers.setdefault(table_id, GameTransfers())
        game.add(envelope.event_id, transfer.reason, record.timestamp)


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

    def __init__(self, bootstrap_servers: Sequence[str], ledger_topic: str) -> None:
        self._bootstrap_servers = list(bootstrap_servers)
        self._topic = ledger_topic
        self._since = time.time() - CLOCK_MARGIN_SECONDS
        self._ended: dict[str, datetime.datetime] = {}
        self._result: tuple[list[float], int, float] | None = None

    def game_ended(self, table_id: str, ended_at: datetime.datetime) -> None:
        """Measure `table_id`, whose `GameEnded` event occurred at `ended_at` (aware)."""
        self._ended[table_id] = ended_at
        self._result = None

    def _read(self) -> tuple[list[float], int, float]:
        from kafka import KafkaConsumer, TopicPartition
        from mahjong_platform.topic_reading import topic_partitions

        transfers: dict[str, GameTransfers] = {}
        consumer = KafkaConsumer(
            bootstrap_servers=self._bootstrap_servers, group_id=None, enable_auto_commit=False
        )
        try:
            numbers = sorted(topic_partitions(consumer, self._topic))
            partitions = [TopicPartition(self._topic, number) for number in numbers]
            consumer.assign(partitions)
            since_ms = int(self._since * 1000)
            starts = consumer.offsets_for_times({partition: since_ms for partition in partitions})
            ends = consumer.end_offsets(partitions)
            for partition in partitions:
                start = starts.get(partition)
                consumer.seek(partition, ends[partition] if start is None else start.offset)
            deadline = time.monotonic() + LAG_MAX_SECONDS
            while time.monotonic() < deadline:
                batches = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                for records in batches.values():
                    add_ledger_records(records, self._ended, transfers)
                if all(table_id in transfers and transfers[table_id].settled for table_id in self._ended):
                    break
        finally:
            consumer.close(autocommit=False)
        return settlement_lags(self._ended, transfers)

    def lags_seconds(self) -> tuple[list[float], int]:
        """Every measured lag (sorted) and how many games were not settled within LAG_MAX_SECONDS
        of the read (the ledger topic read now, once; again only after more games ended)."""
        if self._result is None:
            self._result = self._read() if self._ended else ([], 0, 0.0)
        lags, unsettled, _last = self._result
        return lags, unsettled

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
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    from mahjong_platform.topics import Topics

    topic = Topics.with_prefix(settings.topic_prefix).ledger
    servers = list(settings.kafka_bootstrap_servers)
    readable = False
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=servers,
            group_id=None,
            enable_auto_commit=False,
            bootstrap_timeout_ms=int(KAFKA_CHECK_SECONDS * 1000),
        )
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
        return TopicLagProbe(servers, topic)
    if finance_channel is None:
        return PollingLagProbe(_finance_channel(settings))
    return PollingLagProbe(finance_channel())


def _finance_channel(settings: Settings) -> grpc.Channel:
    from mahjong_platform.auth import mint_token
    from mahjong_platform.grpc_client import open_channel

    token = mint_token(settings.jwt_secret, "bots-finance", ["finance"], ttl_seconds=24 * 3600)
    channel: grpc.Channel = open_channel(settings.grpc_target("ledger"), token)
    return channel
