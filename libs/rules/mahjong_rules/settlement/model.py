"""Values of the settlement math: options, reasons, payment instructions, game facts, state.

Everything here is a frozen value. Amounts are integers in points (the room's base unit) until
they are converted once into beans (points × N, RULES.md 0) by `to_beans`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeAlias

from mahjong_rules.room_rules import DEFAULT_ROOM_RULES as _DEFAULT
from mahjong_rules.seats import SEAT_COUNT as SEAT_COUNT  # the one definition; imported from here too

MULTIPLIER_LIMIT = 1 << 24
"""No hand multiplier of RULES.md 1.7 comes near this; a larger one is a bug upstream."""

HOUSE_ESCAPE = "house:escape"
"""The house account that receives escape penalties (RULES.md 1.10, ARCHITECTURE "Money")."""

HOUSE_RAKE = "house:rake"
"""The house account that receives the rake (RULES.md 1.9, ARCHITECTURE "Money")."""

HOUSE_ACCOUNTS = frozenset({HOUSE_ESCAPE, HOUSE_RAKE})

Party: TypeAlias = int | str
"""Who pays or is paid: a seat 0..3, or one of the house accounts."""


class InvalidSettlementFactError(ValueError):
    """A game fact contradicts the settlement state (e.g. a player who already won is named payer)."""


class Reason(StrEnum):
    """Why a payment is made; one id per idea, the same ids as the protos and RULES.md."""

    EXPOSED_KONG = "exposed_kong"  # 直杠 / 刮风, RULES.md 1.5
    ADDED_KONG = "added_kong"  # 补杠 / 面下杠, RULES.md 1.5
    CONCEALED_KONG = "concealed_kong"  # 暗杠 / 下雨, RULES.md 1.5
    WIN = "win"  # RULES.md 1.6
    CALL_TRANSFER = "call_transfer"  # 呼叫转移, RULES.md 1.5
    FLOWER_PIG = "flower_pig"  # 查花猪, RULES.md 1.8
    NOT_READY = "not_ready"  # 查大叫, RULES.md 1.8
    KONG_REFUND = "kong_refund"  # 退税, RULES.md 1.8
    ESCAPE_PENALTY = "escape_penalty"  # 逃跑, RULES.md 1.10
    ESCAPE_COMPENSATION = "escape_compensation"  # 逃跑, RULES.md 1.10
    RAKE = "rake"  # 系统回收, RULES.md 1.9


class KongKind(StrEnum):
    """The three kongs of RULES.md 1.5."""

    EXPOSED = "exposed"
    ADDED = "added"
    CONCEALED = "concealed"


class WinBy(StrEnum):
    """How a win happened (RULES.md 1.6)."""

    SELF_DRAW = "self_draw"
    DISCARD = "discard"
    ROB_KONG = "rob_kong"


class SelfDrawBonus(StrEnum):
    """RULES.md 1.7 option `self_draw_bonus`."""

    DOUBLE = "double"  # 自摸 ×2 is already inside the multiplier the caller passes
    ADD_ONE = "add_one"  # 自摸加底: each payer pays one extra point after the cap


def check_seat(seat: int, what: str) -> None:
    """Raise `InvalidSettlementFactError` unless `seat` is one of 0..3."""
    if not (isinstance(seat, int) and 0 <= seat < SEAT_COUNT):
        raise InvalidSettlementFactError(f"{what} must be a seat 0..{SEAT_COUNT - 1}, got {seat!r}")


def check_multiplier(multiplier: int, what: str) -> None:
    """Raise `InvalidSettlementFactError` unless `multiplier` is in 1..MULTIPLIER_LIMIT."""
    if not (isinstance(multiplier, int) and 1 <= multiplier <= MULTIPLIER_LIMIT):
        raise InvalidSettlementFactError(f"{what} must be 1..{MULTIPLIER_LIMIT}, got {multiplier!r}")


def _check_party(party: Party) -> None:
    if isinstance(party, str):
        assert party in HOUSE_ACCOUNTS, f"unknown house account {party!r}"
    else:
        assert 0 <= party < SEAT_COUNT, f"seat out of range: {party!r}"


_DEFAULT_SELF_DRAW_BONUS = SelfDrawBonus(_DEFAULT.self_draw_bonus)


@dataclass(frozen=True, kw_only=True)
class SettlementOptions:
    """The room settings that settlement depends on, with the RULES.md defaults.

    Field names are the RULES.md option names, so a room's option map can be passed as keywords.
    `coefficient` (N) and `rake_beans` (A) have no default: every room sets them (RULES.md 3).
    """

    coefficient: int  # N: beans per point (RULES.md 0)
    rake_beans: int  # A: paid by every seated player after the game (RULES.md 1.9)
    cap_points: int = _DEFAULT.cap_points  # RULES.md 1.9; 0 = no cap
    self_draw_bonus: SelfDrawBonus = _DEFAULT_SELF_DRAW_BONUS  # RULES.md 1.7
    flower_pig_points: int = _DEFAULT.flower_pig_points  # RULES.md 1.8
    escape_cap_points: int = _DEFAULT.escape_cap_points  # RULES.md 1.10, used when the room has no cap
    escape_correction: int = _DEFAULT.escape_correction  # K of RULES.md 1.10
    escape_penalty_floor: int = _DEFAULT.escape_penalty_floor  # points, RULES.md 1.10
    escape_compensation_floor: int = _DEFAULT.escape_compensation_floor  # points, RULES.md 1.10

    def __post_init__(self) -> None:
        # Accept the plain option string ("add_one") as a room catalog would hold it.
        object.__setattr__(self, "self_draw_bonus", SelfDrawBonus(self.self_draw_bonus))
        if self.coefficient < 1:
            raise ValueError(f"coefficient must be at least 1, got {self.coefficient}")
        for name in (
            "rake_beans",
            "cap_points",
            "flower_pig_points",
            "escape_cap_points",
            "escape_correction",
            "escape_penalty_floor",
            "escape_compensation_floor",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")

    def capped_points(self, points: int) -> int:
        """One payment between two players for one win or one check, limited by the cap (1.9)."""
        assert points >= 0
        return points if self.cap_points == 0 else min(points, self.cap_points)


@dataclass(frozen=True)
class Payment:
    """One payee line of an instruction, in points."""

    payee: Party
    points: int
    reason: Reason

    def __post_init__(self) -> None:
        _check_party(self.payee)
        assert self.points > 0, f"a payment line carries a positive amount, got {self.points}"


@dataclass(frozen=True)
class Instruction:
    """One payer pays one or more payees, in points (ARCHITECTURE "Money: the ledger").

    `source` is the id of the game fact (event) it came from; `refers_to` names the earlier fact
    it settles, when there is one (the kong moved by a call transfer or returned by a kong refund).
    `income_of` names the instructions (their `instruction_id`) whose payments to this payer it
    moves on: a kong refund or a call transfer moves at most what the payer actually received
    from them, after 1.9's pro-rata (RULES.md 1.9a.1); empty for every other instruction.
    """

    payer: int
    payments: tuple[Payment, ...]
    source: str
    refers_to: str | None = None
    income_of: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_party(self.payer)
        assert self.payments, "an instruction has at least one payee"
        payees = [payment.payee for payment in self.payments]
        assert len(set(payees)) == len(payees), f"payees repeat: {payees}"
        assert self.payer not in payees, "a payer never pays themselves"

    @property
    def reason(self) -> Reason:
        """The instruction's main reason: that of its first line (escape: the penalty)."""
        return self.payments[0].reason

    @property
    def total_points(self) -> int:
        """What the payer owes in all."""
        return sum(payment.points for payment in self.payments)

    @property
    def instruction_id(self) -> str:
        """A deterministic id from the source fact: an idempotency key for the ledger."""
        payees = ",".join(str(payment.payee) for payment in self.payments)
        return f"{self.source}|{self.reason}|{self.refers_to or '-'}|{self.payer}>{payees}"


