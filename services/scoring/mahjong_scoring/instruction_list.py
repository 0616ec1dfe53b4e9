"""ListSettlementInstructions: every instruction scoring emitted for a game or in a time window,
with the beans it asked for, a page at a time (ops/finance; what the ledger's reconcile compares
its postings with, ARCHITECTURE.md "Money: the ledger").

An instruction's time is the occurrence time of its `SettlementInstructed` event in scoring's
event store (whose event id is the instruction id): the time the ledger stamps on the transfer it
posts, so both sides select the same instructions for one window. Pages come in instruction id
order (keyset pagination, read-only, one transaction per page); an instruction emitted while a
caller pages through may fall on a page already read, so a window should end in the past.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from typing import Final

import sqlalchemy
from google.protobuf.timestamp_pb2 import Timestamp
from mahjong.v1 import scoring_service_pb2
from mahjong_platform.database import SessionFactory, read_transaction
from mahjong_platform.envelopes import as_utc
from mahjong_platform.errors import InvalidArgumentError
from mahjong_platform.schema import stored_events
from mahjong_platform.time_window import time_window

from mahjong_scoring.models import TABLE_ID_MAX_LENGTH, scoring_lines

PAGE_SIZE_DEFAULT: Final = 1_000
PAGE_SIZE_MAX: Final = 5_000
PAGE_TOKEN_MAX_LENGTH: Final = 1_000
_PAGE_TOKEN_VERSION: Final = 1


def list_settlement_instructions(
    session_factory: SessionFactory, request: scoring_service_pb2.ListSettlementInstructionsRequest
) -> scoring_service_pb2.ListSettlementInstructionsResponse:
    """One page of the instructions the request selects; INVALID_ARGUMENT for a request out of
    bounds (table id, page size, window, a page token of another query)."""
    if len(request.table_id) > TABLE_ID_MAX_LENGTH:
        raise InvalidArgumentError(f"table_id must be at most {TABLE_ID_MAX_LENGTH} characters")
    if not 0 <= request.page_size <= PAGE_SIZE_MAX:
        raise InvalidArgumentError(f"page_size must be 0 (default {PAGE_SIZE_DEFAULT}) to {PAGE_SIZE_MAX}")
    page_size = request.page_size or PAGE_SIZE_DEFAULT
    from_time, to_time = time_window(request)
    query_key = [request.table_id, _iso(from_time), _iso(to_time)]
    after = _decode_page_token(request.page_token, query_key)
    occurred_at = stored_events.c.occurred_at
    query = (
        sqlalchemy.select(
            scoring_lines.c.instruction_id, scoring_lines.c.table_id, scoring_lines.c.total_beans, occurred_at
        )
        .select_from(
            scoring_lines.outerjoin(stored_events, stored_events.c.event_id == scoring_lines.c.instruction_id)
        )
        .order_by(scoring_lines.c.instruction_id)
        .limit(page_size + 1)  # one more than asked, to know whether another page follows
    )
    if request.table_id:
        query = query.where(scoring_lines.c.table_id == request.table_id)
    if from_time is not None:
        query = query.where(occurred_at >= from_time)
    if to_time is not None:
        query = query.where(occurred_at < to_time)
    if after is not None:
        query = query.where(scoring_lines.c.instruction_id > after)
    with read_transaction(session_factory) as session:
        rows = session.execute(query).all()
    response = scoring_service_pb2.ListSettlementInstructionsResponse(
        instructions=[
            scoring_service_pb2.SettlementInstructionSummary(
                instruction_id=row.instruction_id,
                table_id=row.table_id,
                requested_beans=int(row.total_beans),
                occurred_at=_timestamp(row.occurred_at),
            )
            for row in rows[:page_size]
        ]
    )
    if len(rows) > page_size:
        response.next_page_token = _encode_page_token(query_key, rows[page_size - 1].instruction_id)
    return response


def _iso(moment: datetime.datetime | None) -> str:
    return "" if moment is None else moment.isoformat()


def _timestamp(moment: datetime.datetime | None) -> Timestamp | None:
    if moment is None:
        return None  # a line without its stored event (none is written so): no time to give
    timestamp = Timestamp()
    timestamp.FromDatetime(as_utc(moment))
    return timestamp


def _encode_page_token(query_key: list[str], after_instruction_id: str) -> str:
    """An opaque token: the query it belongs to and the last instruction id shown."""
    text = json.dumps([_PAGE_TOKEN_VERSION, *query_key, after_instruction_id])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_page_token(token: str, query_key: list[str]) -> str | None:
    """The instruction id a page continues after; None for the first page."""
    if not token:
        return None
    if len(token) > PAGE_TOKEN_MAX_LENGTH:
        raise InvalidArgumentError(
            "page_token is too long; pass the next_page_token of the previous response"
        )
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
    except (binascii.Error, UnicodeDecodeError, ValueError):
        decoded = None
    if not (isinstance(decoded, list) and len(decoded) == 5 and decoded[0] == _PAGE_TOKEN_VERSION):
        raise InvalidArgumentError(
            "page_token is malformed; pass the next_page_token of the previous response unchanged"
        )
    if decoded[1:4] != query_key or not isinstance(decoded[4], str):
        raise InvalidArgumentError("page_token belongs to another query (table_id, from or to differ)")
    return decoded[4]
