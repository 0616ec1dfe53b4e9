"""`decide(state, command) -> events` and `open_table(...)`: the Sichuan table's rules (RULES.md
1.1-1.6, 1.10), on the kernel's steps (`mahjong_table.core.decide`: the checks, leaving, drawing,
the end). Pure: the state is only read; the returned events are what `evolve` folds.

A command's events are built by folding each event as it is emitted (`_Emitter`), so the follow-up
steps (the next draw, the end of the game) are decided on exactly the state a replay will see.
"""

from __future__ import annotations

from collections.abc import Sequence

from mahjong_rules.room_rules import RoomRules
from mahjong_rules.wall import WALL_TILE_COUNT

from mahjong_table.core import decide as kernel
from mahjong_table.core.commands import (
    DeclareMissingSuit,
    Discard,
    ExchangeThree,
    Kong,
    Pass,
    Pong,
    TableCommand,
    Win,
)
from mahjong_table.core.emitter import Emitter
from mahjong_table.core.errors import (
    AlreadyDeclaredError,
    IllegalClaimError,
    IllegalKongError,
    IllegalWinError,
    InvalidCommandError,
    InvalidExchangeError,
    MissingSuitObligationError,
    NotYourTurnError,
    TableRuleError,
    TileNotInHandError,
    WrongPhaseError,
)
from mahjong_table.core.events import (
    END_REASON_ESCAPES,
    END_REASON_THREE_WINS,
    EXCHANGE_DIRECTIONS,
    EXPOSURE_EXPOSED,
    NO_SEAT,
    TIMEOUT_PHASE_CLAIM,
    TIMEOUT_PHASE_EXCHANGE,
    TIMEOUT_PHASE_MISSING_SUIT,
    TIMEOUT_PHASE_TURN,
    WIN_BY_DISCARD,
    WIN_BY_ROB_KONG,
    WIN_BY_SELF_DRAW,
    ClaimPassed,
    DealtHand,
    ExchangePicked,
    ExchangeTransfer,
    HandsDealt,
    KongRobbed,
    MissingSuitChosen,
    MissingSuitsDeclared,
    PlayerWon,
    PongClaimed,
    SeatAssignment,
    TableEvent,
    TileDiscarded,
    TilesExchanged,
    TurnTimedOut,
)
from mahjong_table.core.state import SEAT_COUNT, Phase
from mahjong_table.core.tiles import codes_of, codes_of_counts, command_tile
from mahjong_table.sichuan import autoplay, hands, rules_adapter
from mahjong_table.sichuan.evolve import evolve, exchange_receiver
from mahjong_table.sichuan.rules_adapter import SUIT_CODES, WinEvaluation, code_of
from mahjong_table.sichuan.state import (
    TILE_KIND_COUNT,
    ClaimWindow,
    TableState,
    WindowKind,
    WindowStage,
)

EXCHANGE_TILE_COUNT = 3
_SICHUAN_TILES = [tile for tile in range(TILE_KIND_COUNT) for _ in range(4)]
"""Every tile of a Sichuan wall in order: four of each kind (RULES.md 1.1)."""


# ----------------------------------------------------------------------------------- opening


def open_table(
    table_id: str, room_id: str, rules: RoomRules, seats: Sequence[str | SeatAssignment], seed: int
) -> list[TableEvent]:
    """Open a game: the wall from `seed` via the rules library, dice, dealer and exchange
    direction from a generator seeded with `seed` (the randomness is an input), then the deal
    (RULES.md 1.1, 1.2). Returns `TableOpened` (recording the whole wall) and `HandsDealt`."""
    generator, dice = kernel.opening_dice(seed)
    direction = generator.choice(EXCHANGE_DIRECTIONS)  # uniform over the three (RULES.md 1.2)
    return open_table_with_wall(
        table_id,
        room_id,
        rules,
        seats,
        rules_adapter.initial_wall(seed),
        dice=dice,
        exchange_direction=direction,
    )