@dataclass(frozen=True)
class BeanPayment:
    """One payee line in beans; zero only where a balance shortfall left nothing (1.9)."""

    payee: Party
    beans: int
    reason: Reason

    def __post_init__(self) -> None:
        _check_party(self.payee)
        assert self.beans >= 0, f"a bean line is never negative, got {self.beans}"


@dataclass(frozen=True)
class BeanInstruction:
    """An instruction converted into beans, or the rake; what the ledger applies.

    `income_of` as in `Instruction`: the amounts are then an upper bound, limited by
    `limit_to_income` to what the payer received from those instructions (RULES.md 1.9a.1).
    """

    payer: int
    payments: tuple[BeanPayment, ...]
    source: str
    refers_to: str | None = None
    income_of: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_party(self.payer)
        assert self.payments, "an instruction has at least one payee"
        payees = [payment.payee for payment in self.payments]
        assert len(set(payees)) == len(payees), f"payees repeat: {payees}"
        assert self.payer not in payees, "a payer never pays themselves"

    @property
    def reason(self) -> Reason:
        """The instruction's main reason: that of its first line (escape: the penalty)."""
        return self.payments[0].reason

    @property
    def total_beans(self) -> int:
        """What the payer owes (or, once posted, paid) in all."""
        return sum(payment.beans for payment in self.payments)

    @property
    def instruction_id(self) -> str:
        """A deterministic id from the source fact: an idempotency key for the ledger."""
        payees = ",".join(str(payment.payee) for payment in self.payments)
        return f"{self.source}|{self.reason}|{self.refers_to or '-'}|{self.payer}>{payees}"


