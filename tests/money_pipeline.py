"""The money pipeline as pure functions, for the cross-service settlement tests (issue 5).

Table engine events → the codec's protobuf messages in envelopes (as the table service stores
and publishes them) → scoring's pure `game_settlement` fold → `SettlementInstructed` messages →
the ledger's pure double-entry `Book`, funded with given starting balances from `world`.

Nothing here is a second implementation of a rule: every number comes from the services' own
code, so the tests can compare it with numbers worked out by hand from RULES.md.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from mahjong.v1 import envelope_pb2, settlement_events_pb2
from mahjong_ledger.domain import (
    HOUSE_ESCAPE_ACCOUNT,
    HOUSE_RAKE_ACCOUNT,
    WORLD_ACCOUNT,
    Book,
    DepositOrder,
    SettlementOrder,
    Transfer,
    fold,
)
from mahjong_ledger.messages import settlement_order_from_proto
from mahjong_platform.envelopes import new_envelope
from mahjong_scoring.game_settlement import SettlementOutput, new_game_settlement, settle_table_events
from mahjong_table.codec import to_message
from mahjong_table.core.commands import Pass
from mahjong_table.core.events import TableEvent, TableOpened
from mahjong_table.core.state import Phase
from mahjong_table.sichuan.decide import waited_on
from mahjong_table.testing import Table

EVENT_NAMESPACE: Final = uuid.UUID("3c0f6d1e-7b52-5a8e-9d14-2f6a8b0c4e71")
GAME_START: Final = datetime.datetime(2025, 3, 1, tzinfo=datetime.UTC)
SEATS: Final = range(4)
HOUSE_ACCOUNTS: Final = (HOUSE_RAKE_ACCOUNT, HOUSE_ESCAPE_ACCOUNT)


def account(seat: int, players: Sequence[str] = ("p0", "p1", "p2", "p3")) -> str:
    """The ledger account of a seat (the table helpers seat players p0..p3)."""
    return "player:" + players[seat]


def table_envelopes(events: Sequence[TableEvent]) -> list[envelope_pb2.Envelope]:
    """The table's events as the table service would publish them: codec payloads in envelopes
    numbered 1, 2, … in the table's stream, with ids and times derived from the sequence."""
    opened = events[0]
    assert isinstance(opened, TableOpened), "a table's stream starts with TableOpened"
    table_id = opened.table_id
    envelopes = []
    for sequence, event in enumerate(events, start=1):
        occurred_at = GAME_START + datetime.timedelta(seconds=sequence)
        envelopes.append(
            new_envelope(
                to_message(event),
                clock=lambda occurred_at=occurred_at: occurred_at,  # type: ignore[misc]
                stream_id=table_id,
                sequence=sequence,
                event_id=str(uuid.uuid5(EVENT_NAMESPACE, f"{table_id}/{sequence}")),
                correlation_id=table_id,
            )
        )
    return envelopes


def funding_orders(starting_beans: Mapping[str, int]) -> list[DepositOrder]:
    """Deposits from `world` that give each account its starting balance (zero: no deposit)."""
    return [DepositOrder(name, beans, f"fund:{name}") for name, beans in starting_beans.items() if beans > 0]


def settlement_orders(
    instructions: Sequence[settlement_events_pb2.SettlementInstructed],
) -> list[SettlementOrder]:
    """The ledger's orders for scoring's instructions, read as the ledger's consumer reads them."""
    return [settlement_order_from_proto(instruction) for instruction in instructions]


@dataclass(frozen=True)
class Money:
    """One game through scoring and the ledger: what scoring instructed, what the ledger moved."""

    output: SettlementOutput
    book: Book
    transfers: tuple[Transfer, ...]
    starting_beans: Mapping[str, int]

    @property
    def instructions(self) -> tuple[settlement_events_pb2.SettlementInstructed, ...]:
        return self.output.instructions

    def balances(self) -> dict[str, int]:
        """Every seat's final balance by seat, and the two house accounts by name."""
        result: dict[str, int] = {}
        for seat in SEATS:
            result[f"p{seat}"] = self.book.balance(account(seat))
        for house in HOUSE_ACCOUNTS:
            result[house] = self.book.balance(house)
        return result

    def deltas(self) -> dict[str, int]:
        """Each seat's and house account's change over the game (final − starting)."""
        starting = {**{f"p{seat}": self.starting_beans.get(account(seat), 0) for seat in SEATS}}
        return {name: beans - starting.get(name, 0) for name, beans in self.balances().items()}

    def lines(self, *, rake: bool = False) -> list[tuple[str, str, tuple[tuple[str, int], ...]]]:
        """(reason, payer, ((payee, beans owed), …)) per instruction, accounts without 'player:'."""
        return [
            (
                line.reason,
                line.payer_account.removeprefix("player:"),
                tuple((payee.account.removeprefix("player:"), payee.beans) for payee in line.payees),
            )
            for line in self.instructions
            if rake or line.reason != "rake"
        ]

    def game_settled(self) -> settlement_events_pb2.GameSettled | None:
        last = self.output.envelopes[-1] if self.output.envelopes else None
        if last is None or last.WhichOneof("payload") != "game_settled":
            return None
        return last.game_settled


def post(
    instructions: Sequence[settlement_events_pb2.SettlementInstructed], starting_beans: Mapping[str, int]
) -> tuple[Book, tuple[Transfer, ...]]:
    """Fund the accounts, then post every instruction in order on a fresh `Book`."""
    book, transfers = fold(Book(), [*funding_orders(starting_beans), *settlement_orders(instructions)])
    return book, tuple(transfer for transfer in transfers if transfer.kind.value == "settlement")


def settle_and_post(events: Sequence[TableEvent], starting_beans: Mapping[str, int]) -> Money:
    """The whole pipeline for one game's table events; asserts the ledger's invariants on the way."""
    _, output = settle_table_events(new_game_settlement(), table_envelopes(events))
    assert output.notices == (), output.notices
    book, transfers = post(output.instructions, starting_beans)
    assert_books_balance(book, transfers)
    return Money(output, book, transfers, starting_beans)


def starting(*beans_by_seat: int) -> dict[str, int]:
    """Starting balances by seat: `starting(1000, 0, 5, 1000)`."""
    assert len(beans_by_seat) == len(SEATS)
    return {account(seat): beans for seat, beans in enumerate(beans_by_seat)}


def assert_books_balance(book: Book, transfers: Sequence[Transfer]) -> None:
    """Every game transfer sums to zero, no account but `world` is negative, the trial balance is 0."""
    for transfer in transfers:
        assert sum(posting.beans for posting in transfer.postings) == 0, transfer
    assert book.total_beans() == 0
    negative = {name: beans for name, beans in book.balances.items() if beans < 0 and name != WORLD_ACCOUNT}
    assert negative == {}, negative


def pass_claims(table: Table) -> None:
    """Every seat asked about the open discard (or added kong) passes, win and pong offers alike."""
    while table.state.phase is Phase.CLAIM and not table.state.is_over:
        table.act(Pass(waited_on(table.state)[0]))
