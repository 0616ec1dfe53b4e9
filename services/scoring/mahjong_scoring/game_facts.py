"""From the table's event stream to settlement facts: scoring's own small fold of one game.

Scoring consumes the protobuf events of `mahjong.table.v1` and never imports the table engine, so
it keeps what settlement needs itself: each seat's concealed tiles, melds and missing suit, who
has won and who has left, which added kong is waiting to stand, and which kong (if any) came right
before each discard. `apply_table_event(state, envelope)` is a pure step: the new state and the
`Step`s the event causes, in order:

- `GameOpened` (from `TableOpened`): the room's settlement options (beans = points × N) and the
  account of every seat;
- `FactStep`: a settlement fact for `mahjong_rules.settlement.settle` (kong, win, escape,
  wall-exhausted checks) with the fans behind the points of each payee;
- `GameOver` (from `GameEnded`): time for the rake and the game's totals;
- `Notice`: something looked wrong but settlement went on (the caller logs it; this module does
  no I/O).

Ordering decisions, taken from the table engine's emitted order and made robust:

- **Added kong** (RULES.md 1.5): `KongDeclared(added)` opens a rob window; the table then emits
  either `PlayerWon(rob_kong)`… `KongRobbed` (the kong is void), or the declarer's replacement
  `TileDrawn(from_tail)` (the kong stands). The kong is settled at that replacement draw, or at
  the declarer's next own action should the draw ever be missing; it is void when robbed, when
  the declarer leaves first, or when the game ends first. A rob arriving after the kong was
  settled contradicts the rules and raises `GameFactsError`.
- **Wins on one discard** (RULES.md 1.4 一炮多响) arrive as one `PlayerWon` per winner, and call
  transfer (1.5) depends on how many there are. The wins of one discard (or one robbed kong) are
  therefore collected until the claim window closes (the first event that is not another win on
  that tile, a pass, a timeout or `KongRobbed`) and settled as one `WinFact`. Within one table
  command that is the very next events, so payments still happen as the game goes.
- **Call transfer** needs the discarder's kong that came right before the discard: a kong that
  stands marks its declarer; the mark is cleared by the declarer's next head draw or pong and
  carried by their next discard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeAlias, TypeVar

from mahjong.v1 import common_pb2, envelope_pb2, rooms_pb2, table_events_pb2
from mahjong_rules import (
    SUITS,
    Fan,
    Meld,
    RulesError,
    Suit,
    Tile,
    WinContext,
    evaluate_win,
    find_waits,
    holds_three_suits,
    parse_tile,
    tile_code,
)
from mahjong_rules.formula.fans import WinBy as FormulaWinBy
from mahjong_rules.formula.scoring import (
    FanTerm,
    FormulaOptions,
    FormulaWinFact,
    formula_escape_instruction,
    formula_win_instructions,
)
from mahjong_rules.settlement import (
    SEAT_COUNT,
    EscapeFact,
    GameFact,
    HandFacts,
    Instruction,
    KongFact,
    KongKind,
    SelfDrawBonus,
    SettlementOptions,
    WallExhaustedFact,
    WinBy,
    WinFact,
    Winner,
)

from mahjong_scoring.formula_wins import FanLine, score_formula_win

SUITED_TILE_KIND_COUNT: Final = 27
WAITING_HAND_TILE_COUNT: Final = 13
NO_SEAT: Final = -1
PLAYER_ACCOUNT_PREFIX: Final = "player:"
END_REASONS_WITH_CHECKS: Final = frozenset({"wall_exhausted", "escapes"})
FIXED_VALUE_FANS: Final = frozenset({"heavenly", "earthly"})
# Events of one game: a 108-tile wall gives at most a few hundred; far more is a broken stream.
GAME_EVENTS_MAX: Final = 5_000

_KONG_KINDS: Final = {
    common_pb2.KONG_EXPOSURE_EXPOSED: KongKind.EXPOSED,
    common_pb2.KONG_EXPOSURE_ADDED: KongKind.ADDED,
    common_pb2.KONG_EXPOSURE_CONCEALED: KongKind.CONCEALED,
}
_WIN_BYS: Final = {
    common_pb2.WIN_BY_SELF_DRAW: WinBy.SELF_DRAW,
    common_pb2.WIN_BY_DISCARD: WinBy.DISCARD,
    common_pb2.WIN_BY_ROB_KONG: WinBy.ROB_KONG,
}
# Events that do not close an open claim window (the wins on one discard keep collecting).
_WINDOW_EVENTS: Final = frozenset({"claim_passed", "turn_timed_out", "kong_robbed"})


class GameFactsError(ValueError):
    """A table event contradicts what scoring knows of the game (a broken or reordered stream)."""


def fan_lines(fans: Sequence[Fan]) -> tuple[FanLine, ...]:
    """Sichuan fans (multipliers, each counted once) as fan lines."""
    return tuple(FanLine(fan.id, fan.name, fan.multiplier) for fan in fans)


@dataclass(frozen=True)
class ScoredFans:
    """The product and fans behind one payee's points (a winner's hand, a ready player's wait)."""

    multiplier: int
    fans: tuple[FanLine, ...]