def open_table_with_wall(
    table_id: str,
    room_id: str,
    rules: RoomRules,
    seats: Sequence[str | SeatAssignment],
    wall: Sequence[int | str],
    *,
    dice: kernel.Dice = kernel.DEFAULT_DICE,
    exchange_direction: str = "counter_clockwise",
) -> list[TableEvent]:
    """Open a game from an explicit wall (head first): the deterministic core of `open_table`,
    also used by scenario tests that need a known deal. The dealer comes from the dice."""
    assignments = kernel.seat_assignments(seats)
    wall_tiles = tuple(tile if isinstance(tile, int) else _parse_tile(tile) for tile in wall)
    if sorted(wall_tiles) != _SICHUAN_TILES:
        raise InvalidCommandError(f"a wall must hold the {WALL_TILE_COUNT} Sichuan tiles, 4 of each")
    if exchange_direction not in EXCHANGE_DIRECTIONS:
        raise InvalidCommandError(f"exchange direction must be one of {EXCHANGE_DIRECTIONS}")
    direction = exchange_direction if rules.exchange_three else ""
    opened = kernel.table_opened(
        table_id, room_id, rules, assignments, wall_tiles, dice, exchange_direction=direction
    )
    dealer_seat = dice.dealer_seat
    dealt_tiles, head = rules_adapter.deal_hands(wall_tiles, dealer_seat)
    dealt = HandsDealt(
        hands=tuple(DealtHand(seat, codes_of(sorted(hand))) for seat, hand in enumerate(dealt_tiles)),
        wall_remaining=WALL_TILE_COUNT - head,
    )
    return [opened, dealt]


# ------------------------------------------------------------------------------------ decide


_Emitter = Emitter[TableState]


def decide(state: TableState, command: TableCommand) -> list[TableEvent]:
    """The events that `command` causes now, or a `TableRuleError` (and nothing changes)."""
    return execute(state, command)[0]


def execute(state: TableState, command: TableCommand) -> tuple[list[TableEvent], TableState]:
    """`decide` plus the state after its events, folded once (the caller need not fold them again).

    Equal to `(events, fold(events, state))`; the service uses it on its hot path.
    """
    return kernel.execute(state, command, evolve=evolve, act=_act, expire=_expire, advance=_advance)


def _act(emitter: _Emitter, command: TableCommand) -> None:
    seat = kernel.check_seat(getattr(command, "seat", NO_SEAT))
    if isinstance(command, Discard):  # the most frequent command first
        tile = _parse_tile(command.tile)
        kernel.require_in_game(emitter.state, seat)
        _discard(emitter, seat, tile, automatic=False)
    elif isinstance(command, ExchangeThree):
        tiles = _parse_tiles(command.tiles)
        kernel.require_in_game(emitter.state, seat)
        _exchange(emitter, seat, tiles)
    elif isinstance(command, DeclareMissingSuit):
        if command.suit not in SUIT_CODES:
            raise InvalidCommandError(f"missing suit must be 'm', 'p' or 's', got {command.suit!r}")
        kernel.require_in_game(emitter.state, seat)
        _declare_missing_suit(emitter, seat, SUIT_CODES.index(command.suit))
    elif isinstance(command, Kong):
        kong_tile = None if command.tile is None else _parse_tile(command.tile)
        kernel.require_in_game(emitter.state, seat)
        _kong(emitter, seat, kong_tile)
    elif isinstance(command, Pong):
        kernel.require_in_game(emitter.state, seat)
        _pong(emitter, seat)
    elif isinstance(command, Win):
        kernel.require_in_game(emitter.state, seat)
        _win(emitter, seat)
    elif isinstance(command, Pass):
        kernel.require_in_game(emitter.state, seat)
        _pass(emitter, seat)
    else:
        raise InvalidCommandError(f"unknown command {type(command).__name__}")


# ------------------------------------------------------------------------------------ checks


def _parse_tile(code: object) -> int:
    return command_tile(code, rules_adapter.parse_code)


def _parse_tiles(codes: object) -> list[int]:
    if not isinstance(codes, (tuple, list)):
        raise InvalidCommandError(f"tiles must be a list of codes such as ['1m', '2m', '3m'], got {codes!r}")
    return [_parse_tile(code) for code in codes]


def _require_phase(state: TableState, phase: Phase, action: str) -> None:
    if state.phase is not phase:
        raise WrongPhaseError(
            f"cannot {action} now: the game is in phase {state.phase.value!r}, not {phase.value!r}"
        )


# -------------------------------------------------------------------- exchange, missing suit


