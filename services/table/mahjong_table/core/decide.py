"""The steps of `decide` both families take the same way (RULES.md 1.1, 1.6, 1.10, 2.1, 2.3):
the opening dice and seats, the checks every command passes, leaving, drawing from the wall, the
end of the game with every hand revealed, and a meld's event form.

A family's `decide` (`mahjong_table.sichuan.decide`, `mahjong_table.formula.decide`) calls these
with its own `Emitter`; each step reads the state and emits events, which the emitter folds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from mahjong_rules.room_rules import RoomRules
from mahjong_rules.wall import dealer_from_dice

from mahjong_table.core.commands import ExpireDeadline, Leave, TableCommand
from mahjong_table.core.emitter import Emitter
from mahjong_table.core.errors import (
    GameOverError,
    IllegalKongError,
    InvalidCommandError,
    NotYourTurnError,
    PlayerNotInGameError,
    TileNotInHandError,
    WrongPhaseError,
)
from mahjong_table.core.events import (
    END_REASON_WALL_EXHAUSTED,
    EXPOSURE_ADDED,
    LEAVE_REASONS,
    NO_SEAT,
    GameEnded,
    KongDeclared,
    Meld,
    PlayerLeft,
    RevealedHand,
    SeatAssignment,
    TableEvent,
    TableOpened,
    TileDrawn,
    WallExhausted,
)
from mahjong_table.core.state import SEAT_COUNT, MeldState, Phase, TableShape
from mahjong_table.core.tiles import code_of, codes_of, codes_of_counts

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


class Dice(NamedTuple):
    """Who rolled the opening dice and what they show (RULES.md 1.1, both families): the dealer is
    counted from the roller by their sum."""

    roller_seat: int = 0
    die_1: int = 1
    die_2: int = 1

    @property
    def dealer_seat(self) -> int:
        return dealer_from_dice(self.roller_seat, self.die_1, self.die_2)


DEFAULT_DICE = Dice()
"""The dice of a table opened from an explicit wall when the caller names none (tests, scenarios)."""


def opening_dice(seed: int) -> tuple[random.Random, Dice]:
    """The generator seeded with `seed` for a table's opening, after it chose who rolls and the two
    dice (RULES.md 1.1; both families); the caller may draw more from it (Sichuan: the exchange
    direction)."""
    generator = random.Random(f"table-opening:{seed}")
    roller = generator.randrange(SEAT_COUNT)
    die_1, die_2 = generator.randint(1, 6), generator.randint(1, 6)
    return generator, Dice(roller, die_1, die_2)


def table_opened(
    table_id: str,
    room_id: str,
    rules: RoomRules,
    seats: tuple[SeatAssignment, ...],
    wall: Sequence[int],
    dice: Dice,
    *,
    exchange_direction: str = "",
    wildcard_indicator: int | None = None,
    wildcard: int | None = None,
) -> TableOpened:
    """A table's first event: its rules, seats, whole wall (head first) and dice, the dealer they
    give; a family adds its own (Sichuan: the exchange direction; Formula: the wildcard)."""
    return TableOpened(
        table_id=table_id,
        room_id=room_id,
        rules=rules,
        seats=seats,
        wall=codes_of(wall),
        dice_roller_seat=dice.roller_seat,
        die_1=dice.die_1,
        die_2=dice.die_2,
        dealer_seat=dice.dealer_seat,
        exchange_direction=exchange_direction,
        wildcard_indicator="" if wildcard_indicator is None else code_of(wildcard_indicator),
        wildcard="" if wildcard is None else code_of(wildcard),
    )


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


def require_discard(state: TableShape, seat: int, tile: int) -> None:
    """`seat` is on turn and holds `tile` (`TileNotInHandError`), the checks of every discard."""
    require_turn(state, seat, "discard")
    if not state.players[seat].concealed[tile]:
        raise TileNotInHandError(f"seat {seat} does not hold {code_of(tile)}")


def require_own_kong(state: TableShape, seat: int, tile: int | None) -> int:
    """`seat` is on turn and names the tile of a kong on its own turn (concealed or added, RULES.md
    1.5, 2.1): that tile; the family then checks the kong itself."""
    require_turn(state, seat, "declare a kong")
    if tile is None:
        raise IllegalKongError("on your own turn name the kong tile (concealed or added kong)")
    return tile


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


def declare_kong(
    emitter: Emitter[_State], seat: int, tile: int, exposure: str, from_seat: int = NO_SEAT
) -> None:
    """A kong checked by its family: an exposed kong (of `from_seat`'s discard) or a concealed
    kong draws its replacement from the tail now (RULES.md 1.5, 2.1); an added kong opens the rob
    window first (the family's evolve), and the family's `advance` draws the replacement once it
    closes."""
    emitter.emit(KongDeclared(seat, code_of(tile), exposure, from_seat))
    if exposure != EXPOSURE_ADDED:
        draw(emitter, seat, from_tail=True)


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
