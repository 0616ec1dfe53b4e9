"""The optional [from, to) window of a request (`google.protobuf.Timestamp` fields named ``from``
and ``to``), read and checked once for every service that takes one."""

from __future__ import annotations

import datetime

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from mahjong_platform.errors import InvalidArgumentError


def time_window(request: Message) -> tuple[datetime.datetime | None, datetime.datetime | None]:
    """The request's (from, to) in UTC, None for an unset bound.

    INVALID_ARGUMENT for a time outside 0001-01-01..9999-12-31 (or with bad nanos), and for a
    ``from`` after ``to``.
    """
    from_time = _optional_time(request, "from")
    to_time = _optional_time(request, "to")
    if from_time is not None and to_time is not None and from_time > to_time:
        raise InvalidArgumentError(f"from ({from_time.isoformat()}) is after to ({to_time.isoformat()})")
    return from_time, to_time


def _optional_time(request: Message, field_name: str) -> datetime.datetime | None:
    if not request.HasField(field_name):
        return None
    timestamp: Timestamp = getattr(request, field_name)
    try:
        moment: datetime.datetime = timestamp.ToDatetime(tzinfo=datetime.UTC)
    except (ValueError, OverflowError):
        raise InvalidArgumentError(
            f"{field_name} must be a time from 0001-01-01 to 9999-12-31 with nanos 0..999999999"
        ) from None
    return moment
