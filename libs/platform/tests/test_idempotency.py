"""The one idempotency rule's pieces: the request digest ignores the key; reserved prefixes."""

from __future__ import annotations

import pytest
from mahjong.v1 import matchmaking_service_pb2 as messages
from mahjong_platform.errors import FailedPreconditionError, InvalidArgumentError
from mahjong_platform.idempotency import check_idempotency_key, replay_answer, request_digest


def test_the_digest_ignores_the_key_and_tells_requests_apart() -> None:
    first = messages.EnqueueRequest(room_id="a", idempotency_key="k1")
    assert request_digest(first) == request_digest(messages.EnqueueRequest(room_id="a", idempotency_key="k2"))
    assert request_digest(first) != request_digest(messages.EnqueueRequest(room_id="b", idempotency_key="k1"))
    assert first.idempotency_key == "k1", "the caller's request is left as it was"


def test_a_retry_gets_the_first_answer_and_another_request_is_refused() -> None:
    assert replay_answer("Enqueue", "d1", "d1", b"answer") == b"answer"
    assert replay_answer("Enqueue", None, "d1", b"answer") == b"answer"  # stored before digests
    with pytest.raises(FailedPreconditionError, match="different request"):
        replay_answer("Enqueue", "d1", "d2", b"answer")


@pytest.mark.parametrize("key", ["", "x" * 129, "grant:alice", "internal:x"])
def test_empty_long_and_reserved_keys_are_invalid(key: str) -> None:
    with pytest.raises(InvalidArgumentError):
        check_idempotency_key(key)