def _exchange(emitter: _Emitter, seat: int, tiles: list[int]) -> None:
    state = emitter.state
    _require_phase(state, Phase.EXCHANGE, "exchange three")
    player = state.players[seat]
    if player.exchange_pick is not None:
        raise AlreadyDeclaredError(f"seat {seat} already picked its exchange tiles")
    if len(tiles) != EXCHANGE_TILE_COUNT:
        raise InvalidExchangeError(f"pick exactly {EXCHANGE_TILE_COUNT} tiles of one suit, not {len(tiles)}")
    if len({rules_adapter.suit_of(tile) for tile in tiles}) != 1:
        raise InvalidExchangeError("the three exchange tiles must all be of one suit (RULES.md 1.2)")
    for tile in set(tiles):
        if player.concealed[tile] < tiles.count(tile):
            raise TileNotInHandError(f"seat {seat} does not hold {tiles.count(tile)} × {code_of(tile)}")
    emitter.emit(ExchangePicked(seat, tuple(code_of(tile) for tile in tiles), automatic=False))


def _all_picked(state: TableState) -> bool:
    return all(player.exchange_pick is not None for player in state.players)


def _swap(emitter: _Emitter) -> None:
    """RULES.md 1.2: all four picks are in; every swap happens at once in the drawn direction."""
    state = emitter.state
    direction = state.exchange_direction
    transfers = []
    for seat, player in enumerate(state.players):
        assert player.exchange_pick is not None
        transfers.append(
            ExchangeTransfer(
                seat,
                exchange_receiver(seat, direction),
                tuple(code_of(tile) for tile in player.exchange_pick),
            )
        )
    emitter.emit(TilesExchanged(direction, tuple(transfers)))


def _declare_missing_suit(emitter: _Emitter, seat: int, suit: int) -> None:
    state = emitter.state
    _require_phase(state, Phase.MISSING_SUIT, "declare a missing suit")
    if state.players[seat].missing_suit is not None:
        raise AlreadyDeclaredError(f"seat {seat} already declared its missing suit")
    emitter.emit(MissingSuitChosen(seat, SUIT_CODES[suit], automatic=False))


def _reveal_missing_suits(emitter: _Emitter) -> None:
    suits = []
    for player in emitter.state.players:
        assert player.missing_suit is not None
        suits.append(SUIT_CODES[player.missing_suit])
    emitter.emit(MissingSuitsDeclared(tuple(suits)))


# -------------------------------------------------------------------------------------- turn


def _discard(emitter: _Emitter, seat: int, tile: int, *, automatic: bool) -> None:
    state = emitter.state
    kernel.require_discard(state, seat, tile)
    player = state.players[seat]
    if player.holds_missing_suit() and rules_adapter.suit_of(tile) != player.missing_suit:
        missing = SUIT_CODES[player.missing_suit or 0]
        raise MissingSuitObligationError(
            f"seat {seat} still holds tiles of its missing suit '{missing}' and must discard one of them "
            f"first (RULES.md 1.3), not {code_of(tile)}"
        )
    emitter.emit(TileDiscarded(seat, code_of(tile), automatic=automatic))


def _kong(emitter: _Emitter, seat: int, tile: int | None) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM:
        _exposed_kong(emitter, seat, tile)
        return
    tile = kernel.require_own_kong(state, seat, tile)
    player = state.players[seat]
    if state.turn_after_meld:
        raise IllegalKongError("after a pong you must discard; a kong needs a draw first")
    if state.wall_remaining == 0:
        raise IllegalKongError("no kong when the wall is empty: there is no replacement tile (RULES.md 1.5)")
    if rules_adapter.suit_of(tile) == player.missing_suit:
        raise IllegalKongError(f"{code_of(tile)} is of your missing suit: no kong with it (RULES.md 1.3)")
    options = dict(hands.kong_options(state, seat))
    exposure = options.get(tile)
    if exposure is None:
        raise IllegalKongError(
            f"no kong of {code_of(tile)}: hold four of it, or one of it with your pong of it (RULES.md 1.5)"
        )
    kernel.declare_kong(emitter, seat, tile, exposure)


