"""Scoring settles formula (公式) hands (RULES.md 2.3): seeded games of the formula table
aggregate, as protobuf envelopes, through `settle_table_events`: the win is paid by
`mahjong_rules.formula.scoring` after its bird, escapes pay penalty and compensation, everyone pays
the rake, and every game's lines sum to zero."""

from __future__ import annotations

import random
import uuid

import pytest
from mahjong.v1 import envelope_pb2
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_rules.formula.fans import WinBy
from mahjong_rules.formula.scoring import FanTerm, FormulaOptions, FormulaWinFact, formula_win_instructions
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tile
from mahjong_scoring.game_settlement import new_game_settlement, settle_table_events
from mahjong_table import codec
from mahjong_table.core.commands import Leave, Pass, Pong, TableCommand, Win
from mahjong_table.core.events import BirdRevealed, PlayerWon, TableEvent
from mahjong_table.formula.decide import execute, open_formula_table
from mahjong_table.formula.evolve import fold
from mahjong_table.formula.views import legal_actions

N, A = 200, 20


def play(seed: int, rules: RoomRules, leave_at: int | None = None) -> list[TableEvent]:
    events = open_formula_table(f"table-{seed}", "formula-fan", rules, ["a", "b", "c", "d"], seed)
    state = fold(events)
    generator = random.Random(seed)
    steps = 0
    while not state.is_over:
        steps += 1
        command: TableCommand | None = Leave(2) if steps == leave_at else None
        for seat in range(4):
            if command is not None:
                break
            actions = {a.kind: a for a in legal_actions(state, seat)}
            if "win" in actions:
                command = Win(seat)
            elif "pong" in actions and generator.random() < 0.5:
                command = Pong(seat)
            elif "discard" in actions:
                from mahjong_table.core.commands import Discard

                command = Discard(seat, generator.choice(actions["discard"].tiles))
            elif "pass" in actions:
                command = Pass(seat)
        assert command is not None
        new, state = execute(state, command)
        events.extend(new)
    return events


def envelopes_of(table_id: str, events: list[TableEvent]) -> list[envelope_pb2.Envelope]:
    result = []
    for sequence, event in enumerate(events, start=1):
        envelope = new_envelope(
            codec.to_message(event), clock=utc_now, stream_id=table_id, event_id=str(uuid.uuid4())
        )
        envelope.sequence = sequence
        result.append(envelope)
    return result


def rules(fan_term: str = "fan_plus_8") -> RoomRules:
    return RoomRules(
        variant="formula", exchange_three=False, coefficient=N, rake_beans=A, min_fan=0, fan_term=fan_term
    )


@pytest.mark.parametrize("seed", range(12))
def test_a_formula_hand_settles_to_zero_with_the_win_paid_after_its_bird(seed: int) -> None:
    events = play(seed, rules(("fan", "fan_plus_8", "flat_10")[seed % 3]))
    table_id = f"table-{seed}"
    _state, output = settle_table_events(new_game_settlement(), envelopes_of(table_id, events))
    # Scoring evaluates the win again from the event and the public stream (wildcard, flowers,
    # seat wind, 和绝张): it agrees with the table, so no notice.
    assert output.notices == ()
    lines = output.instructions
    settled = [e.game_settled for e in output.envelopes if e.HasField("game_settled")]
    assert len(settled) == 1
    totals = settled[0].players
    house = sum(p.beans for line in lines for p in line.payees if p.account.startswith("house:"))
    assert sum(player.beans - player.rake_beans for player in totals) + house == 0
    assert sum(player.rake_beans for player in totals) == 4 * A
    wins = [e for e in events if isinstance(e, PlayerWon)]
    win_lines = [line for line in lines if line.reason == "win"]
    if not wins:
        assert not win_lines  # RULES.md 2.1: a drawn hand pays nothing but the rake
        return
    win = wins[0]
    bird = next(e for e in events if isinstance(e, BirdRevealed))
    options = FormulaOptions(
        coefficient=N,
        rake_beans=A,
        fan_term=FanTerm(rules(("fan", "fan_plus_8", "flat_10")[seed % 3]).fan_term),
        min_fan=0,
    )
    expected = formula_win_instructions(
        FormulaWinFact(
            source="x",
            winner=win.seat,
            win_by=WinBy(win.win_by),
            total_fan=win.fan_total,
            dealer=fold(events[:1]).dealer_seat,
            bird=parse_tile(bird.tile),
            payer=None if win.win_by == "self_draw" else win.from_seat,
        ),
        options,
    )
    assert [line.payees[0].beans for line in win_lines] == [i.payments[0].points * N for i in expected]
    assert totals[win.seat].beans == sum(i.payments[0].points * N for i in expected)
    for line in win_lines:  # each fan with its count (幺九刻 ×2 is 2 fan), adding up to the total
        assert sum(fan.multiplier * fan.count for fan in line.fans) == win.fan_total


def test_scoring_pays_its_own_reading_of_the_hand_and_says_when_the_table_differs() -> None:
    seed = next(s for s in range(40) if any(isinstance(e, PlayerWon) for e in play(s, rules("fan"))))
    events = play(seed, rules("fan"))
    envelopes = envelopes_of(f"table-{seed}", events)
    won = next(e for e in envelopes if e.HasField("player_won"))
    true_total = won.player_won.fan_total
    won.player_won.fan_total = true_total + 50  # a table bug: more fan than the hand has
    _state, output = settle_table_events(new_game_settlement(), envelopes)
    assert [notice.message for notice in output.notices] == [
        f"the table scored {true_total + 50} fan, the rules library {true_total}"
    ]
    win_line = next(line for line in output.instructions if line.reason == "win")
    assert sum(fan.multiplier * fan.count for fan in win_line.fans) == true_total


def test_an_escape_ends_the_hand_and_pays_penalty_and_compensation_rules_2_3() -> None:
    events = play(3, rules(), leave_at=2)
    _state, output = settle_table_events(new_game_settlement(), envelopes_of("table-3", events))
    escape = [line for line in output.instructions if line.reason == "escape_penalty"]
    assert len(escape) == 1 and escape[0].payer_account == "player:c"
    assert [p.beans for p in escape[0].payees] == [16 * N, 8 * N, 8 * N, 8 * N]
