"""Formula settlement math (RULES.md 2.3): birds, dealer doubling, ``fan_term``, escape.

Produces the same values as the Sichuan settlement (``mahjong_rules.settlement``): ``Instruction``
lines in points with a ``Reason``, converted once into beans by ``to_beans`` (points × N), the
shortfall rule applied by ``apply_balance`` and the rake by ``rake_instructions``. So scoring and
the ledger handle both families the same way.

Per payer, X = fan_term × bird_factor × dealer_factor (seed 000: 游戏番数 × 中鸟系数 × 庄家系数).
"""

from dataclasses import dataclass
from enum import StrEnum

from mahjong_rules.errors import InvalidTileError
from mahjong_rules.formula.fans import WinBy
from mahjong_rules.formula.wall import HONOR_TILE_LIMIT, RANKS_PER_SUIT, SUITED_TILE_LIMIT
from mahjong_rules.room_rules import DEFAULT_ROOM_RULES as _DEFAULT
from mahjong_rules.settlement.beans import rake_instructions
from mahjong_rules.settlement.model import (
    HOUSE_ESCAPE,
    SEAT_COUNT,
    BeanInstruction,
    Instruction,
    InvalidSettlementFactError,
    Payment,
    Reason,
    SettlementOptions,
    check_seat,
    seats_after,
)
from mahjong_rules.tiles import Tile

FLAT_FAN_TERM = 10
"""无番场: every win counts 10 (seed 000)."""
FAN_PLUS_EIGHT_BONUS = 8
"""8番场: total fan + 8 (seed 000)."""
FAN_LIMIT = 10_000
"""No MCR hand comes near this (the highest is a few hundred); a larger total is a bug upstream."""


class FanTerm(StrEnum):
    """RULES.md 2.3 option ``fan_term``: what a win is worth before birds and the dealer."""

    FAN = "fan"  # total fan
    FAN_PLUS_8 = "fan_plus_8"  # 8番场: total fan + 8
    FLAT_10 = "flat_10"  # 无番场: 10


_DEFAULT_FAN_TERM = FanTerm(_DEFAULT.fan_term)


@dataclass(frozen=True, kw_only=True)
class FormulaOptions:
    """The room settings of a formula room, with the RULES.md 2 defaults.

    Field names are the RULES.md option names. ``coefficient`` (N) and ``rake_beans`` (A) have no
    default: every room sets them (RULES.md 3).
    """

    coefficient: int
    rake_beans: int
    fan_term: FanTerm = _DEFAULT_FAN_TERM
    min_fan: int = _DEFAULT.min_fan  # RULES.md 2.1; 0 in the no-fan room
    no_wildcard_fan: int = _DEFAULT.no_wildcard_fan  # 无财神, RULES.md 2.2
    escape_penalty_points: int = _DEFAULT.escape_penalty_points  # RULES.md 2.3
    escape_compensation_points: int = _DEFAULT.escape_compensation_points  # RULES.md 2.3

    def __post_init__(self) -> None:
        object.__setattr__(self, "fan_term", FanTerm(self.fan_term))
        for name in ("min_fan", "no_wildcard_fan", "escape_penalty_points", "escape_compensation_points"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        self.settlement_options()  # validates coefficient and rake_beans

    def settlement_options(self) -> SettlementOptions:
        """The shared settlement options (N and A) for ``to_beans`` and ``rake_instructions``."""
        return SettlementOptions(coefficient=self.coefficient, rake_beans=self.rake_beans)


def bird_value(bird: Tile) -> int:
    """The bird's value v: the rank of a suited tile; 东1 南2 西3 北4 中5 發6 白7 (RULES.md 2.3)."""
    if not isinstance(bird, int) or not 0 <= bird < HONOR_TILE_LIMIT:
        raise InvalidTileError(f"a bird is a suited or honor tile, not {bird!r}")
    if bird < SUITED_TILE_LIMIT:
        return bird % RANKS_PER_SUIT + 1
    return bird - SUITED_TILE_LIMIT + 1


def bird_seat(dealer: int, bird: Tile) -> int:
    """The seat the bird lands on: (dealer + v − 1) mod 4, counting from the dealer in turn order."""
    check_seat(dealer, "dealer")
    return (dealer + bird_value(bird) - 1) % SEAT_COUNT


def fan_term_points(total_fan: int, fan_term: FanTerm) -> int:
    """The room's fan term for a win of ``total_fan`` (flowers included): fan, fan + 8, or 10."""
    if not (isinstance(total_fan, int) and 0 <= total_fan <= FAN_LIMIT):
        raise InvalidSettlementFactError(f"total fan must be 0..{FAN_LIMIT}, got {total_fan!r}")
    if fan_term is FanTerm.FLAT_10:
        return FLAT_FAN_TERM
    if fan_term is FanTerm.FAN_PLUS_8:
        return total_fan + FAN_PLUS_EIGHT_BONUS
    if total_fan == 0:
        raise InvalidSettlementFactError("a win under fan_term 'fan' scores at least 1 fan")
    return total_fan


@dataclass(frozen=True)
class FormulaWinFact:
    """One formula win (a hand ends at its first win, RULES.md 2.1).

    ``payer`` is the discarder (discard) or the kong declarer (rob_kong, paid like a discard);
    ``None`` for a self-draw. ``bird`` is the bird tile (``wall.bird_tile``), ``total_fan`` the
    hand's total with flowers (``FormulaEvaluation.total_fan``).
    """

    source: str
    winner: int
    win_by: WinBy
    total_fan: int
    dealer: int
    bird: Tile
    payer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "win_by", WinBy(self.win_by))
        check_seat(self.winner, "winner")
        check_seat(self.dealer, "dealer")
        bird_value(self.bird)
        if self.win_by is WinBy.SELF_DRAW:
            if self.payer is not None:
                raise InvalidSettlementFactError("a self-draw has no single payer")
            return
        if self.payer is None:
            raise InvalidSettlementFactError(f"a {self.win_by} win names the payer")
        check_seat(self.payer, "payer")
        if self.payer == self.winner:
            raise InvalidSettlementFactError("the winner cannot pay themselves")