def _win(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM:
        _claim_win(emitter, seat)
        return
    kernel.require_turn(state, seat, "win")
    player = state.players[seat]
    if state.turn_after_meld:
        raise IllegalWinError("after a pong you must discard: a self-draw win needs a draw")
    if player.holds_missing_suit():
        raise IllegalWinError("a hand holding a tile of its missing suit cannot win (RULES.md 1.3)")
    found = hands.self_draw_win(state, seat)
    if found is None:
        raise IllegalWinError("your hand is not a winning hand (RULES.md 1.6)")
    win_tile, evaluation = found
    situation = hands.self_draw_situation(state, seat)
    concealed = list(player.concealed)
    concealed[win_tile] -= 1
    emitter.emit(
        _player_won(
            state,
            seat,
            win_tile,
            WIN_BY_SELF_DRAW,
            NO_SEAT,
            concealed,
            evaluation,
            after_kong=situation.after_kong,
            last_tile=situation.last_tile,
            first_turn=situation.first_turn,
        )
    )


def _player_won(
    state: TableState,
    seat: int,
    win_tile: int,
    win_by: str,
    from_seat: int,
    concealed: Sequence[int],
    evaluation: WinEvaluation,
    *,
    after_kong: bool,
    last_tile: bool,
    first_turn: bool,
) -> PlayerWon:
    return PlayerWon(
        seat=seat,
        win_tile=code_of(win_tile),
        win_by=win_by,
        from_seat=from_seat,
        concealed=codes_of_counts(concealed),
        melds=tuple(kernel.meld_event(meld) for meld in state.players[seat].melds),
        fans=evaluation.fans,
        multiplier=evaluation.multiplier,
        after_kong=after_kong,
        last_tile=last_tile,
        first_turn=first_turn,
        win_order=state.win_count + 1,
    )


# ------------------------------------------------------------------------------------ claims


def _window(state: TableState) -> ClaimWindow:
    window = state.window
    assert window is not None, "claim phase without a window"
    return window


def _require_claim(state: TableState, seat: int, action: str) -> ClaimWindow:
    if state.phase is not Phase.CLAIM:
        raise WrongPhaseError(f"cannot {action} now: no discard or added kong is open for claims")
    window = _window(state)
    if seat == window.from_seat:
        raise IllegalClaimError(f"seat {seat} cannot {action} on its own tile {code_of(window.tile)}")
    return window


def _claim_win(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    window = _require_claim(state, seat, "win")
    if window.stage is WindowStage.WIN and seat in window.pending:
        player = state.players[seat]
        evaluation = hands.claim_win_evaluation(state, seat, window.tile, window.kind, window.after_kong)
        assert evaluation is not None and evaluation.multiplier == window.win_offers[seat]
        robbed = window.kind is WindowKind.ROB_KONG
        emitter.emit(
            _player_won(
                state,
                seat,
                window.tile,
                WIN_BY_ROB_KONG if robbed else WIN_BY_DISCARD,
                window.from_seat,
                player.concealed,
                evaluation,
                after_kong=window.after_kong and not robbed,
                last_tile=False,
                first_turn=False,
            )
        )
        return
    raise IllegalWinError(_why_no_claim_win(state, seat, window))


def _why_no_claim_win(state: TableState, seat: int, window: ClaimWindow) -> str:
    player = state.players[seat]
    tile = code_of(window.tile)
    if player.holds_missing_suit() or rules_adapter.suit_of(window.tile) == player.missing_suit:
        return "no win with a tile of your missing suit, or while holding one (RULES.md 1.3)"
    evaluation = hands.claim_win_evaluation(state, seat, window.tile, window.kind, window.after_kong)
    if evaluation is None:
        return f"{tile} does not complete a winning hand for seat {seat} (RULES.md 1.6)"
    if state.rules.skip_win_lock and player.skip_win_multiplier >= evaluation.multiplier:
        return (
            f"skip-win lock: seat {seat} passed a win worth ×{player.skip_win_multiplier} since its last "
            f"draw and may win on {tile} (×{evaluation.multiplier}) only after its next draw (RULES.md 1.4)"
        )
    return f"seat {seat} already answered the win on {tile}, or the wins on it are decided"


def _require_meld_claimant(
    state: TableState, seat: int, action: str, error: type[TableRuleError]
) -> ClaimWindow:
    """The window if `seat` is the pong/kong claimant asked now; else `error` (or NotYourTurnError
    while the players who can win still answer) saying why."""
    window = _require_claim(state, seat, action)
    if window.kind is WindowKind.ROB_KONG:
        raise error(f"an added kong can only be robbed by a win, not answered with a {action}")
    if window.stage is WindowStage.MELD and seat == window.meld_seat and seat in window.pending:
        return window
    player = state.players[seat]
    if player.missing_suit == rules_adapter.suit_of(window.tile):
        raise error(f"{code_of(window.tile)} is of your missing suit: no {action} (RULES.md 1.3)")
    if window.stage is WindowStage.WIN and player.concealed[window.tile] >= 2:
        if seat in window.pending:
            raise error(
                f"answer the win on {code_of(window.tile)} first (win or pass); the {action} is offered after"
            )
        raise NotYourTurnError(f"wait: the players who can win on {code_of(window.tile)} answer first")
    if state.wall_remaining == 0:
        raise error("the wall is empty: the last discard can only be won on (RULES.md 1.4)")
    raise error(f"seat {seat} does not hold two {code_of(window.tile)} to {action}")


def _pong(emitter: _Emitter, seat: int) -> None:
    window = _require_meld_claimant(emitter.state, seat, "pong", IllegalClaimError)
    emitter.emit(PongClaimed(seat, window.from_seat, code_of(window.tile)))


def _exposed_kong(emitter: _Emitter, seat: int, tile: int | None) -> None:
    state = emitter.state
    if state.phase is Phase.CLAIM and state.window is not None and tile not in (None, state.window.tile):
        raise IllegalKongError(f"only the open discard {code_of(state.window.tile)} can be konged now")
    window = _require_meld_claimant(state, seat, "kong", IllegalKongError)
    if not window.can_kong:
        raise IllegalKongError(f"seat {seat} does not hold three {code_of(window.tile)} to kong")
    kernel.declare_kong(emitter, seat, window.tile, EXPOSURE_EXPOSED, window.from_seat)


def _pass(emitter: _Emitter, seat: int) -> None:
    state = emitter.state
    if state.phase is Phase.TURN and state.turn_seat == seat:
        raise IllegalClaimError("nothing to pass: it is your turn, discard (or kong, or win)")
    window = _require_claim(state, seat, "pass")
    if seat not in window.pending:
        raise NotYourTurnError(f"seat {seat} is not asked about {code_of(window.tile)}")
    _emit_pass(emitter, seat, automatic=False)


def _emit_pass(emitter: _Emitter, seat: int, *, automatic: bool) -> None:
    window = _window(emitter.state)
    offered = window.win_offers[seat] if window.stage is WindowStage.WIN else 0
    emitter.emit(ClaimPassed(seat, code_of(window.tile), offered > 0, offered, automatic=automatic))


# --------------------------------------------------------------------------- leave, timeouts


def _auto_pick(emitter: _Emitter, seat: int) -> None:
    pick = autoplay.automatic_exchange_pick(emitter.state.players[seat])
    emitter.emit(ExchangePicked(seat, tuple(code_of(tile) for tile in pick), automatic=True))


def _auto_missing_suit(emitter: _Emitter, seat: int) -> None:
    suit = autoplay.automatic_missing_suit(emitter.state.players[seat])
    emitter.emit(MissingSuitChosen(seat, SUIT_CODES[suit], automatic=True))


def _expire(emitter: _Emitter) -> None:
    state = emitter.state
    kernel.require_not_over(state)
    if state.phase is Phase.EXCHANGE:
        for seat in waited_on(state):
            emitter.emit(TurnTimedOut(seat, TIMEOUT_PHASE_EXCHANGE))
            _auto_pick(emitter, seat)
    elif state.phase is Phase.MISSING_SUIT:
        for seat in waited_on(state):
            emitter.emit(TurnTimedOut(seat, TIMEOUT_PHASE_MISSING_SUIT))
            _auto_missing_suit(emitter, seat)
    elif state.phase is Phase.TURN:
        seat = state.turn_seat
        emitter.emit(TurnTimedOut(seat, TIMEOUT_PHASE_TURN))
        _discard(emitter, seat, autoplay.automatic_discard(state, seat), automatic=True)
    elif state.phase is Phase.CLAIM:
        for seat in waited_on(state):
            emitter.emit(TurnTimedOut(seat, TIMEOUT_PHASE_CLAIM))
            _emit_pass(emitter, seat, automatic=True)
    else:
        raise WrongPhaseError(f"no deadline runs in phase {state.phase.value!r}")


def waited_on(state: TableState) -> list[int]:
    """Seats whose answer (or deadline) the table waits on now, in turn order (from the discarder
    in a claim window); empty once the game ended."""
    phase = state.phase
    if phase is Phase.TURN:
        return [state.turn_seat]
    if phase is Phase.CLAIM:
        window = _window(state)
        if len(window.pending) < 2:
            return list(window.pending)
        return sorted(window.pending, key=lambda seat: (seat - window.from_seat) % SEAT_COUNT)
    if phase is Phase.EXCHANGE:
        return [seat for seat, player in enumerate(state.players) if player.exchange_pick is None]
    if phase is Phase.MISSING_SUIT:
        return [seat for seat, player in enumerate(state.players) if player.missing_suit is None]
    return []


# -------------------------------------------------------------------------------------- flow


def _end_if_due(emitter: _Emitter) -> bool:
    """End the game after three wins, or when fewer than two players are still in it
    (RULES.md 1.6, 1.10). True when the game is over."""
    state = emitter.state
    if state.phase is Phase.ENDED:
        return True
    if state.win_count >= 3:
        reason = END_REASON_THREE_WINS
    elif _seats_out(state) > SEAT_COUNT - 2:
        reason = END_REASON_ESCAPES
    else:
        return False
    window = state.window
    if window is not None and window.kind is WindowKind.ROB_KONG and window.winners:
        # A robbed added kong is void even when the robbing win ends the game (RULES.md 1.5).
        emitter.emit(KongRobbed(window.from_seat, code_of(window.tile), window.winners))
    kernel.end(emitter, reason)
    return True


def _seats_out(state: TableState) -> int:
    """How many seats won or left."""
    out = 0
    for player in state.players:
        if player.won or player.left:
            out += 1
    return out


def _advance(emitter: _Emitter) -> None:
    """Play on until the table waits for a player again: swaps and reveals once everyone is in,
    closed claim windows resolved, turns of seats that won or left passed on, the end.

    Only the command itself can win or leave, so the end by wins or escapes is checked once; the
    steps here can only end the game by exhausting the wall."""
    if _end_if_due(emitter):
        return
    while not emitter.state.is_over:
        state = emitter.state
        phase = state.phase
        if phase is Phase.TURN:
            if state.players[state.turn_seat].in_game:
                return
            kernel.draw(emitter, state.next_seat_in_game(state.turn_seat), from_tail=False)
        elif phase is Phase.CLAIM:
            window = _window(state)
            if window.pending:
                return
            _resolve_window(emitter, window)
        elif not _advance_opening(emitter, state):
            return


def _advance_opening(emitter: _Emitter, state: TableState) -> bool:
    """The exchange and missing-suit steps of `_advance`; False when the table waits on a player."""
    absent = [seat for seat in waited_on(state) if state.players[seat].left]
    if absent and state.phase is Phase.EXCHANGE:
        _auto_pick(emitter, absent[0])  # RULES.md 1.10: escapees act no more; the server picks
    elif absent and state.phase is Phase.MISSING_SUIT:
        _auto_missing_suit(emitter, absent[0])
    elif state.phase is Phase.EXCHANGE and _all_picked(state):
        _swap(emitter)
    elif state.phase is Phase.MISSING_SUIT and all(p.missing_suit is not None for p in state.players):
        _reveal_missing_suits(emitter)
    else:
        return False
    return True


def _resolve_window(emitter: _Emitter, window: ClaimWindow) -> None:
    """Every asked player answered and no pong/kong was made (RULES.md 1.4-1.6)."""
    state = emitter.state
    if window.winners:
        if window.kind is WindowKind.ROB_KONG:
            emitter.emit(KongRobbed(window.from_seat, code_of(window.tile), window.winners))
        # After a (multi-)win play goes on after the winner farthest from the discarder.
        last_winner = hands.farthest_from(window.from_seat, window.winners)
        kernel.draw(emitter, emitter.state.next_seat_in_game(last_winner), from_tail=False)
    elif window.kind is WindowKind.ROB_KONG and state.players[window.from_seat].in_game:
        kernel.draw(emitter, window.from_seat, from_tail=True)  # the added kong stands: replacement draw
    else:
        kernel.draw(emitter, state.next_seat_in_game(window.from_seat), from_tail=False)
