"""Questions the formula aggregate asks of a hand (RULES.md 2.1, 2.2): may it win on this tile
and with how much fan, may it pong, kong or chow. Wins go to `mahjong_rules.formula`.

The wildcard (财神) rules live here: a wildcard tile can be neither claimed by a pong, kong or chow
nor used to make one, and a discarded wildcard is won on only as its face value (the rules library
reads a discarded winning tile as a plain tile).
"""

from __future__ import annotations

from functools import lru_cache

from mahjong_rules.errors import RulesError
from mahjong_rules.formula.fans import FormulaMeld, FormulaWinContext, WinBy
from mahjong_rules.formula.waits import formula_waits
from mahjong_rules.formula.wall import SUITED_TILE_LIMIT, is_flower
from mahjong_rules.formula.wildcards import FormulaEvaluation, evaluate_formula_win, winning_substitutions
from mahjong_rules.seats import seat_wind as rules_seat_wind

from mahjong_table.core.events import EXPOSURE_CONCEALED
from mahjong_table.core.state import Phase
from mahjong_table.formula.state import FormulaPlayer, FormulaTableState

WAITING_TILE_COUNT = 13
HAND_KIND_COUNT = 34
"""Suited and honor tiles: the kinds a winning hand is made of (flowers are set aside)."""


def seat_wind(state: FormulaTableState, seat: int) -> int:
    """RULES.md 2.2: seat winds follow turn order from the dealer (East)."""
    return rules_seat_wind(seat, state.dealer_seat)


def _rules_melds(player: FormulaPlayer) -> list[FormulaMeld]:
    melds = []
    for meld in player.melds:
        if meld.kind == "kong":
            concealed = meld.exposure == EXPOSURE_CONCEALED
            melds.append(FormulaMeld("kong", meld.tile, "concealed" if concealed else "exposed"))
        elif meld.kind == "pong":
            melds.append(FormulaMeld("pong", meld.tile))
        else:
            melds.append(FormulaMeld("chow", meld.tile))
    return melds


def visible_copies(state: FormulaTableState, tile: int) -> int:
    """Copies of `tile` every player can see: discards still on the table, the tiles of exposed
    melds (a concealed kong shows none), and the wildcard indicator turned face up."""
    count = 1 if state.wildcard_indicator == tile else 0
    for player in state.players:
        count += player.discards.count(tile)
        for meld in player.melds:
            if meld.kind != "kong" or meld.exposure != EXPOSURE_CONCEALED:
                count += meld.tiles.count(tile)
    return count


def is_fourth_tile(state: FormulaTableState, win_tile: int, win_by: WinBy) -> bool:
    """和绝张 (RULES.md 2.2): the winning tile is the last copy, three others already visible. A
    discard win's own tile is still among the discards, and a robbed tile still in its added
    kong, so neither is one of the three (the calculator then drops 和绝张 under 抢杠和 itself)."""
    others = visible_copies(state, win_tile) - (0 if win_by is WinBy.SELF_DRAW else 1)
    return others >= 3


def evaluate(
    state: FormulaTableState,
    seat: int,
    concealed: list[int],
    win_tile: int,
    win_by: WinBy,
    *,
    after_kong: bool = False,
    last_tile: bool = False,
) -> FormulaEvaluation | None:
    """The win's evaluation when it is a winning hand that reaches `min_fan` (flowers excluded,
    RULES.md 2.1); else None. `concealed` excludes the winning tile."""
    player = state.players[seat]
    if len(concealed) + 3 * len(player.melds) != WAITING_TILE_COUNT or any(map(is_flower, concealed)):
        return None
    try:
        evaluation = evaluate_formula_win(
            concealed,
            _rules_melds(player),
            win_tile,
            FormulaWinContext(
                win_by=win_by,
                after_kong=after_kong,
                last_tile=last_tile,
                fourth_tile=is_fourth_tile(state, win_tile, win_by),
                seat_wind=seat_wind(state, seat),
            ),
            wildcard=state.wildcard,
            flowers=len(player.flowers),
            min_fan=state.rules.min_fan,
            no_wildcard_fan=state.rules.no_wildcard_fan,
        )
    except RulesError:
        return None
    if evaluation is None or not evaluation.meets_min:
        return None
    return evaluation


def has_winning_shape(player: FormulaPlayer, wildcard: int, claimed: int | None = None) -> bool:
    """Whether the hand, with the `claimed` tile (a discard or a robbed kong's tile, at face value)
    or as it is (a drawn or dealt 14th tile), has a winning shape for some substitution of its
    wildcards: the test the wildcard search starts from (`winning_substitutions`). Asked before
    the fan calculator because most claim checks fail it at a fraction of the calculator's cost."""
    if (
        player.tile_count + 3 * len(player.melds) != WAITING_TILE_COUNT + (claimed is None)
        or player.held_flowers()
    ):
        return False  # not a hand of 14 with the tile: `evaluate` refuses it too
    counts = list(player.concealed[:HAND_KIND_COUNT])
    jokers = counts[wildcard]
    counts[wildcard] = 0
    if claimed is not None:
        counts[claimed] += 1
    return bool(winning_substitutions(counts, jokers, len(player.melds)))


