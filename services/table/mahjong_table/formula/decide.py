"""`decide(state, command) -> events` and `open_formula_table(...)` for the formula family
(RULES.md 2.1-2.3). Pure: the state is only read; every event is folded as it is emitted so the
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
from mahjong_rules.tiles import parse_tile, tile_code
from mahjong_rules.wall import deal, dealer_from_dice

from mahjong_table.core.commands import (
    Chow,
    Discard,
    ExpireDeadline,
    Kong,
    Leave,
    Pass,
    Pong,
    TableCommand,
    Win,
)
from mahjong_table.core.emitter import Emitter
from mahjong_table.core.errors import (
    GameOverError,
    IllegalClaimError,
    IllegalKongError,
    IllegalWinError,
    InvalidCommandError,
    NotYourTurnError,
    PlayerNotInGameError,
    TileNotInHandError,
    WrongPhaseError,
)
from mahjong_table.core.events import (
    END_REASON_ESCAPES,
    END_REASON_WALL_EXHAUSTED,
    EXPOSURE_ADDED,
    EXPOSURE_EXPOSED,
    LEAVE_REASONS,
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
    GameEnded,
    HandsDealt,
    KongDeclared,
    KongRobbed,
    Meld,
    PlayerLeft,
    PlayerWon,
    PongClaimed,
    RevealedHand,
    SeatAssignment,
    TableEvent,
    TableOpened,
    TileDiscarded,
    TileDrawn,
    TurnTimedOut,
    WallExhausted,
)
from mahjong_table.core.room_rules import RoomRules
from mahjong_table.core.state import SEAT_COUNT, MeldState, Phase
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
from mahjong_table.sichuan.decide import opening_dice

END_REASON_WIN = "win"
"""A formula hand ends at its first win (RULES.md 2.1)."""


# ----------------------------------------------------------------------------------- opening


def open_formula_table(
    table_id: str, room_id: str, rules: RoomRules, seats: Sequence[str | SeatAssignment], seed: int
) -> list[TableEvent]:
    """Open a formula hand: the 144-tile wall from `seed`, dice and dealer from a generator seeded
    with `seed` (as Sichuan, RULES.md 1.1), then the deal and 补花 (`open_formula_table_with_wall`)"""
    _generator, roller, die_1, die_2 = opening_dice(seed)
    return open_formula_table_with_wall(
        table_id,
        room_id,
        rules,
        seats,
        shuffled_formula_wall(seed),
        dice_roller_seat=roller,
        die_1=die_1,
        die_2=die_2,
    )


def open_formula_table_with_wall(
    table_id: str,
    room_id: str,
    rules: RoomRules,
    seats: Sequence[str | SeatAssignment],
    wall: Sequence[int | str],
    *,
    dice_roller_seat: int = 0,
    die_1: int = 1,
    die_2: int = 1,
) -> list[TableEvent]:
    """Open from an explicit 144-tile wall (head first): `TableOpened`, `HandsDealt` (the raw
    14/13 deal, flowers included), then the 补花 of the initial hands, dealer first, from the tail
    (`FlowerReplaced` + `TileDrawn`, RULES.md 2.1). The indicator is the first non-flower head tile
    after the deal; it and the flowers turned before it leave the wall."""
    if len(seats) != SEAT_COUNT:
        raise InvalidCommandError(f"a table needs {SEAT_COUNT} seats, got {len(seats)}")
    tiles = tuple(tile if isinstance(tile, int) else parse_tile(tile) for tile in wall)
    if sorted(tiles) != list(FORMULA_TILES):
        raise InvalidCommandError("a formula wall must hold the 144 tiles: 4 of each of 34, 8 flowers")
    dealer = dealer_from_dice(dice_roller_seat, die_1, die_2)
    dealt = deal(tiles, dealer)
    opening = open_formula_hand(dealt, dealer)  # the indicator (RULES.md 2.1): flips past flowers
    head = dealt.wall.head_drawn + len(opening.turned_flowers) + 1
    opened = TableOpened(
        table_id=table_id,
        room_id=room_id,
        rules=rules,
        seats=tuple(
            seat if isinstance(seat, SeatAssignment) else SeatAssignment(index, seat)
            for index, seat in enumerate(seats)
        ),
        wall=tuple(tile_code(tile) for tile in tiles),
        dice_roller_seat=dice_roller_seat,
        die_1=die_1,
        die_2=die_2,
        dealer_seat=dealer,
        exchange_direction="",
        wildcard_indicator=tile_code(opening.indicator),
        wildcard=tile_code(opening.wildcard),
    )
    dealt_event = HandsDealt(
        hands=tuple(
            DealtHand(seat, tuple(tile_code(t) for t in hand)) for seat, hand in enumerate(dealt.hands)
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
    """`decide` plus the state after its events."""
    emitter = _Emitter(state, evolve)
    if state.is_over:
        raise GameOverError(f"the game at table {state.table_id} has ended ({state.end_reason})")
    if isinstance(command, ExpireDeadline):
        _expire(emitter)
    elif isinstance(command, Leave):
        _leave(emitter, command)
    else:
        _act(emitter, command)
    _advance(emitter)
    return emitter.events, emitter.state


def _act(emitter: _Emitter, command: TableCommand) -> None:
    seat = getattr(command, "seat", NO_SEAT)
    if not isinstance(seat, int) or isinstance(seat, bool) or not 0 <= seat < SEAT_COUNT:
        raise InvalidCommandError(f"seat must be 0..{SEAT_COUNT - 1}, got {seat!r}")
    player = emitter.state.players[seat]
    if not player.in_game:
        raise PlayerNotInGameError(f"seat {seat} takes no further part")
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
    if not isinstance(code, str):
        raise InvalidCommandError(f"a tile is a code string such as '5p', got {code!r}")
    try:
        tile = parse_tile(code)
    except Exception as error:  # the rules library's InvalidTileError
        raise InvalidCommandError(str(error)) from None
    if is_flower(tile):
        raise InvalidCommandError(f"{code} is a flower: flowers are set aside, never played (RULES.md 2.1)")
    return tile


# -------------------------------------------------------------------------------------- turn


def _require_turn(state: FormulaTableState, seat: int, action: str) -> None:
    if state.phase is not Phase.TURN:
        raise WrongPhaseError(f"cannot {action} now: the game is in phase {state.phase.value!r}")
    if state.turn_seat != seat:
        raise NotYourTurnError(f"it is seat {state.turn_seat}'s turn, not seat {seat}'s")


def _discard(emitter: _Emitter, seat: int, tile: int, *, automatic: bool) -> None:
    state = emitter.state
    _require_turn(state, seat, "discard")
    if not state.players[seat].concealed[tile]:
        raise TileNotInHandError(f"seat {seat} does not hold {tile_code(tile)}")
    emitter.emit(TileDiscarded(seat, tile_code(tile), automatic=automatic))


def _kong(emitter: _Emitter, seat: int, tile: int | None) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM:
        window, _ask = _require_asked(state, seat, ASK_KONG, IllegalKongError)
        if tile not in (None, window.tile):
            raise IllegalKongError(f"only the open discard {tile_code(window.tile)} can be konged now")
        emitter.emit(KongDeclared(seat, tile_code(window.tile), EXPOSURE_EXPOSED, window.from_seat))
        _draw(emitter, seat, from_tail=True)
        return
    _require_turn(state, seat, "declare a kong")
    if tile is None:
        raise IllegalKongError("on your own turn name the kong tile (concealed or added kong)")
    exposure = dict(hands.kong_options(state, seat)).get(tile)
    if exposure is None:
        raise IllegalKongError(
            f"no kong of {tile_code(tile)}: hold four (or one with your pong), not the wildcard "
            "(RULES.md 2.1), with a tile left in the wall, and not right after a pong or chow"
        )
    emitter.emit(KongDeclared(seat, tile_code(tile), exposure, NO_SEAT))
    if exposure != EXPOSURE_ADDED:
        _draw(emitter, seat, from_tail=True)
    # An added kong opens the rob window (evolve); `_advance` draws the replacement once it closes.


def _win(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM:
        window, _ask = _require_asked(state, seat, ASK_WIN, IllegalWinError)
        concealed = state.players[seat].concealed_tiles()
        if window.rob_kong:
            # 抢杠和 (RULES.md 2.2): the kong is void, then the robber wins on its tile.
            evaluation = hands.rob_kong_win(state, seat, window.tile)
            assert evaluation is not None, "a rob ask without a win"
            emitter.emit(KongRobbed(window.from_seat, tile_code(window.tile), (seat,)))
            win_by = WIN_BY_ROB_KONG
        else:
            evaluation = hands.discard_win(state, seat, window.tile)
            assert evaluation is not None, "a win ask without a win"
            win_by = WIN_BY_DISCARD
        emitter.emit(_player_won(state, seat, window.tile, win_by, window.from_seat, concealed, evaluation))
        return
    _require_turn(state, seat, "win")
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
        win_tile=tile_code(win_tile),
        win_by=win_by,
        from_seat=from_seat,
        concealed=tuple(tile_code(tile) for tile in concealed),
        melds=tuple(meld_event(meld) for meld in state.players[seat].melds),
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


def meld_event(meld: MeldState) -> Meld:
    """The event form of a meld (proto `Meld`); a chow's tile is the lowest of its run."""
    from_seat = NO_SEAT if meld.kind == "kong" and meld.exposure != EXPOSURE_EXPOSED else meld.from_seat
    return Meld(meld.kind, tile_code(meld.tile), meld.exposure, from_seat)


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
            f"wait: a claim with priority on {tile_code(window.tile)} is answered first (RULES.md 2.1)"
        )
    tile = tile_code(window.tile)
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
    emitter.emit(PongClaimed(seat, window.from_seat, tile_code(window.tile)))


