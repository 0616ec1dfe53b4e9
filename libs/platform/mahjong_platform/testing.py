"""Steps that tests on the real broker and database take again and again, in one place: put
envelopes on a topic, poll a tracked consumer until it has handled so many messages, relay an
outbox until it is empty, apply batches as a service's consumer does. Nothing here is used by a
service; each step only does what a test
would write by hand, and fails (an `AssertionError` naming what was missing) instead of waiting
forever."""

from __future__ import annotations

import time
from collections.abc import Iterable

from mahjong.v1 import envelope_pb2
from sqlalchemy.engine import Engine

from mahjong_platform.database import SessionFactory, create_session_factory, transaction
from mahjong_platform.envelopes import serialize_envelope
from mahjong_platform.outbox import OutboxRelay, count_unsent_outbox_messages, create_idempotent_producer
from mahjong_platform.service_runtime import ConsumerDefinition
from mahjong_platform.tracked_consumer import BatchApplier, FailureHook, TrackedConsumer, per_event

FIRST_ASSIGNMENT_SECONDS = 300.0
"""How long a consumer may take to handle its messages: the first consumer group on a fresh
broker makes it create `__consumer_offsets` (50 partitions), which on a loaded machine takes
minutes before the group's first assignment."""


def produce_envelopes(
    bootstrap_servers: str, topic: str, envelopes: Iterable[envelope_pb2.Envelope], *, client_id: str
) -> None:
    """Put `envelopes` on `topic` in order, keyed by their stream (as the relay does), and wait for
    every acknowledgement."""
    producer = create_idempotent_producer(bootstrap_servers, client_id=client_id, delivery_timeout_ms=30_000)
    try:
        for envelope in envelopes:
            producer.send(topic, key=envelope.stream_id.encode(), value=serialize_envelope(envelope))
        producer.flush(timeout=30)
    finally:
        producer.close()


def poll_until_handled(
    consumer: TrackedConsumer, count: int, *, deadline_seconds: float = FIRST_ASSIGNMENT_SECONDS
) -> None:
    """Poll until `consumer` handled `count` messages (applied or skipped as duplicates)."""
    deadline = time.monotonic() + deadline_seconds
    handled = 0
    while handled < count:
        assert time.monotonic() < deadline, f"handled {handled} of {count} messages in {deadline_seconds} s"
        handled += consumer.poll_once(timeout_ms=200)


def relay_until_drained(engine: Engine, bootstrap_servers: str) -> None:
    """Relay the outbox of `engine`'s database to the broker until no message is left unsent."""
    session_factory = create_session_factory(engine)
    with OutboxRelay(engine, bootstrap_servers) as relay:
        while True:
            relay.run_once()
            with transaction(session_factory) as session:
                if count_unsent_outbox_messages(session) == 0:
                    return


def batch_applier_of(
    consumer: ConsumerDefinition, session_factory: SessionFactory, on_failure: FailureHook
) -> BatchApplier:
    """The transaction logic of the tracked consumer the service runtime runs for `consumer` (its
    handler, `idempotent_handler`), without Kafka: batches applied as the service applies them."""
    handler = consumer.batch_handler
    if handler is None:
        assert consumer.handler is not None, consumer.group_id
        handler = per_event(consumer.handler)
    return BatchApplier(
        session_factory,
        consumer.group_id,
        handler,
        on_failure,
        idempotent_handler=consumer.idempotent_handler,
    )
