"""The feeds' memos (issue 10) answer what the domain answers from scratch: a view's seats found
on the players' memos are the seats built for fresh players (a missing suit or a concealed kong's
tile is never shown to a seat it is hidden from because a memo of another viewer was found), the
kept legal actions are the ones of the state and seat asked, and the state cache drops the table
least recently committed or loaded, whatever the feeds read."""

from __future__ import annotations

import dataclasses
import random

import pytest
from mahjong_rules.room_rules import RoomRules
from mahjong_table.formula import views as formula_views
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.selfplay import formula_greedy_command, random_legal_command
from mahjong_table.sichuan import views
from mahjong_table.sichuan.decide import open_table
from mahjong_table.sichuan.state import TableState
from mahjong_table.tables import StateCache
from mahjong_table.testing import FormulaTable, Table

SEATS = ("alice", "bob", "carol", "dave")


def _fresh(state: TableState) -> TableState:
    """The same facts with players whose memos are empty."""
    return dataclasses.replace(state, players=tuple(dataclasses.replace(player) for player in state.players))


def _states(seed: int) -> list[TableState]:
    generator = random.Random(seed)
    table = Table(open_table(f"memo-{seed}", "room", RoomRules(), SEATS, seed))
    states = [table.state]
    while not table.state.is_over:
        table.act(random_legal_command(table.state, generator, timeout_chance=0.05))
        states.append(table.state)
    return states


@pytest.mark.parametrize("seed", range(8))
def test_a_views_seats_from_the_memos_are_the_seats_built_from_scratch(seed: int) -> None:
    generator = random.Random(seed)
    for state in _states(seed):
        viewers = [0, 1, 2, 3]
        generator.shuffle(viewers)  # whichever viewer fills a player's memo first
        for viewer in viewers:
            seats = views.view_for(state, viewer).seats
            expected = tuple(views._seat_view(_fresh(state), seat, viewer) for seat in range(4))
            assert seats == expected, (state.version, viewer)


@pytest.mark.parametrize("seed", range(3))
def test_a_formula_views_seats_from_the_memos_are_the_seats_built_from_scratch(seed: int) -> None:
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
    table = FormulaTable(open_formula_table(f"memo-f-{seed}", "room", rules, SEATS, seed))
    generator = random.Random(seed)
    while True:
        state = table.state
        viewers = [0, 1, 2, 3]
        generator.shuffle(viewers)
        for viewer in viewers:
            fresh = dataclasses.replace(state, players=tuple(dataclasses.replace(p) for p in state.players))
            expected = tuple(formula_views._seat_view(fresh, seat, viewer) for seat in range(4))
            assert formula_views.view_for(state, viewer).seats == expected, (state.version, viewer)
        if state.is_over:
            break
        table.act(formula_greedy_command(state))


def test_the_seeds_cover_a_hidden_missing_suit_and_a_concealed_kong() -> None:
    """The games above show a seat a missing suit chosen but hidden from it, and a concealed kong
    (face down to the other seats)."""
    states = [state for seed in range(8) for state in _states(seed)]
    assert any(
        seat.missing_suit_chosen and not seat.missing_suit
        for state in states
        for seat in views.view_for(state, 0).seats
    )
    assert any(meld.exposure == "concealed" for state in states for p in state.players for meld in p.melds)


def test_the_kept_legal_actions_are_those_of_the_state_and_seat_asked() -> None:
    states = _states(3)
    generator = random.Random(3)
    for _ in range(2_000):
        state = generator.choice(states)
        seat = generator.randrange(4)
        assert views.legal_actions(state, seat) == views._legal_actions(_fresh(state), seat)


def test_the_kept_formula_legal_actions_are_those_of_the_state_and_seat_asked() -> None:
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
    table = FormulaTable(open_formula_table("memo-f", "room", rules, SEATS, 5))
    states = [table.state]
    while not table.state.is_over:
        table.act(formula_greedy_command(table.state))
        states.append(table.state)
    generator = random.Random(5)
    for _ in range(1_000):
        state = generator.choice(states)
        seat = generator.randrange(4)
        fresh = dataclasses.replace(
            state, players=tuple(dataclasses.replace(player) for player in state.players)
        )
        assert formula_views.legal_actions(state, seat) == formula_views._legal_actions(fresh, seat)


def test_the_state_cache_drops_the_table_least_recently_put_whatever_was_read() -> None:
    states = {table_id: _states(0)[-1] for table_id in ("a", "b", "c")}
    cache = StateCache(capacity=2)
    cache.put(dataclasses.replace(states["a"], table_id="a"))
    cache.put(dataclasses.replace(states["b"], table_id="b"))
    for _ in range(3):
        assert cache.get("a") is not None  # a feed reading its table does not keep it
    cache.put(dataclasses.replace(states["c"], table_id="c"))
    assert cache.get("a") is None
    assert cache.get("b") is not None and cache.get("c") is not None