@dataclass(frozen=True)
class GameOpened:
    """The game opened: its room, settlement options (None when scoring does not settle the
    variant, i.e. formula) and the account of each seat ("player:<id>")."""

    source: str
    table_id: str
    room_id: str
    options: SettlementOptions | None
    accounts: tuple[str, ...]
    formula: FormulaOptions | None = None
    """Set for a formula room (RULES.md 2.3): its wins and escapes settle by these options."""
    wildcard: Tile | None = None
    """Formula: the wildcard (财神) turned up at the opening (RULES.md 2.1)."""


@dataclass(frozen=True)
class FactStep:
    """A fact for the settlement fold, with the fans behind each payee seat's points."""

    fact: GameFact
    fans_by_seat: tuple[tuple[int, ScoredFans], ...] = ()

    def fans_of(self, seat: int) -> ScoredFans | None:
        """The fans behind `seat`'s points in this fact, if any."""
        return next((fans for payee, fans in self.fans_by_seat if payee == seat), None)


@dataclass(frozen=True)
class GameOver:
    """The game ended (`GameEnded`): the rake and the totals follow."""

    source: str
    reason: str


@dataclass(frozen=True)
class Notice:
    """A discrepancy between the table's event and scoring's own view; settlement went on."""

    source: str
    message: str


@dataclass(frozen=True)
class InstructionsStep:
    """Formula (RULES.md 2.3): instructions in points already computed by
    `mahjong_rules.formula.scoring` (a win after its bird, or an escape), with the winner's fans."""

    instructions: tuple[Instruction, ...]
    fans_by_seat: tuple[tuple[int, ScoredFans], ...] = ()

    def fans_of(self, seat: int) -> ScoredFans | None:
        """The fans behind `seat`'s points, if any."""
        return next((fans for payee, fans in self.fans_by_seat if payee == seat), None)


@dataclass(frozen=True)
class FormulaPendingWin:
    """A formula win waiting for its bird (`BirdRevealed` follows `PlayerWon`, RULES.md 2.3)."""

    source: str
    winner: int
    win_by: FormulaWinBy
    payer: int | None
    total_fan: int
    fans: ScoredFans


Step: TypeAlias = GameOpened | FactStep | InstructionsStep | GameOver | Notice


@dataclass(frozen=True)
class PendingAddedKong:
    """An added kong declared but not yet standing (its rob window is open)."""

    source: str
    seat: int
    tile: Tile


@dataclass(frozen=True)
class PendingWins:
    """Wins collected on one discard or one robbed kong while the claim window is open."""

    source: str
    win_by: WinBy
    payer: int
    tile: str
    after_kong: str | None
    winners: tuple[Winner, ...]
    fans_by_seat: tuple[tuple[int, ScoredFans], ...]


@dataclass(frozen=True)
class LastDiscard:
    """The latest discard, and the discarder's kong that came right before it (for 杠上炮)."""

    seat: int
    tile: str
    kong_source: str | None


_Value = TypeVar("_Value")

_EMPTY_HAND: Final[tuple[int, ...]] = (0,) * SUITED_TILE_KIND_COUNT


@dataclass(frozen=True)
class GameFactsState:
    """What scoring remembers of one game's table events. A pure value; evolve with
    `apply_table_event`."""

    opened: GameOpened | None = None
    dealer_seat: int = 0
    concealed: tuple[tuple[int, ...], ...] = (_EMPTY_HAND,) * SEAT_COUNT
    melds: tuple[tuple[Meld, ...], ...] = ((),) * SEAT_COUNT
    missing_suits: tuple[Suit | None, ...] = (None,) * SEAT_COUNT
    won: frozenset[int] = frozenset()
    left: frozenset[int] = frozenset()
    pending_added_kong: PendingAddedKong | None = None
    settled_added_kongs: frozenset[tuple[int, Tile]] = frozenset()
    kong_before_discard: tuple[str | None, ...] = (None,) * SEAT_COUNT
    last_discard: LastDiscard | None = None
    pending_wins: PendingWins | None = None
    formula_win: FormulaPendingWin | None = None
    flowers: tuple[int, ...] = (0,) * SEAT_COUNT
    """Formula: flowers each seat has set aside (RULES.md 2.1), 1 fan each once it wins (2.2)."""
    checked: bool = False
    over: bool = False
    applied_event_ids: frozenset[str] = frozenset()

    @property
    def settles(self) -> bool:
        """True once a game of a variant scoring settles (Sichuan Bloody) has opened."""
        return self.opened is not None and self.opened.options is not None

    def in_game(self, seat: int) -> bool:
        """Not yet won and still at the table."""
        return seat not in self.won and seat not in self.left

    def hand_tiles(self, seat: int) -> list[Tile]:
        """The seat's concealed tiles as a list, in tile order."""
        return [tile for tile, count in enumerate(self.concealed[seat]) for _ in range(count)]


