"""From the table's event stream to settlement facts: scoring's own small fold of one game.

Scoring consumes the protobuf events of `mahjong.table.v1` and never imports the table engine, so
it keeps what settlement needs itself. One module per responsibility:

- `fold`: the entry, `apply_table_event(state, envelope)` → (new state, steps); the opening;
  which family folds the rest;
- `steps`: what a fold gives (`GameOpened`, `FactStep`, `InstructionsStep`, `GameOver`,
  `Notice`) and `GameFactsError`;
- `state`: `GameFactsState`, what scoring remembers of a game;
- `room_options`: a room's rules snapshot as settlement options (both families);
- `sichuan`: the Sichuan Bloody fold, one handler per event (kongs, claim windows, wins,
  escapes, checks); `sichuan_wins`: a win scored again; `hands`: the hand facts of the checks;
- `formula`: the Formula fold, one handler per event (win, bird, flowers, escape, end);
  `formula_wins`: a win scored again;
- `reading`: protobuf fields read into the rules library's values, checked.
"""

from mahjong_scoring.game_facts.fold import apply_table_event, apply_table_events, new_game_facts
from mahjong_scoring.game_facts.state import GameFactsState, evolve
from mahjong_scoring.game_facts.steps import (
    FactStep,
    FanLine,
    GameFactsError,
    GameOpened,
    GameOver,
    InstructionsStep,
    Notice,
    ScoredFans,
    Step,
)

__all__ = [
    "FactStep",
    "FanLine",
    "GameFactsError",
    "GameFactsState",
    "GameOpened",
    "GameOver",
    "InstructionsStep",
    "Notice",
    "ScoredFans",
    "Step",
    "apply_table_event",
    "apply_table_events",
    "evolve",
    "new_game_facts",
]
