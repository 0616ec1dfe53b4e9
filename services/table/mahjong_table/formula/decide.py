"""`decide(state, command) -> events` and `open_formula_table(...)` for the formula family
(RULES.md 2.1-2.3), on the kernel's steps (`mahjong_table.core.decide`: the checks, leaving,
drawing, the end). Pure: the state is only read; every event is folded as it is emitted so the
follow-up steps (补花, the next draw, the bird, the end) are decided on the state a replay sees.
"""

from __future__ import annotations

from collections.abc import Sequence

from mahjong_rules.formula.fans import WinBy
from mahjong_rules.formula.scoring import bird_seat
from mahjong_rules.formula.wall import (
    FORMULA_TILES,
    is_flower,
    open_formula_hand,
    shuffled_formula_wall,
)
from mahjong_rules.formula.wildcards import FormulaEvaluation
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tile
from mahjong_rules.wall import deal

from mahjong_table.core import decide as kernel
from mahjong_table.core.commands import (
    Chow,
    Discard,
    Kong,
    Pass,
    Pong,
    TableCommand,
    Win,
)
from mahjong_table.core.emitter import Emitter
from mahjong_table.core.errors import (
    IllegalClaimError,
    IllegalKongError,
    IllegalWinError,
    InvalidCommandError,
    NotYourTurnError,
    WrongPhaseError,
)
from mahjong_table.core.events import (
    END_REASON_ESCAPES,
    EXPOSURE_EXPOSED,
    NO_SEAT,
    TIMEOUT_PHASE_CLAIM,
    TIMEOUT_PHASE_TURN,
    WIN_BY_DISCARD,
    WIN_BY_ROB_KONG,
    WIN_BY_SELF_DRAW,
    BirdRevealed,
    ChowClaimed,
    ClaimPassed,
    DealtHand,
    Fan,
    FlowerReplaced,
    HandsDealt,
    KongRobbed,
    PlayerWon,
    PongClaimed,
    SeatAssignment,
    TableEvent,
    TileDiscarded,
    TurnTimedOut,
)
from mahjong_table.core.state import SEAT_COUNT, Phase
from mahjong_table.core.tiles import code_of, command_tile
from mahjong_table.formula import hands
from mahjong_table.formula.evolve import evolve
from mahjong_table.formula.state import (
    ASK_CHOW,
    ASK_KONG,
    ASK_PONG,
    ASK_WIN,
    Ask,
    FormulaTableState,
    FormulaWindow,
)

END_REASON_WIN = "win"
"""A formula hand ends at its first win (RULES.md 2.1)."""


# ----------------------------------------------------------------------------------- opening


def open_formula_table(
    table_id: str, room_id: str, rules: RoomRules, seats: Sequence[str | SeatAssignment], seed: int
) -> list[TableEvent]:
    """Open a formula hand: the 144-tile wall from `seed`, dice and dealer from a generator seeded
    with `seed` (as Sichuan, RULES.md 1.1), then the deal and 补花 (`open_formula_table_with_wall`)"""
    _generator, dice = kernel.opening_dice(seed)
    return open_formula_table_with_wall(
        table_id, room_id, rules, seats, shuffled_formula_wall(seed), dice=dice
    )


def open_formula_table_with_wall(
    table_id: str,
    room_id: str,
    rules: RoomRules,
    seats: Sequence[str | SeatAssignment],
    wall: Sequence[int | str],
    *,
    dice: kernel.Dice = kernel.DEFAULT_DICE,
) -> list[TableEvent]:
    """Open from an explicit 144-tile wall (head first): `TableOpened`, `HandsDealt` (the raw
    14/13 deal, flowers included), then the 补花 of the initial hands, dealer first, from the tail
    (`FlowerReplaced` + `TileDrawn`, RULES.md 2.1). The indicator is the first non-flower head tile
    after the deal; it and the flowers turned before it leave the wall."""
    assignments = kernel.seat_assignments(seats)
    tiles = tuple(tile if isinstance(tile, int) else parse_tile(tile) for tile in wall)
    if sorted(tiles) != list(FORMULA_TILES):
        raise InvalidCommandError("a formula wall must hold the 144 tiles: 4 of each of 34, 8 flowers")
    dealt = deal(tiles, dice.dealer_seat)
    opening = open_formula_hand(dealt, dice.dealer_seat)  # the indicator (RULES.md 2.1): flips past flowers
    head = dealt.wall.head_drawn + len(opening.turned_flowers) + 1
    opened = kernel.table_opened(
        table_id,
        room_id,
        rules,
        assignments,
        tiles,
        dice,
        wildcard_indicator=opening.indicator,
        wildcard=opening.wildcard,
    )
    dealt_event = HandsDealt(
        hands=tuple(
            DealtHand(seat, tuple(code_of(t) for t in hand)) for seat, hand in enumerate(dealt.hands)
        ),
        wall_remaining=len(tiles) - head,
    )
    emitter = _Emitter(evolve(evolve(None, opened), dealt_event), evolve)
    emitter.events = [opened, dealt_event]
    _advance(emitter)
    return emitter.events