def new_game_facts() -> GameFactsState:
    """The state before a game's first event."""
    return GameFactsState()


def apply_table_event(
    state: GameFactsState, envelope: envelope_pb2.Envelope
) -> tuple[GameFactsState, tuple[Step, ...]]:
    """Fold one table event: the new state and the steps it causes, in order.

    An event id seen before changes nothing (duplicate deliveries and re-sends are harmless).
    Raises `GameFactsError` for an event that contradicts the game so far.
    """
    if envelope.event_id in state.applied_event_ids:
        return state, ()
    if len(state.applied_event_ids) >= GAME_EVENTS_MAX:
        raise GameFactsError(f"table {envelope.stream_id} has more than {GAME_EVENTS_MAX} events")
    payload_name = envelope.WhichOneof("payload")
    if payload_name is None:
        raise GameFactsError(f"event {envelope.event_id} has no payload")
    steps: list[Step] = []
    if payload_name == "table_opened":
        state = _table_opened(state, envelope, steps)
    elif state.opened is None:
        raise GameFactsError(f"{payload_name} of table {envelope.stream_id} arrived before TableOpened")
    elif state.settles and not state.over and state.opened.formula is not None:
        state = _formula_event(state, envelope, payload_name, steps)
    elif state.settles and not state.over:
        state = _game_event(state, envelope, payload_name, steps)
    return replace(state, applied_event_ids=state.applied_event_ids | {envelope.event_id}), tuple(steps)


def apply_table_events(
    state: GameFactsState, envelopes: Sequence[envelope_pb2.Envelope]
) -> tuple[GameFactsState, tuple[Step, ...]]:
    """Fold several table events in order: the final state and all their steps."""
    steps: list[Step] = []
    for envelope in envelopes:
        state, new_steps = apply_table_event(state, envelope)
        steps.extend(new_steps)
    return state, tuple(steps)


# ------------------------------------------------------------------------------- the opening


def settlement_options(room_rules: rooms_pb2.RoomRules) -> SettlementOptions | None:
    """The settlement options of a room's rules snapshot; None for a variant scoring does not settle.

    Proto3 cannot tell an unset number from 0, so every option is taken as recorded, except an
    empty `self_draw_bonus`, which means the default "double" (an empty string is no option).
    """
    if room_rules.variant == common_pb2.VARIANT_FORMULA:
        formula = formula_options(room_rules)
        return None if formula is None else formula.settlement_options()
    try:
        return SettlementOptions(
            coefficient=room_rules.coefficient,
            rake_beans=room_rules.rake_beans,
            cap_points=room_rules.cap_points,
            self_draw_bonus=SelfDrawBonus(room_rules.self_draw_bonus or SelfDrawBonus.DOUBLE),
            flower_pig_points=room_rules.flower_pig_points,
            escape_cap_points=room_rules.escape_cap_points,
            escape_correction=room_rules.escape_correction,
            escape_penalty_floor=room_rules.escape_penalty_floor,
            escape_compensation_floor=room_rules.escape_compensation_floor,
        )
    except ValueError as error:
        raise GameFactsError(f"the room rules cannot be settled: {error}") from error


def formula_options(room_rules: rooms_pb2.RoomRules) -> FormulaOptions | None:
    """The formula settlement options (RULES.md 2.3) of a formula room's rules snapshot."""
    if room_rules.variant != common_pb2.VARIANT_FORMULA:
        return None
    try:
        return FormulaOptions(
            coefficient=room_rules.coefficient,
            rake_beans=room_rules.rake_beans,
            fan_term=FanTerm(room_rules.fan_term or FanTerm.FAN),
            min_fan=room_rules.min_fan,
            no_wildcard_fan=room_rules.no_wildcard_fan,
            escape_penalty_points=room_rules.escape_penalty_points,
            escape_compensation_points=room_rules.escape_compensation_points,
        )
    except ValueError as error:
        raise GameFactsError(f"the formula room rules cannot be settled: {error}") from error