def bird_factor(fact: FormulaWinFact, payer: int) -> int:
    """2 when the bird hits for this payer (RULES.md 2.3), else 1.

    Discard (and robbed kong): the bird on the winner or the payer doubles the payer's share.
    Self-draw: the bird on the winner doubles all three; on another seat, only that seat's share.
    """
    landed = bird_seat(fact.dealer, fact.bird)
    if fact.win_by is WinBy.SELF_DRAW:
        return 2 if landed in (fact.winner, payer) else 1
    return 2 if landed in (fact.winner, fact.payer) else 1


def dealer_factor(fact: FormulaWinFact, payer: int) -> int:
    """2 when the winner or this payer is the dealer (庄家翻倍, RULES.md 2.3), else 1."""
    return 2 if fact.dealer in (fact.winner, payer) else 1


def formula_payers(fact: FormulaWinFact) -> tuple[int, ...]:
    """Who pays: the three others after a self-draw, else only the discarder / kong declarer."""
    if fact.win_by is WinBy.SELF_DRAW:
        return seats_after(fact.winner)
    assert fact.payer is not None
    return (fact.payer,)


def formula_payment_points(fact: FormulaWinFact, payer: int, fan_term: FanTerm) -> int:
    """X for one payer: fan_term × bird_factor × dealer_factor (seed 000's 游戏基数), in points."""
    return fan_term_points(fact.total_fan, fan_term) * bird_factor(fact, payer) * dealer_factor(fact, payer)


def formula_win_instructions(fact: FormulaWinFact, options: FormulaOptions) -> tuple[Instruction, ...]:
    """The payments of a formula win: one instruction per payer, ``Reason.WIN``, in turn order.

    Convert with ``to_beans(instruction, options.settlement_options())`` (−X×N per payer, +ΣX×N
    for the winner) and add ``formula_rake_instructions``.
    """
    return tuple(
        Instruction(
            payer=payer,
            payments=(
                Payment(fact.winner, formula_payment_points(fact, payer, options.fan_term), Reason.WIN),
            ),
            source=fact.source,
        )
        for payer in formula_payers(fact)
    )


def formula_escape_instruction(source: str, escapee: int, options: FormulaOptions) -> Instruction | None:
    """What an escapee pays when leaving a formula hand, which ends it (RULES.md 2.3).

    One instruction: ``escape_penalty_points`` to ``house:escape``, then ``escape_compensation_points``
    to each other player in turn order. ``apply_balance`` splits a short balance as RULES.md 1.10
    (penalty floor(B × penalty / T), the rest to the others in proportion, remainder to the house).
    None when both amounts are 0.
    """
    check_seat(escapee, "escapee")
    payments: list[Payment] = []
    if options.escape_penalty_points > 0:
        payments.append(Payment(HOUSE_ESCAPE, options.escape_penalty_points, Reason.ESCAPE_PENALTY))
    if options.escape_compensation_points > 0:
        payments.extend(
            Payment(seat, options.escape_compensation_points, Reason.ESCAPE_COMPENSATION)
            for seat in seats_after(escapee)
        )
    if not payments:
        return None
    return Instruction(payer=escapee, payments=tuple(payments), source=source)


def formula_rake_instructions(options: FormulaOptions, source: str) -> tuple[BeanInstruction, ...]:
    """系统回收: each of the four players pays A beans after the hand (escapee included)."""
    return rake_instructions(options.settlement_options(), source)
