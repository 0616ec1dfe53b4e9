"""Properties of the money pipeline over random complete games (issues 5 and 15).

hypothesis draws a wall seed, room options (N, rake, cap, the `add_one` self-draw option, exchange
three) and starting balances (zero and tiny ones included); `mahjong_table.selfplay`'s random
player plays the game to its end through the real aggregate (with leaves and deadline expiries);
the events go through the codec, scoring's pure settlement and the ledger `Book`. Whatever
happens, money is neither created nor destroyed and no player ever owes beans; a kong refund
never returns more than was paid, a call transfer never moves more than was received (RULES.md
1.9a.1), and every short payment is split as RULES.md 1.9 (1.10 for an escape) says, checked here
against an independent computation of the split. Half the games are played in a 64-cap room
(N = 1,000) by players holding a few hundred beans, so shortfalls are the rule there.

Deterministic: hypothesis runs derandomized, and every game is a function of the drawn values.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mahjong.v1 import settlement_events_pb2
from mahjong_ledger.domain import (
    WORLD_ACCOUNT,
    Book,
    Transfer,
    decide_deposit,
    evolve,
    is_player_account,
)
from mahjong_rules.room_rules import RoomRules
from mahjong_table.selfplay import random_legal_command
from mahjong_table.sichuan.decide import open_table
from mahjong_table.testing import Table

from .money_pipeline import HOUSE_ACCOUNTS, Money, account, funding_orders, settle_and_post

COMMANDS_PER_GAME_LIMIT = 3_000
SEAT_NAMES = ("p0", "p1", "p2", "p3")

balances_beans = st.one_of(
    st.just(0), st.integers(1, 50), st.integers(51, 5_000), st.integers(5_001, 2_000_000)
)


# A 64-cap room like the catalog's sichuan-cap64 (N = 1,000), with a few hundred beans per player.
CAP_64_RULES = RoomRules(coefficient=1_000, rake_beans=500, cap_points=64, exchange_three=False)
few_hundred_beans = st.one_of(st.just(0), st.integers(1, 999))


@st.composite
def room_rules(draw: st.DrawFn) -> RoomRules:
    return RoomRules(
        coefficient=draw(st.sampled_from([1, 10, 100, 200, 1_000])),
        rake_beans=draw(st.sampled_from([0, 1, 50, 400, 3_000])),
        cap_points=draw(st.sampled_from([0, 1, 4, 8, 16, 64])),
        self_draw_bonus=draw(st.sampled_from(["double", "add_one"])),
        exchange_three=draw(st.booleans()),
    )


def play_random_game(seed: int, rules: RoomRules) -> Table:
    table = Table(open_table(f"table-{seed}", "room-1", rules, list(SEAT_NAMES), seed))
    generator = random.Random(seed)
    for _ in range(COMMANDS_PER_GAME_LIMIT):
        if table.state.is_over:
            return table
        table.act(random_legal_command(table.state, generator, leave_chance=0.004, greedy_chance=0.5))
    raise AssertionError("the game did not end")


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    rules_and_beans=st.one_of(
        st.tuples(room_rules(), st.tuples(*[balances_beans] * 4)),
        st.tuples(st.just(CAP_64_RULES), st.tuples(*[few_hundred_beans] * 4)),
    ),
)
def test_every_game_moves_money_without_creating_it_and_no_player_goes_negative(
    seed: int, rules_and_beans: tuple[RoomRules, tuple[int, int, int, int]]
) -> None:
    rules, starting_beans = rules_and_beans
    table = play_random_game(seed, rules)
    funding = {account(seat): beans for seat, beans in enumerate(starting_beans)}
    money = settle_and_post(table.events, funding)

    # Replay the game's transfers one by one: no player balance is ever negative in between.
    book = _funded(funding)
    for transfer in money.transfers:
        assert sum(posting.beans for posting in transfer.postings) == 0
        assert transfer.posted_beans == min(transfer.owed_beans, book.balance(transfer.payer_account))
        book = evolve(book, transfer)
        assert all(beans >= 0 for name, beans in book.balances.items() if name != WORLD_ACCOUNT), (
            book.balances
        )
        assert book.total_beans() == 0
    assert book.balances == money.book.balances

    # The game's postings sum to zero over players and house accounts: what the players lost, the
    # winners and the house gained, exactly (the world account moves only for the funding).
    game_deltas: defaultdict[str, int] = defaultdict(int)
    for transfer in money.transfers:
        for posting in transfer.postings:
            assert is_player_account(posting.account) or posting.account in HOUSE_ACCOUNTS
            game_deltas[posting.account] += posting.beans
    assert sum(game_deltas.values()) == 0
    assert money.book.balance(WORLD_ACCOUNT) == -sum(starting_beans)

    # Every instruction is posted, once; a finished game was settled with its rake lines.
    assert [transfer.order_key for transfer in money.transfers] == [
        line.instruction_id for line in money.instructions
    ]
    settled = money.game_settled()
    assert settled is not None, "a complete game ends with GameSettled"
    assert settled.instruction_count == len(money.instructions)
    requested_by_house = sum(
        payee.beans for line in money.instructions for payee in line.payees if payee.account in HOUSE_ACCOUNTS
    )
    # Scoring's own totals (before balances limit anything) also sum to zero with the house.
    assert sum(player.beans - player.rake_beans for player in settled.players) + requested_by_house == 0
    check_kong_income_and_splits(money)


def test_1_9a_1_short_kong_payers_in_a_64_cap_room_are_refunded_and_transferred_what_they_paid() -> None:
    """A sweep of seeded games where everybody holds a few hundred beans: the invariants hold and
    the sweep really exercised short kongs that were later refunded or transferred."""
    seen: Counter[str] = Counter()
    for seed in range(SWEEP_GAMES):
        table = play_random_game(seed, CAP_64_RULES)
        generator = random.Random(seed)
        funding = {account(seat): generator.randint(0, 999) for seat in range(4)}
        seen.update(check_kong_income_and_splits(settle_and_post(table.events, funding)))
    assert seen["short_split"] > 0, seen
    assert seen["limited_kong_refund"] + seen["limited_call_transfer"] > 0, seen


SWEEP_GAMES = 60


def check_kong_income_and_splits(money: Money) -> Counter[str]:
    """RULES.md 1.9a.1 and 1.9 on every posted transfer of one game; counts what was exercised."""
    seen: Counter[str] = Counter()
    transfers = {transfer.order_key: transfer for transfer in money.transfers}
    for line in money.instructions:
        transfer = transfers[line.instruction_id]
        if line.income_instruction_ids:
            # What the payer received from the named instructions, as the ledger posted them.
            received = sum(
                transfers[income_id].delta_beans(line.payer_account)
                for income_id in line.income_instruction_ids
            )
            assert transfer.income_limit_beans == received
            assert transfer.posted_beans <= received
            if line.reason == "kong_refund":
                (payee,) = line.payees
                (income_id,) = line.income_instruction_ids
                # A refund returns at most what that payer paid for the kong.
                assert transfer.delta_beans(payee.account) <= -transfers[income_id].delta_beans(payee.account)
            if received < transfer.requested_beans:
                seen[f"limited_{line.reason}"] += 1
        if transfer.posted_beans < transfer.owed_beans:
            seen["short_split"] += 1
            assert [transfer.delta_beans(payee.account) for payee in line.payees] == expected_split(
                line, transfer
            )
    return seen


def expected_split(line: settlement_events_pb2.SettlementInstructed, transfer: Transfer) -> list[int]:
    """An independent statement of the shortfall split (RULES.md 1.9, 1.10) for the test."""
    available = transfer.posted_beans
    owed = [payee.beans for payee in line.payees]
    if transfer.income_limit_beans is not None:  # the owed amounts after 1.9a.1's limit
        owed = pro_rata(transfer.owed_beans, owed, first_payees(line))
    return pro_rata(available, owed, first_payees(line), escape=line.reason == "escape_penalty")


def first_payees(line: settlement_events_pb2.SettlementInstructed) -> list[int]:
    """Payee indexes in turn order after the payer (seats), house accounts last."""

    def order_key(index: int) -> tuple[int, int]:
        payee = line.payees[index]
        if payee.HasField("seat"):
            return (0, (payee.seat - line.payer_seat) % 4)
        return (1, index)

    return sorted(range(len(line.payees)), key=order_key)


def pro_rata(
    available: int, owed: Sequence[int], turn_order: Sequence[int], *, escape: bool = False
) -> list[int]:
    total = sum(owed)
    if available >= total:
        return list(owed)
    if escape:  # 1.10: the penalty (first line) scaled, the rest split, the remainder to the house
        penalty = available * owed[0] // total
        rest = pro_rata_floor(available - penalty, owed[1:])
        return [penalty + available - penalty - sum(rest), *rest]
    shares = pro_rata_floor(available, owed)
    remainder = available - sum(shares)
    for index in turn_order:  # the remainder to the first payee in turn order after the payer
        extra = min(remainder, owed[index] - shares[index])
        shares[index] += extra
        remainder -= extra
    return shares


def pro_rata_floor(available: int, owed: Sequence[int]) -> list[int]:
    total = sum(owed)
    return [available * beans // total if total else 0 for beans in owed]


def _funded(funding: dict[str, int]) -> Book:
    """The book after the starting deposits only."""
    book = Book()
    for order in funding_orders(funding):
        transfer = decide_deposit(book, order)
        assert transfer is not None
        book = evolve(book, transfer)
    return book
