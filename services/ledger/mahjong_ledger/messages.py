"""Between the protobuf messages and the ledger's own values: the one place that knows both."""

from __future__ import annotations

import base64
import binascii
from typing import Final

from mahjong.v1 import ledger_events_pb2, ledger_service_pb2, settlement_events_pb2

from mahjong_ledger.domain import InvalidOrderError, PayeeLine, SettlementOrder
from mahjong_ledger.repository import Entry, TransferRecord

PAGE_TOKEN_VERSION: Final = "v1"
PAGE_TOKEN_MAX_LENGTH: Final = 400


def settlement_order_from_proto(message: settlement_events_pb2.SettlementInstructed) -> SettlementOrder:
    """The ledger's view of a ``SettlementInstructed``; payees keep their order (turn order)."""
    return SettlementOrder(
        instruction_id=message.instruction_id,
        table_id=message.table_id,
        room_id=message.room_id,
        reason=message.reason,
        payer_account=message.payer_account,
        payees=tuple(PayeeLine(payee.account, payee.beans, payee.reason) for payee in message.payees),
        source_event_id=message.source_event_id,
        line=message.line,
        income_instruction_ids=tuple(message.income_instruction_ids),
    )


def transfer_posted_from_record(record: TransferRecord) -> ledger_events_pb2.TransferPosted:
    """The ``TransferPosted`` message describing a stored transfer (as published when it was posted)."""
    return ledger_events_pb2.TransferPosted(
        transfer_id=record.transfer_id,
        instruction_id=record.order_key,
        table_id=record.table_id,
        reason=record.reason,
        postings=[
            ledger_events_pb2.Posting(account=posting.account, beans=posting.beans)
            for posting in record.postings
        ],
        requested_beans=record.requested_beans,
        posted_beans=record.posted_beans,
        memo=record.memo,
        income_limit_beans=record.income_limit_beans,
    )


def entry_to_proto(entry: Entry) -> ledger_service_pb2.Entry:
    """One account statement line for ``ListEntries``."""
    message = ledger_service_pb2.Entry(
        transfer_id=entry.transfer_id,
        instruction_id=entry.order_key,
        table_id=entry.table_id,
        reason=entry.reason,
        beans=entry.beans,
        balance_after_beans=entry.balance_after_beans,
    )
    message.posted_at.FromDatetime(entry.posted_at)
    return message


def encode_page_token(account: str, before_posting_id: int) -> str:
    """An opaque token for the next page: the account (so it cannot be replayed on another) and
    the last posting id shown."""
    text = f"{PAGE_TOKEN_VERSION}|{account}|{before_posting_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_page_token(token: str, account: str) -> int | None:
    """The posting id a page token continues before; None for the first page.

    Raises `InvalidOrderError` for a token that is not ours or belongs to another account.
    """
    if not token:
        return None
    if len(token) > PAGE_TOKEN_MAX_LENGTH:
        raise InvalidOrderError("page_token is too long; pass the next_page_token of the previous response")
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        version, token_account, posting_id_text = text.split("|")
        before_posting_id = int(posting_id_text)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidOrderError(
            "page_token is malformed; pass the next_page_token of the previous response unchanged"
        ) from None
    # Posting ids are BIGINT: a larger number is no id of ours (and would overflow the query).
    if version != PAGE_TOKEN_VERSION or not 1 <= before_posting_id < 2**63:
        raise InvalidOrderError("page_token is malformed; pass the next_page_token of the previous response")
    if token_account != account:
        raise InvalidOrderError(f"page_token belongs to another account, not {account!r}")
    return before_posting_id
