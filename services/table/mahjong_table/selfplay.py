"""Players for self-play: a random legal player (for property tests) and a simple greedy one
(for the benchmark and demos). They act only through `legal_actions` and commands, like a client.
"""

from __future__ import annotations

import random
from collections import Counter

from mahjong_rules.formula.wall import SUITED_TILE_LIMIT
from mahjong_rules.tiles import parse_tile

from mahjong_table.core.commands import (
    Chow,
    DeclareMissingSuit,
    Discard,
    ExchangeThree,
    ExpireDeadline,
    Kong,
    Leave,
    Pass,
    Pong,
    TableCommand,
    Win,
)
from mahjong_table.core.state import Phase
from mahjong_table.core.views import (
    ACTION_CHOW,
    ACTION_DECLARE_MISSING_SUIT,
    ACTION_DISCARD,
    ACTION_EXCHANGE_THREE,
    ACTION_KONG,
    ACTION_LEAVE,
    ACTION_PASS,
    ACTION_PONG,
    ACTION_WIN,
    LegalAction,
)
from mahjong_table.formula.decide import waited_on as formula_waited_on
from mahjong_table.formula.state import FormulaTableState
from mahjong_table.formula.views import legal_actions as formula_legal_actions
from mahjong_table.sichuan.decide import waited_on
from mahjong_table.sichuan.rules_adapter import code_of
from mahjong_table.sichuan.state import TableState
from mahjong_table.sichuan.views import legal_actions


def command_for(state: TableState, seat: int, action: LegalAction, generator: random.Random) -> TableCommand:
    """A random command of the kind `action` describes, for `seat`."""
    if action.kind == ACTION_EXCHANGE_THREE:
        suit = generator.choice(action.suits)
        tiles = [tile for tile in action.tiles if tile.endswith(suit)]
        return ExchangeThree(seat, tuple(generator.sample(tiles, 3)))
    if action.kind == ACTION_DECLARE_MISSING_SUIT:
        return DeclareMissingSuit(seat, generator.choice(action.suits))
    if action.kind == ACTION_DISCARD:
        return Discard(seat, generator.choice(action.tiles))
    if action.kind == ACTION_KONG:
        tile = generator.choice(action.tiles)
        return Kong(seat, None if state.phase is Phase.CLAIM else tile)
    if action.kind == ACTION_PONG:
        return Pong(seat)
    if action.kind == ACTION_WIN:
        return Win(seat)
    if action.kind == ACTION_PASS:
        return Pass(seat)
    return Leave(seat, generator.choice(("leave", "disconnected")))


def random_legal_command(
    state: TableState,
    generator: random.Random,
    *,
    timeout_chance: float = 0.05,
    leave_chance: float = 0.003,
    win_chance: float = 0.7,
    greedy_chance: float = 0.0,
) -> TableCommand:
    """Any legal command of any waited-on seat, sometimes a deadline expiry or a leave; an offered
    win is taken with `win_chance`, and with `greedy_chance` the greedy player's move is made
    (random discards rarely make a hand ready, so wins and the end by three wins would be rare)."""
    if generator.random() < timeout_chance:
        return ExpireDeadline()
    if generator.random() < leave_chance:
        leavers = [seat for seat in range(4) if not state.players[seat].left]
        return Leave(generator.choice(leavers), "leave")
    if generator.random() < greedy_chance:
        return greedy_command(state)
    choices = [
        (seat, action)
        for seat in waited_on(state)
        for action in legal_actions(state, seat)
        if action.kind != ACTION_LEAVE
    ]
    if not choices:
        return ExpireDeadline()
    wins = [(seat, action) for seat, action in choices if action.kind == ACTION_WIN]
    if wins and generator.random() < win_chance:
        return Win(generator.choice(wins)[0])
    seat, action = generator.choice(choices)
    return command_for(state, seat, action, generator)


def greedy_command(state: TableState) -> TableCommand:
    """A simple strong-ish player for the first waited-on seat: always win; pong/kong; exchange the
    weakest suit; declare the shortest suit missing; discard the missing suit, then isolated tiles."""
    seat = waited_on(state)[0]
    actions = {action.kind: action for action in legal_actions(state, seat)}
    if ACTION_WIN in actions:
        return Win(seat)
    if ACTION_KONG in actions:
        tile = actions[ACTION_KONG].tiles[0]
        return Kong(seat, None if state.phase is Phase.CLAIM else tile)
    if ACTION_PONG in actions:
        return Pong(seat)
    if ACTION_PASS in actions:
        return Pass(seat)
    if ACTION_EXCHANGE_THREE in actions:
        action = actions[ACTION_EXCHANGE_THREE]
        counts = Counter(tile[1] for tile in action.tiles)
        suit = min(action.suits, key=lambda suit: (counts[suit], suit))
        return ExchangeThree(seat, tuple([tile for tile in action.tiles if tile.endswith(suit)][:3]))
    if ACTION_DECLARE_MISSING_SUIT in actions:
        player = state.players[seat]
        sizes = [sum(player.concealed[suit * 9 : suit * 9 + 9]) for suit in range(3)]
        return DeclareMissingSuit(seat, "mps"[min(range(3), key=lambda suit: (sizes[suit], suit))])
    return Discard(seat, _least_useful(state.players[seat].concealed, actions[ACTION_DISCARD].tiles))


_NEIGHBOURS = {
    code_of(tile): (tile, tuple(tile + step for step in (-2, -1, 1, 2) if 0 <= tile % 9 + step <= 8))
    for tile in range(27)
}
"""Each Sichuan tile code: its tile, and the tiles of the same suit within two ranks."""


def _least_useful(concealed: tuple[int, ...], codes: tuple[str, ...]) -> str:
    """The first of `codes` that helps the hand least: by copies held (3 each) and neighbours held
    (`min` over that usefulness, written out: the greedy player's hottest line)."""
    chosen, lowest = codes[0], 1 << 30
    for code in codes:
        tile, neighbours = _NEIGHBOURS[code]
        usefulness = 3 * concealed[tile]
        for neighbour in neighbours:
            usefulness += concealed[neighbour]
        if usefulness < lowest:
            chosen, lowest = code, usefulness
    return chosen


def formula_greedy_command(state: FormulaTableState) -> TableCommand:
    """The greedy player at a formula table (RULES.md 2): always win; kong, pong, the first chow;
    else discard the tile that helps least (copies, then suited neighbours; never the wildcard)."""
    seat = formula_waited_on(state)[0]
    actions = {action.kind: action for action in formula_legal_actions(state, seat)}
    if ACTION_WIN in actions:
        return Win(seat)
    if ACTION_KONG in actions:
        return Kong(seat, None if state.phase is Phase.CLAIM else actions[ACTION_KONG].tiles[0])
    if ACTION_PONG in actions:
        return Pong(seat)
    if ACTION_CHOW in actions:
        return Chow(seat, actions[ACTION_CHOW].tiles[0])
    if ACTION_PASS in actions:
        return Pass(seat)
    concealed = state.players[seat].concealed

    def usefulness(code: str) -> tuple[int, str]:
        tile = parse_tile(code)
        if tile == state.wildcard:
            return (100, code)
        neighbours = 0
        if tile < SUITED_TILE_LIMIT:
            rank = tile % 9
            neighbours = sum(concealed[tile + step] for step in (-2, -1, 1, 2) if 0 <= rank + step <= 8)
        return (3 * concealed[tile] + neighbours, code)

    return Discard(seat, min(actions[ACTION_DISCARD].tiles, key=usefulness))
