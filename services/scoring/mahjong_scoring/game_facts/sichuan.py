"""The Sichuan Bloody fold (RULES.md 1): one handler per table event, each a pure step from the
state to the next one, appending the `Step`s the event causes.

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

from collections.abc import Callable, Sequence
from typing import Final, TypeAlias

from mahjong.v1 import common_pb2, envelope_pb2
from mahjong_rules import SUITS, Meld, Suit, Tile, tile_code
from mahjong_rules.settlement import (
    SEAT_COUNT,
    EscapeFact,
    KongFact,
    KongKind,
    WallExhaustedFact,
    WinBy,
    WinFact,
    Winner,
)

from mahjong_scoring.game_facts.hands import hand_facts_now
from mahjong_scoring.game_facts.reading import (
    KONG_KINDS,
    WIN_BYS,
    check_seat,
    sichuan_tile,
    sichuan_tiles,
    suit,
    tile_counts,
    with_item,
)
from mahjong_scoring.game_facts.sichuan_wins import score_sichuan_win
from mahjong_scoring.game_facts.state import (
    GameFactsState,
    LastDiscard,
    PendingAddedKong,
    PendingWins,
    evolve,
)
from mahjong_scoring.game_facts.steps import FactStep, GameFactsError, GameOver, Notice, Step

END_REASONS_WITH_CHECKS: Final = frozenset({"wall_exhausted", "escapes"})
FIXED_VALUE_FANS: Final = frozenset({"heavenly", "earthly"})
# Events that do not close an open claim window (the wins on one discard keep collecting).
_WINDOW_EVENTS: Final = frozenset({"claim_passed", "turn_timed_out", "kong_robbed"})

Handler: TypeAlias = Callable[[GameFactsState, envelope_pb2.Envelope, list[Step]], GameFactsState]


def fold_sichuan_event(
    state: GameFactsState, envelope: envelope_pb2.Envelope, payload_name: str, steps: list[Step]
) -> GameFactsState:
    """One event of a Sichuan Bloody game after its opening: first close what it closes (the wins
    collected on a discard, a pending added kong), then its own handler, if it has one."""
    if state.pending_wins is not None and not _continues_window(state.pending_wins, envelope, payload_name):
        state = _flush_wins(state, steps)
    if state.pending_added_kong is not None:
        state = _resolve_added_kong(state, envelope, payload_name, steps)
    handler = HANDLERS.get(payload_name)
    return state if handler is None else handler(state, envelope, steps)


# ------------------------------------------------------------------------------ the handlers


def _hands_dealt(state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]) -> GameFactsState:
    concealed = list(state.concealed)
    for hand in envelope.hands_dealt.hands:
        check_seat(hand.seat, "dealt hand")
        concealed[hand.seat] = tile_counts(sichuan_tiles(hand.tiles))
    return evolve(state, concealed=tuple(concealed))


def _tiles_exchanged(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    for transfer in envelope.tiles_exchanged.transfers:
        tiles = sichuan_tiles(transfer.tiles)
        state = _remove_tiles(state, transfer.from_seat, tiles, "exchange three")
        state = _add_tiles(state, transfer.to_seat, tiles)
    return state


def _missing_suits_declared(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    declared = envelope.missing_suits_declared.suits
    if len(declared) != SEAT_COUNT or any(code not in SUITS for code in declared):
        raise GameFactsError(f"missing suits must be one of m, p, s per seat, got {list(declared)}")
    suits: tuple[Suit | None, ...] = tuple(suit(code) for code in declared)
    return evolve(state, missing_suits=suits)


def _tile_drawn(state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]) -> GameFactsState:
    event = envelope.tile_drawn
    check_seat(event.seat, "drawer")
    concealed = _concealed_with(state, event.seat, [sichuan_tile(event.tile)])
    if event.from_tail:
        return evolve(state, concealed=concealed)
    # A normal draw: the seat's last kong is no longer "right before" its next discard.
    kong_before_discard = with_item(state.kong_before_discard, event.seat, None)
    return evolve(state, concealed=concealed, kong_before_discard=kong_before_discard)


def _tile_discarded(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    event = envelope.tile_discarded
    check_seat(event.seat, "discarder")
    concealed = _concealed_without(state, event.seat, [sichuan_tile(event.tile)], "discard")
    last_discard = LastDiscard(event.seat, event.tile, state.kong_before_discard[event.seat])
    return evolve(
        state,
        concealed=concealed,
        last_discard=last_discard,
        kong_before_discard=with_item(state.kong_before_discard, event.seat, None),
    )


def _pong_claimed(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    event = envelope.pong_claimed
    check_seat(event.seat, "pong claimant")
    tile = sichuan_tile(event.tile)
    state = _remove_tiles(state, event.seat, [tile, tile], "pong")
    melds = with_item(state.melds, event.seat, (*state.melds[event.seat], Meld("pong", tile)))
    return evolve(
        state, melds=melds, kong_before_discard=with_item(state.kong_before_discard, event.seat, None)
    )


def _kong_declared(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    source, event = envelope.event_id, envelope.kong_declared
    check_seat(event.seat, "kong declarer")
    kind = KONG_KINDS.get(event.exposure)
    if kind is None:
        raise GameFactsError(f"KongDeclared {source} has no exposure")
    tile = sichuan_tile(event.tile)
    seat_melds = state.melds[event.seat]
    if kind is KongKind.ADDED:
        if Meld("pong", tile) not in seat_melds:
            raise GameFactsError(f"seat {event.seat} adds {event.tile} to a pong it does not have")
        state = _remove_tiles(state, event.seat, [tile], "added kong")
        new_melds = tuple(
            Meld("kong", tile, "added") if meld == Meld("pong", tile) else meld for meld in seat_melds
        )
        state = evolve(state, melds=with_item(state.melds, event.seat, new_melds))
        # RULES.md 1.5: it may still be robbed; it is settled once it stands.
        return evolve(state, pending_added_kong=PendingAddedKong(source, event.seat, tile))
    copies = 3 if kind is KongKind.EXPOSED else 4
    state = _remove_tiles(state, event.seat, [tile] * copies, f"{kind} kong")
    new_meld = Meld("kong", tile, "exposed" if kind is KongKind.EXPOSED else "concealed")
    state = evolve(state, melds=with_item(state.melds, event.seat, (*seat_melds, new_meld)))
    discarder = event.from_seat if kind is KongKind.EXPOSED else None
    if discarder is not None:
        check_seat(discarder, "konged discarder")
    steps.append(FactStep(KongFact(source=source, declarer=event.seat, kind=kind, discarder=discarder)))
    return evolve(state, kong_before_discard=with_item(state.kong_before_discard, event.seat, source))


def _kong_robbed(state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]) -> GameFactsState:
    # A pending kong of this seat was voided before this event (`_resolve_added_kong`).
    event = envelope.kong_robbed
    if (event.kong_seat, sichuan_tile(event.tile)) in state.settled_added_kongs:
        raise GameFactsError(
            f"the added kong of {event.tile} by seat {event.kong_seat} was robbed after it stood "
            "(its replacement draw); scoring settles an added kong at that draw"
        )
    return state


def _player_won(state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]) -> GameFactsState:
    source, event = envelope.event_id, envelope.player_won
    check_seat(event.seat, "winner")
    win_by = WIN_BYS.get(event.win_by)
    if win_by is None:
        raise GameFactsError(f"PlayerWon {source} does not say how it was won")
    if not state.in_game(event.seat):
        raise GameFactsError(f"seat {event.seat} won but is out of the game")
    assert state.opened is not None
    scored, notice = score_sichuan_win(
        event,
        win_by,
        state.opened.options,
        missing_suit=state.missing_suits[event.seat],
        dealer=event.seat == state.dealer_seat,
    )
    if notice:
        steps.append(Notice(source, notice))
    # RULES.md 1.9a.5: 天胡/地胡 are fixed-value hands, so add_one gives them no extra point.
    fixed_value = any(fan.id in FIXED_VALUE_FANS for fan in scored.fans)
    winner = Winner(event.seat, scored.multiplier, fixed_value)
    state = evolve(state, won=state.won | {event.seat})
    if win_by is WinBy.SELF_DRAW:
        fact = WinFact(source=source, win_by=win_by, winners=(winner,))
        steps.append(FactStep(fact, ((event.seat, scored),)))
        return state
    check_seat(event.from_seat, "payer of the win")
    robbed = (event.from_seat, sichuan_tile(event.win_tile)) if win_by is WinBy.ROB_KONG else None
    if robbed in state.settled_added_kongs:
        raise GameFactsError(f"seat {event.seat} robbed a kong of {event.win_tile} that already stood")
    pending = state.pending_wins
    if pending is None:
        after_kong = _after_kong_source(state, envelope, win_by, steps)
        pending = PendingWins(source, win_by, event.from_seat, event.win_tile, after_kong, (), ())
    pending = evolve(
        pending,
        winners=(*pending.winners, winner),
        fans_by_seat=(*pending.fans_by_seat, (event.seat, scored)),
    )
    return evolve(state, pending_wins=pending)


def _player_left(state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]) -> GameFactsState:
    seat = envelope.player_left.seat
    check_seat(seat, "escapee")
    if seat in state.left:
        raise GameFactsError(f"seat {seat} left twice")
    hands, fans = hand_facts_now(state)
    steps.append(FactStep(EscapeFact(source=envelope.event_id, seat=seat, hands=hands), fans))
    return evolve(state, left=state.left | {seat})


def _wall_exhausted(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    return _checks(state, envelope.event_id, steps)


def _game_ended(state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]) -> GameFactsState:
    source, event = envelope.event_id, envelope.game_ended
    if event.reason in END_REASONS_WITH_CHECKS:
        state = _checks(state, source, steps)
    for hand in event.hands:
        if 0 <= hand.seat < SEAT_COUNT and state.in_game(hand.seat):
            revealed = tile_counts(sichuan_tiles(hand.concealed))
            if revealed != state.concealed[hand.seat]:
                steps.append(Notice(source, f"seat {hand.seat}'s revealed hand differs from scoring's view"))
    steps.append(GameOver(source, event.reason))
    return evolve(state, over=True)


HANDLERS: Final[dict[str, Handler]] = {
    "hands_dealt": _hands_dealt,
    "tiles_exchanged": _tiles_exchanged,
    "missing_suits_declared": _missing_suits_declared,
    "tile_drawn": _tile_drawn,
    "tile_discarded": _tile_discarded,
    "pong_claimed": _pong_claimed,
    "kong_declared": _kong_declared,
    "kong_robbed": _kong_robbed,
    "player_won": _player_won,
    "player_left": _player_left,
    "wall_exhausted": _wall_exhausted,
    "game_ended": _game_ended,
}
"""The handler of each `Envelope` payload (by its oneof name) that changes what Sichuan settles.
The others (exchange picks, missing-suit choices, passes, timeouts) only close a claim window."""


# ------------------------------------------------------------------- claim windows and kongs


def _continues_window(pending: PendingWins, envelope: envelope_pb2.Envelope, payload_name: str) -> bool:
    if payload_name in _WINDOW_EVENTS:
        return True
    if payload_name != "player_won":
        return False
    event = envelope.player_won
    return (
        WIN_BYS.get(event.win_by) == pending.win_by
        and event.from_seat == pending.payer
        and event.win_tile == pending.tile
    )


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
    return evolve(state, pending_wins=None)


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
        return evolve(
            state,
            pending_added_kong=None,
            settled_added_kongs=state.settled_added_kongs | {(seat, pending.tile)},
            kong_before_discard=with_item(state.kong_before_discard, seat, pending.source),
        )
    if robbed:
        return _void_added_kong(state)
    if ended:
        return evolve(state, pending_added_kong=None)
    return state


def _void_added_kong(state: GameFactsState) -> GameFactsState:
    """RULES.md 1.5: a robbed kong is void; the declarer keeps the pong, the tile went to the robbers."""
    pending = state.pending_added_kong
    assert pending is not None
    melds = tuple(
        Meld("pong", pending.tile) if meld == Meld("kong", pending.tile, "added") else meld
        for meld in state.melds[pending.seat]
    )
    return evolve(state, pending_added_kong=None, melds=with_item(state.melds, pending.seat, melds))


def _after_kong_source(
    state: GameFactsState, envelope: envelope_pb2.Envelope, win_by: WinBy, steps: list[Step]
) -> str | None:
    """The discarder's kong behind a 杠上炮 discard win, for call transfer (RULES.md 1.5)."""
    if win_by is not WinBy.DISCARD:
        return None
    source, event = envelope.event_id, envelope.player_won
    last = state.last_discard
    kong_source = last.kong_source if last is not None and last.seat == event.from_seat else None
    if event.after_kong and kong_source is None:
        steps.append(Notice(source, "the table says the discard came right after a kong; scoring saw none"))
    if not event.after_kong and kong_source is not None:
        steps.append(Notice(source, "scoring saw a kong right before this discard; the table says none"))
        return None
    return kong_source