def self_draw_win(state: FormulaTableState, seat: int) -> tuple[FormulaEvaluation, int] | None:
    """The self-draw win open to `seat` on its turn now, if any, and its winning tile.

    After a draw the winning tile is the drawn one. The dealer's first turn has no draw (14 tiles
    dealt, RULES.md 2.1): the dealer may win on them as dealt, and the hand is read with the
    winning tile that scores highest (the lowest such tile on a tie), as a wildcard hand takes
    its best substitution (RULES.md 2.2). After a pong or chow the seat must discard."""
    if state.phase is not Phase.TURN or state.turn_seat != seat or state.turn_after_meld:
        return None
    if not has_winning_shape(state.players[seat], state.wildcard):
        return None
    held = state.players[seat].concealed_tiles()
    candidates = (state.drawn_tile,) if state.drawn_tile is not None else tuple(sorted(set(held)))
    best: tuple[FormulaEvaluation, int] | None = None
    for tile in candidates:
        concealed = list(held)
        concealed.remove(tile)
        evaluation = evaluate(
            state,
            seat,
            concealed,
            tile,
            WinBy.SELF_DRAW,
            after_kong=state.turn_after_kong,
            last_tile=state.non_flower_remaining() == 0,
        )
        if evaluation is not None and (best is None or evaluation.total_fan > best[0].total_fan):
            best = (evaluation, tile)
    return best


def discard_win(state: FormulaTableState, seat: int, tile: int) -> FormulaEvaluation | None:
    """The win `seat` may make on a discard of `tile` (海底捞月 when no wall tile is left)."""
    if not has_winning_shape(state.players[seat], state.wildcard, tile):
        return None
    return evaluate(
        state,
        seat,
        state.players[seat].concealed_tiles(),
        tile,
        WinBy.DISCARD,
        last_tile=state.non_flower_remaining() == 0,
    )


def rob_kong_win(state: FormulaTableState, seat: int, tile: int) -> FormulaEvaluation | None:
    """The win `seat` may make by robbing the added kong of `tile` (抢杠和, RULES.md 2.2)."""
    if not has_winning_shape(state.players[seat], state.wildcard, tile):
        return None
    return evaluate(state, seat, state.players[seat].concealed_tiles(), tile, WinBy.ROB_KONG)


def can_pong(state: FormulaTableState, seat: int, tile: int) -> bool:
    """Two copies held, and the tile is not the wildcard (RULES.md 2.1)."""
    return tile != state.wildcard and state.players[seat].concealed[tile] >= 2


def can_exposed_kong(state: FormulaTableState, seat: int, tile: int) -> bool:
    """Three copies held, not the wildcard, and a replacement tile left in the wall."""
    return (
        tile != state.wildcard
        and state.players[seat].concealed[tile] >= 3
        and state.non_flower_remaining() > 0
    )


def chow_options(state: FormulaTableState, seat: int, tile: int) -> tuple[int, ...]:
    """The lowest tiles of the runs `seat` can chow with `tile` (RULES.md 2.1): suited runs in one
    suit; neither the claimed tile nor the two tiles used may be the wildcard."""
    if tile >= SUITED_TILE_LIMIT or tile == state.wildcard:
        return ()
    concealed = state.players[seat].concealed
    rank = tile % 9
    starts = []
    for start in range(tile - 2, tile + 1):
        if start < tile - rank or start % 9 > 6 or start + 2 > tile - rank + 8:
            continue
        others = [run_tile for run_tile in (start, start + 1, start + 2) if run_tile != tile]
        if all(concealed[other] >= 1 and other != state.wildcard for other in others):
            starts.append(start)
    return tuple(starts)


def kong_options(state: FormulaTableState, seat: int) -> tuple[tuple[int, str], ...]:
    """Concealed and added kongs open to `seat` on its own turn (no wildcard, a replacement left)."""
    if state.phase is not Phase.TURN or state.turn_seat != seat or state.turn_after_meld:
        return ()
    if state.non_flower_remaining() == 0:
        return ()
    player = state.players[seat]
    options: list[tuple[int, str]] = []
    for tile in range(SUITED_TILE_LIMIT + 7):
        if tile == state.wildcard:
            continue
        if player.concealed[tile] == 4:
            options.append((tile, EXPOSURE_CONCEALED))
        elif player.concealed[tile] >= 1 and any(m.kind == "pong" and m.tile == tile for m in player.melds):
            options.append((tile, "added"))
    return tuple(options)


def waiting_tiles(state: FormulaTableState, seat: int) -> tuple[int, ...]:
    """The tiles a discard of which would give `seat` a win reaching the room's minimum (RULES.md
    2.1; the view's waits). Empty unless the seat holds a waiting hand (13 tiles with its melds)."""
    player = state.players[seat]
    if not player.in_game or player.tile_count + 3 * len(player.melds) != WAITING_TILE_COUNT:
        return ()
    if player.held_flowers():
        return ()
    return _winning_discards(
        tuple(player.concealed_tiles()),
        tuple(_rules_melds(player)),
        state.wildcard,
        len(player.flowers),
        state.rules.min_fan,
        state.rules.no_wildcard_fan,
        seat_wind(state, seat),
    )


@lru_cache(maxsize=4096)
def _winning_discards(
    concealed: tuple[int, ...],
    melds: tuple[FormulaMeld, ...],
    wildcard: int,
    flowers: int,
    min_fan: int,
    no_wildcard_fan: int,
    wind: int,
) -> tuple[int, ...]:
    """Memoised: a hand is viewed many times between two of its own moves."""
    try:
        found = formula_waits(
            concealed,
            melds,
            wildcard=wildcard,
            flowers=flowers,
            min_fan=min_fan,
            no_wildcard_fan=no_wildcard_fan,
            seat_wind=wind,
        )
    except RulesError:
        return ()
    return tuple(wait.tile for wait in found.waits if wait.evaluation.meets_min)


def discardable(player: FormulaPlayer) -> tuple[int, ...]:
    """Every distinct concealed tile may be discarded (flowers are set aside before)."""
    return tuple(tile for tile in range(SUITED_TILE_LIMIT + 7) if player.concealed[tile])
