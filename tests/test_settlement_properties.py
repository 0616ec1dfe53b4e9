"""Properties of the money pipeline over random complete games (issue 5, Tests).

hypothesis draws a wall seed, room options (N, rake, cap, the `add_one` self-draw option, exchange
three) and starting balances (zero and tiny ones included); `mahjong_table.selfplay`'s random
player plays the game to its end through the real aggregate (with leaves and deadline expiries);
the events go through the codec, scoring's pure settlement and the ledger `Book`. Whatever
happens, money is neither created nor destroyed and no player ever owes beans.

Deterministic: hypothesis runs derandomized, and every game is a function of the drawn values.
"""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mahjong_ledger.domain import WORLD_ACCOUNT, Book, decide_deposit, evolve, is_player_account
from mahjong_table.domain.decide import open_table
from mahjong_table.domain.room_rules import RoomRules
from mahjong_table.selfplay import random_legal_command
from mahjong_table.testing import Table

from .money_pipeline import HOUSE_ACCOUNTS, account, funding_orders, settle_and_post

COMMANDS_PER_GAME_LIMIT = 3_000
SEAT_NAMES = ("p0", "p1", "p2", "p3")

balances_beans = st.one_of(
    st.just(0), st.integers(1, 50), st.integers(51, 5_000), st.integers(5_001, 2_000_000)
)


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
    rules=room_rules(),
    starting_beans=st.tuples(balances_beans, balances_beans, balances_beans, balances_beans),
)
def test_every_game_moves_money_without_creating_it_and_no_player_goes_negative(
    seed: int, rules: RoomRules, starting_beans: tuple[int, int, int, int]
) -> None:
    table = play_random_game(seed, rules)
    funding = {account(seat): beans for seat, beans in enumerate(starting_beans)}
    money = settle_and_post(table.events, funding)

    # Replay the game's transfers one by one: no player balance is ever negative in between.
    book = _funded(funding)
    for transfer in money.transfers:
        assert sum(posting.beans for posting in transfer.postings) == 0
        assert transfer.posted_beans == min(transfer.requested_beans, book.balance(transfer.payer_account))
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


def _funded(funding: dict[str, int]) -> Book:
    """The book after the starting deposits only."""
    book = Book()
    for order in funding_orders(funding):
        transfer = decide_deposit(book, order)
        assert transfer is not None
        book = evolve(book, transfer)
    return book
