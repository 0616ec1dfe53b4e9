"""Random legal games to the end (issue 4 "Tests"): a hypothesis state machine and a seeded
random-play property. Every step is a random legal command of a waited-on seat, with deadline
expiries and leaves mixed in. Invariants: the 108 tiles are always accounted for, folding the
events from scratch gives the same state, at most three players win, the table always waits on
someone until the game ends, and the game ends."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from mahjong_rules.room_rules import RoomRules
from mahjong_table.core.events import GameEnded, PlayerWon
from mahjong_table.selfplay import random_legal_command
from mahjong_table.sichuan.decide import decide, open_table, waited_on
from mahjong_table.sichuan.evolve import fold
from mahjong_table.testing import Table, tiles_accounted

SEATS = ("alice", "bob", "carol", "dave")
COMMANDS_PER_GAME_LIMIT = 3_000
"""A game has at most 55 draws; each draw causes a handful of commands. Far above any real game."""


def check_invariants(table: Table) -> None:
    state = table.state
    assert tiles_accounted(state) == 108
    assert state.win_count == sum(player.won for player in state.players) <= 3
    assert state.version == len(table.events)
    if not state.is_over:
        assert waited_on(state), "the table waits on nobody but the game is not over"
        assert all(state.players[seat].in_game for seat in waited_on(state)), "waits on an absent seat"
    wins = [event for event in table.events if isinstance(event, PlayerWon)]
    assert [event.win_order for event in wins] == list(range(1, len(wins) + 1))


def play_to_end(
    table: Table, generator: random.Random, *, leave_chance: float, greedy_chance: float = 0.0
) -> None:
    for _ in range(COMMANDS_PER_GAME_LIMIT):
        if table.state.is_over:
            return
        before = table.state
        command = random_legal_command(
            table.state, generator, leave_chance=leave_chance, greedy_chance=greedy_chance
        )
        table.act(command)
        assert before.version < table.state.version, f"{command} changed nothing"
        check_invariants(table)
    raise AssertionError("the game did not end")


@pytest.mark.parametrize("seed", range(30))
def test_random_legal_games_end_with_tiles_conserved_and_replay_equal_to_live(seed: int) -> None:
    generator = random.Random(seed)
    rules = RoomRules(exchange_three=seed % 3 != 0, skip_win_lock=seed % 2 == 0)
    table = Table(open_table(f"table-{seed}", "room", rules, SEATS, seed))
    check_invariants(table)
    play_to_end(
        table,
        generator,
        leave_chance=0.004 if seed % 4 == 0 else 0.0,
        greedy_chance=(0.0, 0.8, 0.97)[seed % 3],  # greedy moves make wins (and three-win ends) common
    )
    assert isinstance(table.events[-1], GameEnded)
    assert fold(table.events) == table.state


class RandomGame(RuleBasedStateMachine):
    """Hypothesis drives the choices (and shrinks a failing game to a short one)."""

    table: Table

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        exchange_three=st.booleans(),
        skip_win_lock=st.booleans(),
    )
    def open(self, seed: int, exchange_three: bool, skip_win_lock: bool) -> None:
        rules = RoomRules(exchange_three=exchange_three, skip_win_lock=skip_win_lock)
        self.table = Table(open_table("table", "room", rules, SEATS, seed))

    @precondition(lambda self: not self.table.state.is_over)
    @rule(
        choice=st.integers(0, 2**32 - 1),
        timeout_percent=st.sampled_from((0, 5, 30)),
        greedy_percent=st.sampled_from((0, 90)),
    )
    def act(self, choice: int, timeout_percent: int, greedy_percent: int) -> None:
        command = random_legal_command(
            self.table.state,
            random.Random(choice),
            timeout_chance=timeout_percent / 100,
            leave_chance=0.004,
            greedy_chance=greedy_percent / 100,
        )
        self.table.act(command)

    @precondition(lambda self: self.table.state.is_over)
    @rule(seed=st.integers(0, 2**32 - 1))
    def open_the_next_game(self, seed: int) -> None:
        assert fold(self.table.events) == self.table.state
        self.table = Table(open_table("table", "room", RoomRules(), SEATS, seed))

    @invariant()
    def tiles_are_conserved_and_the_table_waits_on_someone(self) -> None:
        check_invariants(self.table)

    def teardown(self) -> None:
        if not hasattr(self, "table"):
            return
        play_to_end(self.table, random.Random(len(self.table.events)), leave_chance=0.0, greedy_chance=0.9)
        assert fold(self.table.events) == self.table.state


RandomGame.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_random_game_state_machine = RandomGame.TestCase


def test_decide_never_changes_the_state_it_is_given() -> None:
    generator = random.Random(7)
    table = Table(open_table("table", "room", RoomRules(), SEATS, 7))
    while not table.state.is_over:
        state = table.state
        snapshot = fold(table.events)
        decide(state, random_legal_command(state, generator))
        assert state == snapshot
        table.act(random_legal_command(state, generator))


def test_the_seeded_games_reach_every_ending() -> None:
    """Guard against a property that silently stops exercising the win paths."""
    reasons = set()
    for seed in range(30):
        generator = random.Random(seed)
        table = Table(open_table("table", "room", RoomRules(), SEATS, seed))
        play_to_end(table, generator, leave_chance=0.01 if seed % 2 else 0.0, greedy_chance=0.97)
        reasons.add(table.state.end_reason)
    assert reasons == {"three_wins", "wall_exhausted", "escapes"}