# ------------------------------------------------------------------------------------ decide


_Emitter = Emitter[FormulaTableState]


def decide(state: FormulaTableState, command: TableCommand) -> list[TableEvent]:
    """The events `command` causes now, or a `TableRuleError` (and nothing changes)."""
    return execute(state, command)[0]


def execute(state: FormulaTableState, command: TableCommand) -> tuple[list[TableEvent], FormulaTableState]:
    """`decide` plus the state after its events, folded once (the caller need not fold them again).

    Equal to `(events, fold(events, state))`; the service uses it on its hot path.
    """
    kernel.require_not_over(state)
    return kernel.execute(state, command, evolve=evolve, act=_act, expire=_expire, advance=_advance)


def _act(emitter: _Emitter, command: TableCommand) -> None:
    seat = kernel.check_seat(getattr(command, "seat", NO_SEAT))
    kernel.require_in_game(emitter.state, seat)
    if isinstance(command, Discard):
        _discard(emitter, seat, _parse(command.tile), automatic=False)
    elif isinstance(command, Win):
        _win(emitter, seat)
    elif isinstance(command, Pong):
        _pong(emitter, seat)
    elif isinstance(command, Chow):
        _chow(emitter, seat, _parse(command.tile))
    elif isinstance(command, Kong):
        _kong(emitter, seat, None if command.tile is None else _parse(command.tile))
    elif isinstance(command, Pass):
        _pass(emitter, seat)
    else:
        raise WrongPhaseError(
            f"{type(command).__name__} is not played in formula rooms (no exchange three, no missing suit)"
        )


def _parse(code: object) -> int:
    tile = command_tile(code, parse_tile)
    if is_flower(tile):
        raise InvalidCommandError(f"{code} is a flower: flowers are set aside, never played (RULES.md 2.1)")
    return tile


# -------------------------------------------------------------------------------------- turn


def _discard(emitter: _Emitter, seat: int, tile: int, *, automatic: bool) -> None:
    kernel.require_discard(emitter.state, seat, tile)
    emitter.emit(TileDiscarded(seat, code_of(tile), automatic=automatic))


def _kong(emitter: _Emitter, seat: int, tile: int | None) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM:
        window, _ask = _require_asked(state, seat, ASK_KONG, IllegalKongError)
        if tile not in (None, window.tile):
            raise IllegalKongError(f"only the open discard {code_of(window.tile)} can be konged now")
        kernel.declare_kong(emitter, seat, window.tile, EXPOSURE_EXPOSED, window.from_seat)
        return
    tile = kernel.require_own_kong(state, seat, tile)
    exposure = dict(hands.kong_options(state, seat)).get(tile)
    if exposure is None:
        raise IllegalKongError(
            f"no kong of {code_of(tile)}: hold four (or one with your pong), not the wildcard "
            "(RULES.md 2.1), with a tile left in the wall, and not right after a pong or chow"
        )
    kernel.declare_kong(emitter, seat, tile, exposure)


