"""A player never sees another's concealed tiles, the wall, others' exchange picks, others'
missing suits before the reveal, or who was asked about a discard (ARCHITECTURE.md "Identity and
hidden information"; issue 4 "Bad input and security")."""

from __future__ import annotations

import random

import pytest
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_rules.room_rules import RoomRules
from mahjong_table import codec
from mahjong_table.core.commands import Discard, ExpireDeadline, Pass, TableCommand, Win
from mahjong_table.core.events import (
    ClaimPassed,
    ExchangePicked,
    HandsDealt,
    KongDeclared,
    MissingSuitChosen,
    MissingSuitsDeclared,
    TableEvent,
    TableOpened,
    TileDrawn,
    TilesExchanged,
    TurnTimedOut,
)
from mahjong_table.core.views import redact
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.views import legal_actions as formula_legal_actions
from mahjong_table.selfplay import random_legal_command
from mahjong_table.servicer import redacted_envelope
from mahjong_table.sichuan.decide import open_table
from mahjong_table.sichuan.views import view_for
from mahjong_table.testing import FormulaTable, Table

SEATS = ("alice", "bob", "carol", "dave")


def random_game(seed: int) -> Table:
    generator = random.Random(seed)
    table = Table(open_table("table", "room", RoomRules(), SEATS, seed))
    while not table.state.is_over:
        table.act(random_legal_command(table.state, generator, timeout_chance=0.1))
    return table


def assert_hides_others_secrets(event: TableEvent, viewer: int | None) -> None:
    seen = redact(event, viewer)
    if isinstance(event, TableOpened):
        assert isinstance(seen, TableOpened) and seen.wall == () and seen.exchange_direction == ""
    elif isinstance(event, HandsDealt):
        assert isinstance(seen, HandsDealt)
        for hand in seen.hands:
            assert (hand.tiles != ()) == (hand.seat == viewer)
    elif isinstance(event, TileDrawn):
        assert isinstance(seen, TileDrawn) and (seen.tile != "") == (event.seat == viewer)
    elif isinstance(event, ExchangePicked):
        assert isinstance(seen, ExchangePicked) and (seen.tiles != ()) == (event.seat == viewer)
    elif isinstance(event, TilesExchanged):
        assert isinstance(seen, TilesExchanged)
        assert all(viewer in (transfer.from_seat, transfer.to_seat) for transfer in seen.transfers)
        assert len(seen.transfers) == (2 if viewer is not None else 0)
    elif isinstance(event, MissingSuitChosen):
        assert isinstance(seen, MissingSuitChosen) and (seen.suit != "") == (event.seat == viewer)
    elif isinstance(event, ClaimPassed) or (isinstance(event, TurnTimedOut) and event.phase == "claim"):
        assert (seen is not None) == (event.seat == viewer)
    elif isinstance(event, KongDeclared) and event.exposure == "concealed":
        assert isinstance(seen, KongDeclared) and (seen.tile != "") == (event.seat == viewer)
    else:
        assert seen == event  # public facts pass unchanged


@pytest.mark.parametrize("seed", range(6))
def test_no_redacted_event_carries_another_players_hidden_tiles(seed: int) -> None:
    table = random_game(seed)
    for event in table.events:
        for viewer in (0, 1, 2, 3, None):
            assert_hides_others_secrets(event, viewer)


def test_missing_suits_are_public_once_all_are_declared() -> None:
    table = random_game(3)
    declared = next(event for event in table.events if isinstance(event, MissingSuitsDeclared))
    assert redact(declared, 0) == declared


def test_a_view_shows_only_the_viewers_own_concealed_tiles_and_public_facts() -> None:
    generator = random.Random(11)
    table = Table(open_table("table", "room", RoomRules(), SEATS, 11))
    while not table.state.is_over:
        for seat in range(4):
            view = view_for(table.state, seat)
            player = table.state.players[seat]
            assert len(view.hand) == player.tile_count
            assert [other.concealed_tile_count for other in view.seats] == [
                p.tile_count for p in table.state.players
            ]
            if not table.state.missing_suits_public:
                assert all(other.missing_suit == "" for other in view.seats if other.seat != seat)
            for other in view.seats:
                if other.seat != seat:
                    assert all(meld.tile for meld in other.melds if meld.exposure != "concealed")
                    assert all(not meld.tile for meld in other.melds if meld.exposure == "concealed")
            if view.claimable_tile:
                assert seat in (table.state.window.pending if table.state.window else ())
            if table.state.phase.value == "exchange":
                assert view.exchange_direction == ""
        table.act(random_legal_command(table.state, generator))


@pytest.mark.parametrize("seed", range(6))
def test_the_servicers_shortcut_redacts_every_envelope_as_the_domain_does(seed: int) -> None:
    """`redacted_envelope` skips decoding for payloads outside REDACTED_PAYLOADS: for every event
    of random games (both families), for every seat, it must equal decode → redact → encode."""
    generator = random.Random(seed)
    games = [random_game(seed).events]
    formula = FormulaTable(open_formula_table("f", "r", RoomRules(variant="formula", min_fan=0), SEATS, seed))
    while not formula.state.is_over:
        formula.act(_formula_command(formula, generator))
    games.append(formula.events)
    for events in games:
        for sequence, event in enumerate(events, start=1):
            envelope = new_envelope(
                codec.to_message(event), clock=utc_now, stream_id="t", event_id=f"e{sequence}"
            )
            for seat in range(4):
                expected_event = redact(event, seat)
                shortcut = redacted_envelope(envelope, seat)
                if expected_event is None:
                    assert shortcut is None
                    continue
                assert shortcut is not None
                assert codec.event_of(shortcut) == expected_event


def _formula_command(table: FormulaTable, generator: random.Random) -> TableCommand:
    for seat in range(4):
        actions = {action.kind: action for action in formula_legal_actions(table.state, seat)}
        if "win" in actions:
            return Win(seat)
        if "discard" in actions:
            return Discard(seat, generator.choice(actions["discard"].tiles))
        if "pass" in actions:
            return Pass(seat)
    return ExpireDeadline()