def _table_opened(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    event = envelope.table_opened
    if state.opened is not None:
        raise GameFactsError(f"table {envelope.stream_id} opened twice")
    if event.table_id != envelope.stream_id:
        raise GameFactsError(f"TableOpened names table {event.table_id!r} on stream {envelope.stream_id!r}")
    accounts = [""] * SEAT_COUNT
    for seat_assignment in event.seats:
        _check_seat(seat_assignment.seat, "seat assignment")
        if not seat_assignment.player_id:
            raise GameFactsError(f"seat {seat_assignment.seat} has no player id")
        accounts[seat_assignment.seat] = PLAYER_ACCOUNT_PREFIX + seat_assignment.player_id
    if not all(accounts):
        raise GameFactsError(f"TableOpened must seat {SEAT_COUNT} players, got {len(event.seats)}")
    _check_seat(event.dealer_seat, "dealer")
    opened = GameOpened(
        source=envelope.event_id,
        table_id=event.table_id,
        room_id=event.room_id,
        options=settlement_options(event.rules),
        accounts=tuple(accounts),
        formula=formula_options(event.rules),
        wildcard=_formula_tile(event.wildcard) if event.wildcard else None,
    )
    steps.append(opened)
    return replace(state, opened=opened, dealer_seat=event.dealer_seat)


# ------------------------------------------------------------------------------ during play


def _game_event(
    state: GameFactsState, envelope: envelope_pb2.Envelope, payload_name: str, steps: list[Step]
) -> GameFactsState:
    source = envelope.event_id
    if state.pending_wins is not None and not _continues_window(state.pending_wins, envelope, payload_name):
        state = _flush_wins(state, steps)
    if state.pending_added_kong is not None:
        state = _resolve_added_kong(state, envelope, payload_name, steps)
    if payload_name == "hands_dealt":
        return _hands_dealt(state, envelope.hands_dealt)
    if payload_name == "tiles_exchanged":
        return _tiles_exchanged(state, envelope.tiles_exchanged)
    if payload_name == "missing_suits_declared":
        return _missing_suits_declared(state, envelope.missing_suits_declared)
    if payload_name == "tile_drawn":
        return _tile_drawn(state, envelope.tile_drawn)
    if payload_name == "tile_discarded":
        return _tile_discarded(state, envelope.tile_discarded)
    if payload_name == "pong_claimed":
        return _pong_claimed(state, envelope.pong_claimed)
    if payload_name == "kong_declared":
        return _kong_declared(state, source, envelope.kong_declared, steps)
    if payload_name == "kong_robbed":
        return _kong_robbed(state, envelope.kong_robbed)
    if payload_name == "player_won":
        return _player_won(state, source, envelope.player_won, steps)
    if payload_name == "player_left":
        return _player_left(state, source, envelope.player_left, steps)
    if payload_name == "wall_exhausted":
        return _checks(state, source, steps)
    if payload_name == "game_ended":
        return _game_ended(state, source, envelope.game_ended, steps)
    # ExchangePicked, MissingSuitChosen, ClaimPassed, TurnTimedOut: nothing to settle.
    return state


def _formula_event(
    state: GameFactsState, envelope: envelope_pb2.Envelope, payload_name: str, steps: list[Step]
) -> GameFactsState:
    """A formula hand (RULES.md 2.3): the win is paid once its bird is known; an escape pays the
    escape penalty and compensations (it ends the hand); the end brings the rake. A drawn hand pays
    nothing but the rake."""
    opened = state.opened
    assert opened is not None and opened.formula is not None
    source = envelope.event_id
    if payload_name == "player_won":
        event = envelope.player_won
        _check_seat(event.seat, "winner")
        win_by = FormulaWinBy(_WIN_BYS[event.win_by].value) if event.win_by in _WIN_BYS else None
        if win_by is None:
            raise GameFactsError(f"PlayerWon {source} does not say how it was won")
        payer = None if win_by is FormulaWinBy.SELF_DRAW else event.from_seat
        score = score_formula_win(
            event,
            win_by,
            opened.formula,
            wildcard=opened.wildcard,
            dealer_seat=state.dealer_seat,
            flowers=state.flowers[event.seat],
        )
        if score.notice:
            steps.append(Notice(source, score.notice))
        fans = ScoredFans(score.total_fan, score.fans)
        pending = FormulaPendingWin(source, event.seat, win_by, payer, score.total_fan, fans)
        return replace(state, formula_win=pending, won=state.won | {event.seat})
    if payload_name == "flower_replaced":
        seat = envelope.flower_replaced.seat
        _check_seat(seat, "flower holder")
        return replace(state, flowers=_with(state.flowers, seat, state.flowers[seat] + 1))
    if payload_name == "bird_revealed":
        win = state.formula_win
        if win is None:
            raise GameFactsError(f"BirdRevealed {source} without a win before it")
        fact = FormulaWinFact(
            source=win.source,
            winner=win.winner,
            win_by=win.win_by,
            total_fan=win.total_fan,
            dealer=state.dealer_seat,
            bird=_formula_tile(envelope.bird_revealed.tile),
            payer=win.payer,
        )
        instructions = formula_win_instructions(fact, opened.formula)
        steps.append(InstructionsStep(instructions, ((win.winner, win.fans),)))
        return replace(state, formula_win=None)
    if payload_name == "player_left":
        seat = envelope.player_left.seat
        _check_seat(seat, "escapee")
        escape = formula_escape_instruction(source, seat, opened.formula)
        if escape is not None and seat not in state.won:
            steps.append(InstructionsStep((escape,)))
        return replace(state, left=state.left | {seat})
    if payload_name == "game_ended":
        steps.append(GameOver(source, envelope.game_ended.reason))
        return replace(state, over=True)
    return state


def _formula_tile(code: str) -> Tile:
    try:
        return parse_tile(code)
    except RulesError as error:
        raise GameFactsError(str(error)) from error


def _continues_window(pending: PendingWins, envelope: envelope_pb2.Envelope, payload_name: str) -> bool:
    if payload_name in _WINDOW_EVENTS:
        return True
    if payload_name != "player_won":
        return False
    event = envelope.player_won
    return (
        _WIN_BYS.get(event.win_by) == pending.win_by
        and event.from_seat == pending.payer
        and event.win_tile == pending.tile
    )


def _hands_dealt(state: GameFactsState, event: table_events_pb2.HandsDealt) -> GameFactsState:
    concealed = list(state.concealed)
    for hand in event.hands:
        _check_seat(hand.seat, "dealt hand")
        concealed[hand.seat] = _counts(_tiles(hand.tiles))
    return replace(state, concealed=tuple(concealed))


def _tiles_exchanged(state: GameFactsState, event: table_events_pb2.TilesExchanged) -> GameFactsState:
    for transfer in event.transfers:
        tiles = _tiles(transfer.tiles)
        state = _remove_tiles(state, transfer.from_seat, tiles, "exchange three")
        state = _add_tiles(state, transfer.to_seat, tiles)
    return state


def _missing_suits_declared(
    state: GameFactsState, event: table_events_pb2.MissingSuitsDeclared
) -> GameFactsState:
    if len(event.suits) != SEAT_COUNT or any(suit not in SUITS for suit in event.suits):
        raise GameFactsError(f"missing suits must be one of m, p, s per seat, got {list(event.suits)}")
    suits: tuple[Suit | None, ...] = tuple(_suit(suit) for suit in event.suits)
    return replace(state, missing_suits=suits)


def _tile_drawn(state: GameFactsState, event: table_events_pb2.TileDrawn) -> GameFactsState:
    _check_seat(event.seat, "drawer")
    state = _add_tiles(state, event.seat, [_tile(event.tile)])
    if not event.from_tail:
        # A normal draw: the seat's last kong is no longer "right before" its next discard.
        state = replace(state, kong_before_discard=_with(state.kong_before_discard, event.seat, None))
    return state


def _tile_discarded(state: GameFactsState, event: table_events_pb2.TileDiscarded) -> GameFactsState:
    _check_seat(event.seat, "discarder")
    state = _remove_tiles(state, event.seat, [_tile(event.tile)], "discard")
    last_discard = LastDiscard(event.seat, event.tile, state.kong_before_discard[event.seat])
    return replace(
        state,
        last_discard=last_discard,
        kong_before_discard=_with(state.kong_before_discard, event.seat, None),
    )


def _pong_claimed(state: GameFactsState, event: table_events_pb2.PongClaimed) -> GameFactsState:
    _check_seat(event.seat, "pong claimant")
    tile = _tile(event.tile)
    state = _remove_tiles(state, event.seat, [tile, tile], "pong")
    melds = _with(state.melds, event.seat, (*state.melds[event.seat], Meld("pong", tile)))
    return replace(state, melds=melds, kong_before_discard=_with(state.kong_before_discard, event.seat, None))


def _kong_declared(
    state: GameFactsState, source: str, event: table_events_pb2.KongDeclared, steps: list[Step]
) -> GameFactsState:
    _check_seat(event.seat, "kong declarer")
    kind = _KONG_KINDS.get(event.exposure)
    if kind is None:
        raise GameFactsError(f"KongDeclared {source} has no exposure")
    tile = _tile(event.tile)
    seat_melds = state.melds[event.seat]
    if kind is KongKind.ADDED:
        if Meld("pong", tile) not in seat_melds:
            raise GameFactsError(f"seat {event.seat} adds {event.tile} to a pong it does not have")
        state = _remove_tiles(state, event.seat, [tile], "added kong")
        new_melds = tuple(
            Meld("kong", tile, "added") if meld == Meld("pong", tile) else meld for meld in seat_melds
        )
        state = replace(state, melds=_with(state.melds, event.seat, new_melds))
        # RULES.md 1.5: it may still be robbed; it is settled once it stands.
        return replace(state, pending_added_kong=PendingAddedKong(source, event.seat, tile))
    copies = 3 if kind is KongKind.EXPOSED else 4
    state = _remove_tiles(state, event.seat, [tile] * copies, f"{kind} kong")
    new_meld = Meld("kong", tile, "exposed" if kind is KongKind.EXPOSED else "concealed")
    state = replace(state, melds=_with(state.melds, event.seat, (*seat_melds, new_meld)))
    discarder = event.from_seat if kind is KongKind.EXPOSED else None
    if discarder is not None:
        _check_seat(discarder, "konged discarder")
    steps.append(FactStep(KongFact(source=source, declarer=event.seat, kind=kind, discarder=discarder)))
    return replace(state, kong_before_discard=_with(state.kong_before_discard, event.seat, source))


def _resolve_added_kong(
    state: GameFactsState, envelope: envelope_pb2.Envelope, payload_name: str, steps: list[Step]
) -> GameFactsState:
    """Settle the pending added kong once it stands, or drop it when it is void (module docstring)."""
    pending = state.pending_added_kong
    assert pending is not None
    seat = pending.seat
    stands = (
        (payload_name == "tile_drawn" and envelope.tile_drawn.seat == seat)
        or (payload_name == "tile_discarded" and envelope.tile_discarded.seat == seat)
        or (payload_name == "kong_declared" and envelope.kong_declared.seat == seat)
        or (
            payload_name == "player_won"
            and envelope.player_won.seat == seat
            and envelope.player_won.win_by == common_pb2.WIN_BY_SELF_DRAW
        )
    )
    robbed = (payload_name == "kong_robbed" and envelope.kong_robbed.kong_seat == seat) or (
        payload_name == "player_won"
        and envelope.player_won.win_by == common_pb2.WIN_BY_ROB_KONG
        and envelope.player_won.from_seat == seat
    )
    ended = payload_name in ("game_ended", "wall_exhausted") or (
        payload_name == "player_left" and envelope.player_left.seat == seat
    )
    if stands:
        steps.append(FactStep(KongFact(source=pending.source, declarer=seat, kind=KongKind.ADDED)))
        return replace(
            state,
            pending_added_kong=None,
            settled_added_kongs=state.settled_added_kongs | {(seat, pending.tile)},
            kong_before_discard=_with(state.kong_before_discard, seat, pending.source),
        )
    if robbed:
        return _void_added_kong(state)
    if ended:
        return replace(state, pending_added_kong=None)
    return state


def _void_added_kong(state: GameFactsState) -> GameFactsState:
    """RULES.md 1.5: a robbed kong is void; the declarer keeps the pong, the tile went to the robbers."""
    pending = state.pending_added_kong
    assert pending is not None
    melds = tuple(
        Meld("pong", pending.tile) if meld == Meld("kong", pending.tile, "added") else meld
        for meld in state.melds[pending.seat]
    )
    return replace(state, pending_added_kong=None, melds=_with(state.melds, pending.seat, melds))


def _kong_robbed(state: GameFactsState, event: table_events_pb2.KongRobbed) -> GameFactsState:
    # A pending kong of this seat was voided before this event (`_resolve_added_kong`).
    if (event.kong_seat, _tile(event.tile)) in state.settled_added_kongs:
        raise GameFactsError(
            f"the added kong of {event.tile} by seat {event.kong_seat} was robbed after it stood "
            "(its replacement draw); scoring settles an added kong at that draw"
        )
    return state


def _player_won(
    state: GameFactsState, source: str, event: table_events_pb2.PlayerWon, steps: list[Step]
) -> GameFactsState:
    _check_seat(event.seat, "winner")
    win_by = _WIN_BYS.get(event.win_by)
    if win_by is None:
        raise GameFactsError(f"PlayerWon {source} does not say how it was won")
    if not state.in_game(event.seat):
        raise GameFactsError(f"seat {event.seat} won but is out of the game")
    scored = _score_win(state, source, event, win_by, steps)
    # RULES.md 1.9a.5: 天胡/地胡 are fixed-value hands, so add_one gives them no extra point.
    fixed_value = any(fan.id in FIXED_VALUE_FANS for fan in scored.fans)
    winner = Winner(event.seat, scored.multiplier, fixed_value)
    state = replace(state, won=state.won | {event.seat})
    if win_by is WinBy.SELF_DRAW:
        fact = WinFact(source=source, win_by=win_by, winners=(winner,))
        steps.append(FactStep(fact, ((event.seat, scored),)))
        return state
    _check_seat(event.from_seat, "payer of the win")
    if win_by is WinBy.ROB_KONG and (event.from_seat, _tile(event.win_tile)) in state.settled_added_kongs:
        raise GameFactsError(f"seat {event.seat} robbed a kong of {event.win_tile} that already stood")
    pending = state.pending_wins
    if pending is None:
        after_kong = _after_kong_source(state, source, event, win_by, steps)
        pending = PendingWins(source, win_by, event.from_seat, event.win_tile, after_kong, (), ())
    pending = replace(
        pending,
        winners=(*pending.winners, winner),
        fans_by_seat=(*pending.fans_by_seat, (event.seat, scored)),
    )
    return replace(state, pending_wins=pending)


def _after_kong_source(
    state: GameFactsState, source: str, event: table_events_pb2.PlayerWon, win_by: WinBy, steps: list[Step]
) -> str | None:
    """The discarder's kong behind a 杠上炮 discard win, for call transfer (RULES.md 1.5)."""
    if win_by is not WinBy.DISCARD:
        return None
    last = state.last_discard
    kong_source = last.kong_source if last is not None and last.seat == event.from_seat else None
    if event.after_kong and kong_source is None:
        steps.append(Notice(source, "the table says the discard came right after a kong; scoring saw none"))
    if not event.after_kong and kong_source is not None:
        steps.append(Notice(source, "scoring saw a kong right before this discard; the table says none"))
        return None
    return kong_source


def _flush_wins(state: GameFactsState, steps: list[Step]) -> GameFactsState:
    pending = state.pending_wins
    assert pending is not None
    fact = WinFact(
        source=pending.source,
        win_by=pending.win_by,
        winners=pending.winners,
        payer=pending.payer,
        after_kong=pending.after_kong,
    )
    steps.append(FactStep(fact, pending.fans_by_seat))
    return replace(state, pending_wins=None)


def _score_win(
    state: GameFactsState, source: str, event: table_events_pb2.PlayerWon, win_by: WinBy, steps: list[Step]
) -> ScoredFans:
    """The win's multiplier and fans from the rules library (scoring decides how much, ARCHITECTURE).

    The hand is the one the table revealed in the event. Should the library disagree with the
    table, the library's figure is used and a `Notice` says so; should it find no win at all, the
    table's figures are used (the win happened; the table is the judge of who may win).
    """
    options = state.opened.options if state.opened is not None else None
    assert options is not None
    from_table = ScoredFans(
        event.multiplier, tuple(FanLine(fan.id, fan.name, fan.multiplier) for fan in event.fans)
    )
    try:
        evaluation = evaluate_win(
            _tiles(event.concealed),
            [_meld(meld) for meld in event.melds],
            _tile(event.win_tile),
            state.missing_suits[event.seat],
            WinContext(
                win_by=win_by.value,
                after_kong=event.after_kong,
                last_tile=event.last_tile,
                first_turn=event.first_turn,
                dealer=event.seat == state.dealer_seat,
                self_draw_bonus=options.self_draw_bonus.value,
                cap_points=options.cap_points,
            ),
        )
    except RulesError as error:
        steps.append(Notice(source, f"the rules library cannot read the winning hand: {error}"))
        return from_table
    if evaluation is None:
        steps.append(
            Notice(source, "the rules library finds no win in this hand; the table's figures are used")
        )
        return from_table
    if evaluation.multiplier != event.multiplier:
        steps.append(
            Notice(
                source, f"the table scored ×{event.multiplier}, the rules library ×{evaluation.multiplier}"
            )
        )
    return ScoredFans(evaluation.multiplier, fan_lines(evaluation.fans))


def _player_left(
    state: GameFactsState, source: str, event: table_events_pb2.PlayerLeft, steps: list[Step]
) -> GameFactsState:
    _check_seat(event.seat, "escapee")
    if event.seat in state.left:
        raise GameFactsError(f"seat {event.seat} left twice")
    hands, fans = _hand_facts_now(state)
    steps.append(FactStep(EscapeFact(source=source, seat=event.seat, hands=hands), fans))
    return replace(state, left=state.left | {event.seat})


def _checks(state: GameFactsState, source: str, steps: list[Step]) -> GameFactsState:
    """RULES.md 1.8 checks (wall exhausted, or too few players left after an escape, 1.10)."""
    if state.checked or len(state.won) >= 3:
        return state
    hands, fans = _hand_facts_now(state)
    steps.append(FactStep(WallExhaustedFact(source=source, hands=hands), fans))
    return replace(state, checked=True)


def _game_ended(
    state: GameFactsState, source: str, event: table_events_pb2.GameEnded, steps: list[Step]
) -> GameFactsState:
    if event.reason in END_REASONS_WITH_CHECKS:
        state = _checks(state, source, steps)
    for hand in event.hands:
        if 0 <= hand.seat < SEAT_COUNT and state.in_game(hand.seat):
            revealed = _counts(_tiles(hand.concealed))
            if revealed != state.concealed[hand.seat]:
                steps.append(Notice(source, f"seat {hand.seat}'s revealed hand differs from scoring's view"))
    steps.append(GameOver(source, event.reason))
    return replace(state, over=True)


# ----------------------------------------------------------------------------- hand facts


def _hand_facts_now(
    state: GameFactsState,
) -> tuple[tuple[HandFacts, ...], tuple[tuple[int, ScoredFans], ...]]:
    """Every seat's hand as the checks see it now (RULES.md 1.8, 1.10), and each ready seat's best wait."""
    hands: list[HandFacts] = []
    fans: list[tuple[int, ScoredFans]] = []
    for seat in range(SEAT_COUNT):
        if not state.in_game(seat):
            hands.append(HandFacts())
            continue
        facts, best_wait = hand_facts(state.hand_tiles(seat), state.melds[seat], state.missing_suits[seat])
        hands.append(facts)
        if best_wait is not None:
            fans.append((seat, best_wait))
    return tuple(hands), tuple(fans)


def hand_facts(
    concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None
) -> tuple[HandFacts, ScoredFans | None]:
    """Flower pig, ready and highest wait multiplier of one hand (RULES.md 1.7, 1.8), with that wait's fans.

    A waiting hand (13 tiles counting melds) is judged as it is. A hand holding one tile more (the
    player was about to discard when the game was judged, e.g. at an escape) is judged after its
    best discard: scoring gives the player the benefit of the discard they would make. Any other
    size (before the deal) is neither ready nor judged a flower pig.
    """
    waiting_count = WAITING_HAND_TILE_COUNT - 3 * len(melds)
    if len(concealed) == waiting_count:
        return _waiting_hand_facts(concealed, melds, missing_suit)
    if len(concealed) != waiting_count + 1:
        return HandFacts(), None
    best: tuple[HandFacts, ScoredFans | None] | None = None
    for discard in sorted(set(concealed)):
        rest = list(concealed)
        rest.remove(discard)
        candidate = _waiting_hand_facts(rest, melds, missing_suit)
        if best is None or _rank(candidate[0]) > _rank(best[0]):
            best = candidate
    assert best is not None
    return best


def _rank(facts: HandFacts) -> tuple[bool, bool, int]:
    return (not facts.holds_three_suits, facts.ready, facts.max_wait_multiplier)


def _waiting_hand_facts(
    concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None
) -> tuple[HandFacts, ScoredFans | None]:
    if holds_three_suits(concealed, melds):
        return HandFacts(holds_three_suits=True), None
    waits = find_waits(concealed, melds, missing_suit)
    if not waits.ready:
        return HandFacts(), None
    best_wait = max(waits.waits, key=lambda wait: wait.multiplier)
    facts = HandFacts(ready=True, max_wait_multiplier=best_wait.multiplier)
    return facts, ScoredFans(best_wait.multiplier, fan_lines(best_wait.fans))


# -------------------------------------------------------------------------------- helpers


def _check_seat(seat: int, what: str) -> None:
    if not 0 <= seat < SEAT_COUNT:
        raise GameFactsError(f"{what}: seat {seat} is not one of 0..{SEAT_COUNT - 1}")


def _tile(code: str) -> Tile:
    try:
        tile = parse_tile(code)
    except RulesError as error:
        raise GameFactsError(str(error)) from error
    if tile >= SUITED_TILE_KIND_COUNT:
        raise GameFactsError(f"tile {code!r} is not a Sichuan Bloody tile")
    return tile


def _tiles(codes: Sequence[str]) -> list[Tile]:
    return [_tile(code) for code in codes]


def _suit(code: str) -> Suit:
    for suit in SUITS:
        if suit == code:
            return suit
    raise GameFactsError(f"{code!r} is not a suit (m, p or s)")


def _meld(meld: common_pb2.Meld) -> Meld:
    tile = _tile(meld.tile)
    if meld.kind == "pong":
        return Meld("pong", tile)
    if meld.kind == "kong":
        kind = _KONG_KINDS.get(meld.exposure)
        if kind is None:
            raise GameFactsError(f"the kong of {meld.tile} has no exposure")
        return Meld("kong", tile, kind.value)
    raise GameFactsError(f"meld kind {meld.kind!r} is not pong or kong")


def _counts(tiles: Sequence[Tile]) -> tuple[int, ...]:
    counts = [0] * SUITED_TILE_KIND_COUNT
    for tile in tiles:
        counts[tile] += 1
    return tuple(counts)


def _add_tiles(state: GameFactsState, seat: int, tiles: Sequence[Tile]) -> GameFactsState:
    _check_seat(seat, "receiver of tiles")
    counts = list(state.concealed[seat])
    for tile in tiles:
        counts[tile] += 1
        if counts[tile] > 4:
            raise GameFactsError(f"seat {seat} would hold a fifth {tile_code(tile)}")
    return replace(state, concealed=_with(state.concealed, seat, tuple(counts)))


def _remove_tiles(state: GameFactsState, seat: int, tiles: Sequence[Tile], what: str) -> GameFactsState:
    _check_seat(seat, f"seat giving tiles for {what}")
    counts = list(state.concealed[seat])
    for tile in tiles:
        if counts[tile] == 0:
            raise GameFactsError(f"{what}: seat {seat} does not hold {tile_code(tile)}")
        counts[tile] -= 1
    return replace(state, concealed=_with(state.concealed, seat, tuple(counts)))


def _with(values: tuple[_Value, ...], index: int, value: _Value) -> tuple[_Value, ...]:
    return (*values[:index], value, *values[index + 1 :])