def _win(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM:
        window, _ask = _require_asked(state, seat, ASK_WIN, IllegalWinError)
        concealed = state.players[seat].concealed_tiles()
        if window.rob_kong:
            # 抢杠和 (RULES.md 2.2): the kong is void, then the robber wins on its tile.
            evaluation = hands.rob_kong_win(state, seat, window.tile)
            assert evaluation is not None, "a rob ask without a win"
            emitter.emit(KongRobbed(window.from_seat, code_of(window.tile), (seat,)))
            win_by = WIN_BY_ROB_KONG
        else:
            evaluation = hands.discard_win(state, seat, window.tile)
            assert evaluation is not None, "a win ask without a win"
            win_by = WIN_BY_DISCARD
        emitter.emit(_player_won(state, seat, window.tile, win_by, window.from_seat, concealed, evaluation))
        return
    kernel.require_turn(state, seat, "win")
    found = hands.self_draw_win(state, seat)
    if found is None:
        raise IllegalWinError(
            f"no self-draw win for seat {seat}: not a winning hand, below the room's {state.rules.min_fan} "
            "fan minimum (flowers excluded, RULES.md 2.1), or right after a pong or chow"
        )
    evaluation, win_tile = found
    concealed = state.players[seat].concealed_tiles()
    concealed.remove(win_tile)
    emitter.emit(_player_won(state, seat, win_tile, WIN_BY_SELF_DRAW, NO_SEAT, concealed, evaluation))


def _player_won(
    state: FormulaTableState,
    seat: int,
    win_tile: int,
    win_by: str,
    from_seat: int,
    concealed: list[int],
    evaluation: FormulaEvaluation,
) -> PlayerWon:
    """`state` is the state before the win (and before a robbed kong is voided)."""
    return PlayerWon(
        seat=seat,
        win_tile=code_of(win_tile),
        win_by=win_by,
        from_seat=from_seat,
        concealed=tuple(code_of(tile) for tile in concealed),
        melds=tuple(kernel.meld_event(meld) for meld in state.players[seat].melds),
        fans=tuple(Fan(fan.id, fan.name, fan.fan, fan.count) for fan in evaluation.fans),
        multiplier=0,
        after_kong=win_by == WIN_BY_SELF_DRAW and state.turn_after_kong,
        last_tile=win_by != WIN_BY_ROB_KONG and state.non_flower_remaining() == 0,
        first_turn=win_by == WIN_BY_SELF_DRAW and state.drawn_tile is None,  # the dealer's 14 as dealt
        win_order=1,
        fan_total=evaluation.total_fan,
        fourth_tile=hands.is_fourth_tile(state, win_tile, _RULES_WIN_BY[win_by]),
    )


_RULES_WIN_BY = {
    WIN_BY_SELF_DRAW: WinBy.SELF_DRAW,
    WIN_BY_DISCARD: WinBy.DISCARD,
    WIN_BY_ROB_KONG: WinBy.ROB_KONG,
}


# ------------------------------------------------------------------------------------ claims


def _require_asked(
    state: FormulaTableState, seat: int, kind: str, error: type[Exception]
) -> tuple[FormulaWindow, Ask]:
    """The window when `seat` is asked now and may answer `kind`; else why not."""
    window = state.window
    if state.phase is not Phase.CLAIM or window is None:
        raise WrongPhaseError(f"cannot {kind} now: no discard is open for claims")
    if seat == window.from_seat:
        raise IllegalClaimError(f"seat {seat} cannot {kind} on its own discard")
    if window.rob_kong and kind != ASK_WIN:
        raise error(f"an added kong can only be robbed by a win, not answered with a {kind} (RULES.md 2.2)")
    ask = window.current
    if ask is not None and ask.seat == seat and kind in ask.kinds:
        return window, ask
    if any(later.seat == seat and kind in later.kinds for later in window.asks[1:]):
        raise NotYourTurnError(
            f"wait: a claim with priority on {code_of(window.tile)} is answered first (RULES.md 2.1)"
        )
    tile = code_of(window.tile)
    if kind in (ASK_PONG, ASK_KONG, ASK_CHOW) and window.tile == state.wildcard:
        raise error(f"{tile} is the wildcard: it cannot be chowed, ponged or konged (RULES.md 2.1)")
    if kind == ASK_CHOW and seat != (window.from_seat + 1) % SEAT_COUNT:
        raise error(
            f"chow only from the previous seat's discard (RULES.md 2.1): seat {window.from_seat} is not"
        )
    if kind == ASK_WIN and window.rob_kong:
        raise error(f"robbing the kong of {tile} gives seat {seat} no win reaching {state.rules.min_fan} fan")
    if kind == ASK_WIN:
        raise error(f"{tile} gives seat {seat} no win reaching {state.rules.min_fan} fan (RULES.md 2.1)")
    raise error(f"seat {seat} cannot {kind} {tile} now (RULES.md 2.1)")


def _pong(emitter: _Emitter, seat: int) -> None:
    window, _ask = _require_asked(emitter.state, seat, ASK_PONG, IllegalClaimError)
    emitter.emit(PongClaimed(seat, window.from_seat, code_of(window.tile)))


def _chow(emitter: _Emitter, seat: int, start: int) -> None:
    window, ask = _require_asked(emitter.state, seat, ASK_CHOW, IllegalClaimError)
    if start not in ask.chows:
        raise IllegalClaimError(
            f"no chow from {code_of(start)} with {code_of(window.tile)}: name the lowest tile of a run "
            "you complete without the wildcard (RULES.md 2.1)"
        )
    emitter.emit(ChowClaimed(seat, window.from_seat, code_of(start), code_of(window.tile)))


def _pass(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    window = state.window
    if state.phase is not Phase.CLAIM or window is None:
        raise IllegalClaimError("nothing to pass: no discard is open for claims")
    if window.current is None or window.current.seat != seat:
        raise NotYourTurnError(f"seat {seat} is not asked about {code_of(window.tile)} now")
    _emit_pass(emitter, automatic=False)


def _emit_pass(emitter: _Emitter, *, automatic: bool) -> None:
    window = emitter.state.window
    assert window is not None and window.current is not None
    ask = window.current
    emitter.emit(ClaimPassed(ask.seat, code_of(window.tile), ASK_WIN in ask.kinds, 0, automatic=automatic))


# --------------------------------------------------------------------------- leave, timeouts


def automatic_discard(state: FormulaTableState, seat: int) -> int:
    """Auto-play on a turn timeout: the drawn tile, else (after a pong, chow or the dealer's first
    turn) the highest tile held."""
    if state.drawn_tile is not None:
        return state.drawn_tile
    return max(hands.discardable(state.players[seat]))


def _expire(emitter: _Emitter) -> None:
    state = emitter.state
    if state.phase is Phase.TURN:
        seat = state.turn_seat
        emitter.emit(TurnTimedOut(seat, TIMEOUT_PHASE_TURN))
        _discard(emitter, seat, automatic_discard(state, seat), automatic=True)
    elif state.phase is Phase.CLAIM and state.window is not None and state.window.current is not None:
        emitter.emit(TurnTimedOut(state.window.current.seat, TIMEOUT_PHASE_CLAIM))
        _emit_pass(emitter, automatic=True)
    else:
        raise WrongPhaseError(f"no deadline runs in phase {state.phase.value!r}")


def waited_on(state: FormulaTableState) -> list[int]:
    """Seats whose answer (or deadline) the table waits on now; empty once the game ended."""
    if state.phase is Phase.TURN:
        return [state.turn_seat]
    if state.phase is Phase.CLAIM and state.window is not None:
        return sorted(state.window.pending)
    return []


# -------------------------------------------------------------------------------------- flow


def bird_of(state: FormulaTableState, win_tile: int) -> int:
    """RULES.md 2.3: the next wall tile, flowers skipped; after a win on the last tile, that tile."""
    for tile in state.wall[state.wall_head : state.wall_tail]:
        if not is_flower(tile):
            return tile
    return win_tile


def _flower_holder(state: FormulaTableState) -> int:
    """The seat that must set a flower aside now: dealer first in the deal (RULES.md 2.1), the
    seat on turn during play; -1 when no flower is held."""
    if state.phase is Phase.DEALING:
        for offset in range(SEAT_COUNT):
            seat = (state.dealer_seat + offset) % SEAT_COUNT
            if state.players[seat].held_flowers():
                return seat
        return NO_SEAT
    if state.phase is Phase.TURN and state.players[state.turn_seat].held_flowers():
        return state.turn_seat
    return NO_SEAT


def _advance(emitter: _Emitter) -> None:
    """Play on until the table waits for a player: 补花, the bird and the end after a win, the end
    after an escape, the next draw after a closed window."""
    while not emitter.state.is_over:
        state = emitter.state
        flower_seat = _flower_holder(state)
        if state.win_count:
            winner = state.players[state.winner_seat]
            last = emitter.events[-1] if emitter.events else None
            win_tile = (
                parse_tile(last.win_tile) if isinstance(last, PlayerWon) else max(winner.concealed_tiles())
            )
            bird = bird_of(state, win_tile)
            emitter.emit(BirdRevealed(code_of(bird), bird_seat(state.dealer_seat, bird)))
            kernel.end(emitter, END_REASON_WIN)
        elif any(player.left for player in state.players):
            kernel.end(emitter, END_REASON_ESCAPES)  # RULES.md 2.3: an escape ends the hand
        elif flower_seat != NO_SEAT:
            flower = state.players[flower_seat].held_flowers()[0]
            emitter.emit(FlowerReplaced(flower_seat, code_of(flower)))
            kernel.draw(emitter, flower_seat, from_tail=True)
        elif state.phase is Phase.CLAIM and state.window is not None and not state.window.asks:
            if state.window.rob_kong:  # nobody robbed the added kong: it stands, replacement draw
                kernel.draw(emitter, state.window.from_seat, from_tail=True)
            else:
                kernel.draw(emitter, state.next_seat_in_game(state.window.from_seat), from_tail=False)
        else:
            return
