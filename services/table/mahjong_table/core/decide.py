"""The steps of `decide` both families take the same way (RULES.md 1.1, 1.6, 1.10, 2.1, 2.3):
the opening dice and seats, the checks every command passes, leaving, drawing from the wall, the
end of the game with every hand revealed, and a meld's event form.

A family's `decide` (`mahjong_table.sichuan.decide`, `mahjong_table.formula.decide`) calls these
with its own `Emitter`; each step reads the state and emits events, which the emitter folds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from mahjong_table.core.commands import ExpireDeadline, Leave, TableCommand
from mahjong_table.core.emitter import Emitter
from mahjong_table.core.errors import (
    GameOverError,
    InvalidCommandError,
    NotYourTurnError,
    PlayerNotInGameError,
    WrongPhaseError,
)
from mahjong_table.core.events import (
    END_REASON_WALL_EXHAUSTED,
    EXPOSURE_ADDED,
    LEAVE_REASONS,
    NO_SEAT,
    GameEnded,
    Meld,
    PlayerLeft,
    RevealedHand,
    SeatAssignment,
    TableEvent,
    TileDrawn,
    WallExhausted,
)
from mahjong_table.core.state import SEAT_COUNT, MeldState, Phase, TableShape
from mahjong_table.core.tiles import code_of, codes_of_counts

_State = TypeVar("_State", bound=TableShape)


# ------------------------------------------------------------------------------------ decide


def execute(
    state: _State,
    command: TableCommand,
    *,
    evolve: Callable[[_State, TableEvent], _State],
    act: Callable[[Emitter[_State], TableCommand], None],
    expire: Callable[[Emitter[_State]], None],
    advance: Callable[[Emitter[_State]], None],
) -> tuple[list[TableEvent], _State]:
    """A command's events and the state after them, folded once: the family's `act` (a seat's
    command), `expire` (`ExpireDeadline`) or the kernel's `leave`, then the family's `advance` (play
    on until the table waits for a player again). Equal to `(events, fold(events, state))`."""
    emitter = Emitter(state, evolve)
    if isinstance(command, ExpireDeadline):
        expire(emitter)
    elif isinstance(command, Leave):
        leave(emitter, command)
    else:
        act(emitter, command)
    advance(emitter)
    return emitter.events, emitter.state


# ----------------------------------------------------------------------------------- opening


def opening_dice(seed: int) -> tuple[random.Random, int, int, int]:
    """The generator seeded with `seed` for a table's opening, after it chose who rolls and the two
    dice (RULES.md 1.1; both families); the caller may draw more from it (Sichuan: the exchange
    direction)."""
    generator = random.Random(f"table-opening:{seed}")
    roller = generator.randrange(SEAT_COUNT)
    die_1, die_2 = generator.randint(1, 6), generator.randint(1, 6)
    return generator, roller, die_1, die_2


def seat_assignments(seats: Sequence[str | SeatAssignment]) -> tuple[SeatAssignment, ...]:
    """The four seats of a new table (a player id stands for its seat in order)."""
    if len(seats) != SEAT_COUNT:
        raise InvalidCommandError(f"a table needs {SEAT_COUNT} seats, got {len(seats)}")
    return tuple(
        seat if isinstance(seat, SeatAssignment) else SeatAssignment(index, seat)
        for index, seat in enumerate(seats)
    )


# ------------------------------------------------------------------------------------ checks


def check_seat(seat: object) -> int:
    """The seat a command names; `InvalidCommandError` unless it is an int 0..3 (not a bool)."""
    if not isinstance(seat, int) or isinstance(seat, bool) or not 0 <= seat < SEAT_COUNT:
        raise InvalidCommandError(f"seat must be 0..{SEAT_COUNT - 1}, got {seat!r}")
    return seat


def require_not_over(state: TableShape) -> None:
    """`GameOverError` once the game has ended: no command is accepted."""
    if state.is_over:
        raise GameOverError(f"the game at table {state.table_id} has ended ({state.end_reason})")


def require_in_game(state: TableShape, seat: int) -> None:
    """`PlayerNotInGameError` for a seat that left or won (RULES.md 1.6, 1.10, 2.3)."""
    require_not_over(state)
    player = state.players[seat]
    if player.left:
        raise PlayerNotInGameError(f"seat {seat} left the table and takes no further part")
    if player.won:
        raise PlayerNotInGameError(f"seat {seat} has already won and takes no further turns (RULES.md 1.6)")


def require_turn(state: TableShape, seat: int, action: str) -> None:
    """`seat` is on turn (`WrongPhaseError` in a claim window or another phase, else
    `NotYourTurnError`)."""
    if state.phase is Phase.CLAIM and state.window is not None:
        raise WrongPhaseError(f"cannot {action} now: a claim window on {code_of(state.window.tile)} is open")
    if state.phase is not Phase.TURN:
        raise WrongPhaseError(
            f"cannot {action} now: the game is in phase {state.phase.value!r}, not {Phase.TURN.value!r}"
        )
    if state.turn_seat != seat:
        raise NotYourTurnError(f"it is seat {state.turn_seat}'s turn, not seat {seat}'s")


# ------------------------------------------------------------------------------ leave, draw, end


def leave(emitter: Emitter[_State], command: Leave) -> None:
    """RULES.md 1.10, 2.3: the escapee takes no further part (what follows is the family's:
    Sichuan plays on, a Formula hand ends)."""
    check_seat(command.seat)
    if command.reason not in LEAVE_REASONS:
        raise InvalidCommandError(f"leave reason must be one of {LEAVE_REASONS}, got {command.reason!r}")
    state = emitter.state
    require_not_over(state)
    player = state.players[command.seat]
    if player.left:
        raise PlayerNotInGameError(f"seat {command.seat} already left the table")
    emitter.emit(PlayerLeft(command.seat, command.reason, had_won=player.won))


def draw(emitter: Emitter[_State], seat: int, *, from_tail: bool) -> None:
    """Draw for `seat` from the head (normal) or the tail (kong and flower replacements, RULES.md
    1.1, 1.5, 2.1). On an empty wall the game ends instead (RULES.md 1.6; a Formula hand is drawn)."""
    state = emitter.state
    if state.wall_remaining == 0:
        emitter.emit(WallExhausted())
        end(emitter, END_REASON_WALL_EXHAUSTED)
        return
    tile = state.wall[state.wall_tail - 1] if from_tail else state.wall[state.wall_head]
    emitter.emit(TileDrawn(seat, code_of(tile), from_tail, state.wall_remaining - 1))


def end(emitter: Emitter[_State], reason: str) -> None:
    """The game is over: every seat's hand revealed (`GameEnded`)."""
    hands = tuple(
        RevealedHand(
            seat,
            codes_of_counts(player.concealed),
            tuple(meld_event(meld) for meld in player.melds),
            player.won,
            player.left,
        )
        for seat, player in enumerate(emitter.state.players)
    )
    emitter.emit(GameEnded(reason, hands))


def meld_event(meld: MeldState) -> Meld:
    """The event form of a meld (proto `Meld`): `from_seat` is -1 for concealed and added kongs, as
    the proto says (the state keeps an added kong's pong source so a robbed kong can revert); a
    chow's tile is the lowest of its run."""
    from_seat = NO_SEAT if meld.exposure == EXPOSURE_ADDED else meld.from_seat
    return Meld(meld.kind, code_of(meld.tile), meld.exposure, from_seat)