def _checks(state: GameFactsState, source: str, steps: list[Step]) -> GameFactsState:
    """RULES.md 1.8 checks (wall exhausted, or too few players left after an escape, 1.10)."""
    if state.checked or len(state.won) >= 3:
        return state
    hands, fans = hand_facts_now(state)
    steps.append(FactStep(WallExhaustedFact(source=source, hands=hands), fans))
    return evolve(state, checked=True)


# ------------------------------------------------------------------------------- the tiles


def _add_tiles(state: GameFactsState, seat: int, tiles: Sequence[Tile]) -> GameFactsState:
    return evolve(state, concealed=_concealed_with(state, seat, tiles))


def _remove_tiles(state: GameFactsState, seat: int, tiles: Sequence[Tile], what: str) -> GameFactsState:
    return evolve(state, concealed=_concealed_without(state, seat, tiles, what))


# The concealed tiles after a change, for the caller's one `replace` (a draw and a discard, most of
# a game's events, built the state twice: `replace` costs more than the rest of their fold).


def _concealed_with(state: GameFactsState, seat: int, tiles: Sequence[Tile]) -> tuple[tuple[int, ...], ...]:
    check_seat(seat, "receiver of tiles")
    counts = list(state.concealed[seat])
    for tile in tiles:
        counts[tile] += 1
        if counts[tile] > 4:
            raise GameFactsError(f"seat {seat} would hold a fifth {tile_code(tile)}")
    return with_item(state.concealed, seat, tuple(counts))


def _concealed_without(
    state: GameFactsState, seat: int, tiles: Sequence[Tile], what: str
) -> tuple[tuple[int, ...], ...]:
    check_seat(seat, f"seat giving tiles for {what}")
    counts = list(state.concealed[seat])
    for tile in tiles:
        if counts[tile] == 0:
            raise GameFactsError(f"{what}: seat {seat} does not hold {tile_code(tile)}")
        counts[tile] -= 1
    return with_item(state.concealed, seat, tuple(counts))