@dataclass(frozen=True)
class HandFacts:
    """What the wall-exhausted checks and escape need to know of one player's hand (1.8, 1.10).

    Computed by the caller from the hand (tiles, waits and fans are not this module's business).
    `max_wait_multiplier` is the highest wait multiplier of RULES.md 1.7 over the player's waits
    (waits on a tile of which they hold all four copies excluded), 0 when not ready.
    """

    holds_three_suits: bool = False
    ready: bool = False
    max_wait_multiplier: int = 0

    def __post_init__(self) -> None:
        if self.ready:
            check_multiplier(self.max_wait_multiplier, "a ready player's max wait multiplier")
        elif self.max_wait_multiplier != 0:
            raise InvalidSettlementFactError("a player who is not ready has no wait multiplier")
        if self.holds_three_suits and self.ready:
            # RULES.md 1.3: a hand holding a missing-suit tile cannot count as ready.
            raise InvalidSettlementFactError("a player holding three suits cannot be ready")


NO_HAND_FACTS = (HandFacts(),) * SEAT_COUNT


@dataclass(frozen=True)
class KongFact:
    """A kong that stands (RULES.md 1.5). A robbed added kong is void: send no KongFact for it."""

    source: str
    declarer: int
    kind: KongKind
    discarder: int | None = None  # exposed kong only: whose discard was konged


@dataclass(frozen=True)
class Winner:
    """One winner of a win fact and their hand's multiplier (RULES.md 1.7, all extras included).

    `fixed_value` marks 天胡/地胡: with `add_one` they get no 自摸加底 point (RULES.md 1.9a.5).
    """

    seat: int
    multiplier: int
    fixed_value: bool = False


@dataclass(frozen=True)
class WinFact:
    """One win, or several on one discard / one robbed kong (RULES.md 1.6).

    `payer` is the discarder (discard) or the kong declarer (rob_kong); None for self-draw.
    `after_kong` is the source of the discarder's own kong when this discard was made right after
    it and its replacement draw (杠上炮), which triggers call transfer with exactly one winner.
    """

    source: str
    win_by: WinBy
    winners: tuple[Winner, ...]
    payer: int | None = None
    after_kong: str | None = None


@dataclass(frozen=True)
class WallExhaustedFact:
    """The game ends with the RULES.md 1.8 checks (wall exhausted, or too few players after an
    escape, 1.10). `hands[seat]` describes each seat; winners' and escapees' entries are ignored."""

    source: str
    hands: tuple[HandFacts, ...] = NO_HAND_FACTS


@dataclass(frozen=True)
class EscapeFact:
    """A player left the table before the game ended (RULES.md 1.10).

    `hands` describes every seat as if the wall were exhausted now (for owed_j)."""

    source: str
    seat: int
    hands: tuple[HandFacts, ...] = NO_HAND_FACTS


GameFact: TypeAlias = KongFact | WinFact | WallExhaustedFact | EscapeFact


@dataclass(frozen=True)
class KongIncome:
    """The income of one kong: who paid the kong player what, and whether call transfer moved it."""

    source: str
    declarer: int
    paid_points: tuple[tuple[int, int], ...]  # (payer seat, points), in turn order after declarer
    transferred: bool = False
    instruction_keys: tuple[str, ...] = ()
    """The `instruction_id` of each payer's kong instruction, in `paid_points` order: what was
    actually received for the kong is what the ledger posted for them (RULES.md 1.9a.1)."""

    def instruction_key_of(self, payer: int) -> str:
        """The key of the instruction by which `payer` paid for this kong."""
        for (seat, _), key in zip(self.paid_points, self.instruction_keys, strict=True):
            if seat == payer:
                return key
        raise InvalidSettlementFactError(f"seat {payer} did not pay for kong {self.source!r}")

    @property
    def total_points(self) -> int:
        """All the kong earned."""
        return sum(points for _, points in self.paid_points)


@dataclass(frozen=True)
class SettlementState:
    """What settlement remembers of one game: who won, who escaped, every kong's income.

    Evolved only by `settle`; a pure value, so replays and live play agree.
    """

    options: SettlementOptions
    won: frozenset[int] = frozenset()
    escaped: frozenset[int] = frozenset()
    kongs: tuple[KongIncome, ...] = ()
    ended: bool = False
    settled_sources: frozenset[str] = field(default=frozenset())

    def in_game(self, seat: int) -> bool:
        """Not yet won and still at the table: the players who pay and are paid (1.5, 1.6, 1.10)."""
        return seat not in self.won and seat not in self.escaped

    def seats_in_game(self) -> tuple[int, ...]:
        """Every seat still in the game, in seat order."""
        return tuple(seat for seat in range(SEAT_COUNT) if self.in_game(seat))

    def kong(self, source: str) -> KongIncome:
        """The recorded kong of that source."""
        for kong in self.kongs:
            if kong.source == source:
                return kong
        raise InvalidSettlementFactError(f"no kong was settled from {source!r}")


def seats_after(seat: int) -> tuple[int, ...]:
    """The other three seats in turn order after `seat` (RULES.md 0)."""
    return tuple((seat + step) % SEAT_COUNT for step in range(1, SEAT_COUNT))
