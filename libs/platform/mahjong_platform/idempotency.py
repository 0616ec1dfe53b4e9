"""One idempotency rule for every service (ARCHITECTURE.md "Errors").

A mutating call carries a client-chosen ``idempotency_key``. For one caller and one method:

- the same key with the same request returns the first answer and changes nothing;
- the same key with a different request is FAILED_PRECONDITION (the client reused a key by mistake;
  answering the first call's result would hide that its second request was never carried out);
- a key is 1..`IDEMPOTENCY_KEY_MAX_LENGTH` characters and may not start with a prefix the services
  mint keys with themselves (`RESERVED_KEY_PREFIXES`, e.g. the ledger's ``grant:<player>``):
  INVALID_ARGUMENT, so no client can take an internal key and lock its owner out.

"The same request" is the request message without its key, compared by `request_digest` (a SHA-256
of its deterministic serialization), which the services store next to the first answer.
"""

from __future__ import annotations

import hashlib
from typing import Final

from google.protobuf.message import Message

from mahjong_platform.errors import FailedPreconditionError, InvalidArgumentError

IDEMPOTENCY_KEY_MAX_LENGTH: Final = 128
RESERVED_KEY_PREFIXES: Final = ("grant:", "internal:")
"""Key prefixes the services use for keys they mint themselves (the ledger's starting grants)."""
KEY_FIELD: Final = "idempotency_key"


def check_idempotency_key(key: str, max_length: int = IDEMPOTENCY_KEY_MAX_LENGTH) -> None:
    """INVALID_ARGUMENT unless ``key`` is 1..max_length characters and not a reserved prefix."""
    if not 0 < len(key) <= max_length:
        raise InvalidArgumentError(f"idempotency_key must be 1..{max_length} characters")
    check_not_reserved(key)


def check_not_reserved(key: str) -> None:
    """INVALID_ARGUMENT when ``key`` starts with one of the prefixes the services mint themselves."""
    for prefix in RESERVED_KEY_PREFIXES:
        if key.startswith(prefix):
            raise InvalidArgumentError(
                f"idempotency_key may not start with {prefix!r}: that prefix is reserved for keys the "
                "services mint themselves; choose another key (a UUID is a good one)"
            )


def request_digest(request: Message) -> str:
    """Hex SHA-256 of ``request`` without its idempotency key: equal digests, equal requests."""
    copy = type(request)()
    copy.CopyFrom(request)
    copy.ClearField(KEY_FIELD)
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def replay_answer(method: str, stored_digest: str | None, digest: str, answer: bytes) -> bytes:
    """The stored first answer when the retry asks the same; FAILED_PRECONDITION when it does not.

    ``stored_digest`` None: an answer stored before digests were kept, answered as before.
    """
    if stored_digest is not None and stored_digest != digest:
        raise FailedPreconditionError(
            f"{method}: this idempotency_key was already used for a different request; "
            "use a new key for a new request (a retry must repeat the first request exactly)"
        )
    return answer