def _chow(emitter: _Emitter, seat: int, start: int) -> None:
    window, ask = _require_asked(emitter.state, seat, ASK_CHOW, IllegalClaimError)
    if start not in ask.chows:
        raise IllegalClaimError(
            f"no chow from {tile_code(start)} with {tile_code(window.tile)}: name the lowest tile of a run "
            "you complete without the wildcard (RULES.md 2.1)"
        )
    emitter.emit(ChowClaimed(seat, window.from_seat, tile_code(start), tile_code(window.tile)))


def _pass(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    window = state.window
    if state.phase is not Phase.CLAIM or window is None:
        raise IllegalClaimError("nothing to pass: no discard is open for claims")
    if window.current is None or window.current.seat != seat:
        raise NotYourTurnError(f"seat {seat} is not asked about {tile_code(window.tile)} now")
    _emit_pass(emitter, automatic=False)


def _emit_pass(emitter: _Emitter, *, automatic: bool) -> None:
    window = emitter.state.window
    assert window is not None and window.current is not None
    ask = window.current
    emitter.emit(ClaimPassed(ask.seat, tile_code(window.tile), ASK_WIN in ask.kinds, 0, automatic=automatic))


# --------------------------------------------------------------------------- leave, timeouts


def _leave(emitter: _Emitter, command: Leave) -> None:
    """RULES.md 2.3: an escape ends the hand (the end follows in `_advance`)."""
    if not isinstance(command.seat, int) or not 0 <= command.seat < SEAT_COUNT:
        raise InvalidCommandError(f"seat must be 0..{SEAT_COUNT - 1}, got {command.seat!r}")
    if command.reason not in LEAVE_REASONS:
        raise InvalidCommandError(f"leave reason must be one of {LEAVE_REASONS}, got {command.reason!r}")
    player = emitter.state.players[command.seat]
    if player.left:
        raise PlayerNotInGameError(f"seat {command.seat} already left the table")
    emitter.emit(PlayerLeft(command.seat, command.reason, had_won=player.won))


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


def _draw(emitter: _Emitter, seat: int, *, from_tail: bool) -> None:
    """Draw from the head (normal) or tail (kong and flower replacements); on an empty wall the
    hand is drawn (RULES.md 2.1: no payments except rake)."""
    state = emitter.state
    if state.wall_remaining == 0:
        emitter.emit(WallExhausted())
        _end(emitter, END_REASON_WALL_EXHAUSTED)
        return
    tile = state.wall[state.wall_tail - 1] if from_tail else state.wall[state.wall_head]
    emitter.emit(TileDrawn(seat, tile_code(tile), from_tail, state.wall_remaining - 1))


def _end(emitter: _Emitter, reason: str) -> None:
    hands_revealed = tuple(
        RevealedHand(
            seat,
            tuple(tile_code(tile) for tile in player.concealed_tiles()),
            tuple(meld_event(meld) for meld in player.melds),
            player.won,
            player.left,
        )
        for seat, player in enumerate(emitter.state.players)
    )
    emitter.emit(GameEnded(reason, hands_revealed))


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
            emitter.emit(BirdRevealed(tile_code(bird), bird_seat(state.dealer_seat, bird)))
            _end(emitter, END_REASON_WIN)
        elif any(player.left for player in state.players):
            _end(emitter, END_REASON_ESCAPES)  # RULES.md 2.3: an escape ends the hand
        elif flower_seat != NO_SEAT:
            flower = state.players[flower_seat].held_flowers()[0]
            emitter.emit(FlowerReplaced(flower_seat, tile_code(flower)))
            _draw(emitter, flower_seat, from_tail=True)
        elif state.phase is Phase.CLAIM and state.window is not None and not state.window.asks:
            if state.window.rob_kong:  # nobody robbed the added kong: it stands, replacement draw
                _draw(emitter, state.window.from_seat, from_tail=True)
            else:
                _draw(emitter, state.next_seat_in_game(state.window.from_seat), from_tail=False)
        else:
            return


def tiles_accounted(state: FormulaTableState) -> int:
    """Wall + hands + melds + discards + flowers set aside + indicator and turned flowers: 144."""
    total = state.wall_remaining + 1 + len(state.turned_flowers)
    for player in state.players:
        total += player.tile_count + len(player.discards) + len(player.flowers)
        total += sum(len(meld.tiles) for meld in player.melds)
    return total
