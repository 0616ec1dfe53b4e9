"""The Formula fold (RULES.md 2.3): one handler per table event that changes what Formula settles.

A win is scored again when it is declared (`formula_wins`) and paid once its bird is known
(`BirdRevealed` follows `PlayerWon`); an escape pays the escape penalty and compensations; the
end brings the rake (`GameOver`). A drawn hand pays nothing but the rake. Formula keeps no tiles:
the winning hand is in `PlayerWon`, and the flowers each seat set aside are counted from
`FlowerReplaced`. The instructions come out already in points (`InstructionsStep`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeAlias

from mahjong.v1 import envelope_pb2
from mahjong_rules.formula.fans import WinBy as FormulaWinBy
from mahjong_rules.formula.scoring import (
    FormulaOptions,
    FormulaWinFact,
    formula_escape_instruction,
    formula_win_instructions,
)

from mahjong_scoring.game_facts.formula_wins import score_formula_win
from mahjong_scoring.game_facts.reading import WIN_BYS, any_tile, check_seat, with_item
from mahjong_scoring.game_facts.state import FormulaPendingWin, GameFactsState, evolve
from mahjong_scoring.game_facts.steps import (
    GameFactsError,
    GameOver,
    InstructionsStep,
    Notice,
    ScoredFans,
    Step,
)

Handler: TypeAlias = Callable[
    [GameFactsState, FormulaOptions, envelope_pb2.Envelope, list[Step]], GameFactsState
]


def fold_formula_event(
    state: GameFactsState, envelope: envelope_pb2.Envelope, payload_name: str, steps: list[Step]
) -> GameFactsState:
    """One event of a Formula game after its opening: its handler, if it has one."""
    opened = state.opened
    assert opened is not None and opened.formula is not None
    handler = HANDLERS.get(payload_name)
    return state if handler is None else handler(state, opened.formula, envelope, steps)


def _player_won(
    state: GameFactsState, options: FormulaOptions, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    source, event = envelope.event_id, envelope.player_won
    check_seat(event.seat, "winner")
    win_by = FormulaWinBy(WIN_BYS[event.win_by].value) if event.win_by in WIN_BYS else None
    if win_by is None:
        raise GameFactsError(f"PlayerWon {source} does not say how it was won")
    assert state.opened is not None
    score = score_formula_win(
        event,
        win_by,
        options,
        wildcard=state.opened.wildcard,
        dealer_seat=state.dealer_seat,
        flowers=state.flowers[event.seat],
    )
    if score.notice:
        steps.append(Notice(source, score.notice))
    payer = None if win_by is FormulaWinBy.SELF_DRAW else event.from_seat
    fans = ScoredFans(score.total_fan, score.fans)
    pending = FormulaPendingWin(source, event.seat, win_by, payer, score.total_fan, fans)
    return evolve(state, formula_win=pending, won=state.won | {event.seat})


def _flower_replaced(
    state: GameFactsState, options: FormulaOptions, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    seat = envelope.flower_replaced.seat
    check_seat(seat, "flower holder")
    return evolve(state, flowers=with_item(state.flowers, seat, state.flowers[seat] + 1))


def _bird_revealed(
    state: GameFactsState, options: FormulaOptions, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    win = state.formula_win
    if win is None:
        raise GameFactsError(f"BirdRevealed {envelope.event_id} without a win before it")
    fact = FormulaWinFact(
        source=win.source,
        winner=win.winner,
        win_by=win.win_by,
        total_fan=win.total_fan,
        dealer=state.dealer_seat,
        bird=any_tile(envelope.bird_revealed.tile),
        payer=win.payer,
    )
    steps.append(InstructionsStep(formula_win_instructions(fact, options), ((win.winner, win.fans),)))
    return evolve(state, formula_win=None)


def _player_left(
    state: GameFactsState, options: FormulaOptions, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    seat = envelope.player_left.seat
    check_seat(seat, "escapee")
    escape = formula_escape_instruction(envelope.event_id, seat, options)
    if escape is not None and seat not in state.won:
        steps.append(InstructionsStep((escape,)))
    return evolve(state, left=state.left | {seat})


def _game_ended(
    state: GameFactsState, options: FormulaOptions, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    steps.append(GameOver(envelope.event_id, envelope.game_ended.reason))
    return evolve(state, over=True)


HANDLERS: Final[dict[str, Handler]] = {
    "player_won": _player_won,
    "flower_replaced": _flower_replaced,
    "bird_revealed": _bird_revealed,
    "player_left": _player_left,
    "game_ended": _game_ended,
}
"""The handler of each `Envelope` payload (by its oneof name) that changes what Formula settles;
every other event of a formula game (draws, discards, melds, passes, timeouts) settles nothing."""
