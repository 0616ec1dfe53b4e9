"""Every bad command raises its typed error and leaves the table unchanged (issue 4 "Bad input")."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from mahjong_rules.room_rules import RoomRules
from mahjong_table.core.commands import (
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
from mahjong_table.core.errors import (
    AlreadyDeclaredError,
    GameOverError,
    IllegalClaimError,
    IllegalKongError,
    IllegalWinError,
    InvalidCommandError,
    InvalidExchangeError,
    MissingSuitObligationError,
    NotYourTurnError,
    PlayerNotInGameError,
    TableRuleError,
    TileNotInHandError,
    WrongPhaseError,
)
from mahjong_table.testing import FormulaTable, Table, table_with_hands

from .test_formula_aggregate import CHOW_HANDS, formula_table

TRIPLE_WAIT_HANDS = ("112345678p56789m", "123456789m4699p", "111222333789s5p", "123456789s99s55p")
EXCHANGE_HANDS = ("123456789m12345p", "123456789p1234s", "123456789s1234m", "56789s56789m678p")


def exchange_table() -> Table:
    return table_with_hands(EXCHANGE_HANDS, rules=RoomRules())


def declaring_table() -> Table:
    return table_with_hands(TRIPLE_WAIT_HANDS)


def dealer_turn() -> Table:
    return table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")


def dealer_turn_holding_missing_suit() -> Table:
    return table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="psmp")


def claim_on_5p() -> Table:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmp")  # seat 3 holds 55p but lacks p
    table.act(Discard(0, "5p"))
    return table


def after_picking() -> Table:
    table = exchange_table()
    table.act(ExchangeThree(0, ("1m", "2m", "3m")))
    return table


def after_declaring() -> Table:
    table = declaring_table()
    table.act(DeclareMissingSuit(0, "s"))
    return table


def after_seat_1_won() -> Table:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    return table


def after_seat_3_left() -> Table:
    table = dealer_turn()
    table.act(Leave(3))
    return table


def game_over() -> Table:
    table = after_seat_1_won()
    table.act(Win(2))
    table.act(Win(3))
    return table


CASES: list[tuple[str, Callable[[], Table], TableCommand, type[TableRuleError], str]] = [
    ("out of turn", dealer_turn, Discard(1, "1m"), NotYourTurnError, "seat 0's turn"),
    ("tile not held", dealer_turn, Discard(0, "9s"), TileNotInHandError, "does not hold 9s"),
    ("malformed tile", dealer_turn, Discard(0, "0x"), InvalidCommandError, "bad tile code"),
    ("honor tile", dealer_turn, Discard(0, "1z"), InvalidCommandError, "not used in Sichuan"),
    ("seat out of range", dealer_turn, Discard(4, "1m"), InvalidCommandError, "seat must be"),
    ("unknown suit", declaring_table, DeclareMissingSuit(0, "z"), InvalidCommandError, "'m', 'p' or 's'"),
    ("bad leave reason", dealer_turn, Leave(0, "bored"), InvalidCommandError, "leave reason"),
    (
        "RULES-1.3 missing-suit obligation",
        dealer_turn_holding_missing_suit,
        Discard(0, "5m"),
        MissingSuitObligationError,
        "missing suit 'p'",
    ),
    ("RULES-1.3 pong of a missing-suit tile", claim_on_5p, Pong(3), IllegalClaimError, "missing suit"),
    ("RULES-1.4 pong without a pair", claim_on_5p, Pong(1), IllegalClaimError, "does not hold two"),
    ("RULES-1.4 pong own discard", claim_on_5p, Pong(0), IllegalClaimError, "its own tile"),
    ("RULES-1.3 win holding the missing suit", claim_on_5p, Win(3), IllegalWinError, "missing suit"),
    ("RULES-1.6 self-draw win without a winning hand", dealer_turn, Win(0), IllegalWinError, "not a winning"),
    ("RULES-1.5 kong without four", dealer_turn, Kong(0, "1p"), IllegalKongError, "no kong of 1p"),
    ("RULES-1.5 exposed kong without three", claim_on_5p, Kong(1), IllegalKongError, "does not hold"),
    ("pass when not asked", claim_on_5p, Pass(3), NotYourTurnError, "not asked"),
    ("pass on own turn", dealer_turn, Pass(0), IllegalClaimError, "nothing to pass"),
    ("pong without a discard", dealer_turn, Pong(1), WrongPhaseError, "no discard"),
    ("discard during a claim window", claim_on_5p, Discard(1, "1m"), WrongPhaseError, "claim window"),
    ("discard during declarations", declaring_table, Discard(0, "5p"), WrongPhaseError, "missing_suit"),
    (
        "RULES-1.2 exchange of mixed suits",
        exchange_table,
        ExchangeThree(0, ("1m", "2m", "1p")),
        InvalidExchangeError,
        "one suit",
    ),
    (
        "RULES-1.2 exchange of two tiles",
        exchange_table,
        ExchangeThree(0, ("1m", "2m")),
        InvalidExchangeError,
        "exactly 3",
    ),
    (
        "RULES-1.2 exchange of four tiles",
        exchange_table,
        ExchangeThree(0, ("1m", "2m", "3m", "4m")),
        InvalidExchangeError,
        "exactly 3",
    ),
    (
        "RULES-1.2 exchange of tiles not held",
        exchange_table,
        ExchangeThree(1, ("1s", "1s", "2s")),
        TileNotInHandError,
        "2 × 1s",
    ),
    (
        "RULES-1.2 second exchange pick",
        after_picking,
        ExchangeThree(0, ("4m", "5m", "6m")),
        AlreadyDeclaredError,
        "already picked",
    ),
    (
        "RULES-1.3 second declaration",
        after_declaring,
        DeclareMissingSuit(0, "m"),
        AlreadyDeclaredError,
        "already declared",
    ),
    ("RULES-1.6 action after winning", after_seat_1_won, Pass(1), PlayerNotInGameError, "already won"),
    (
        "RULES-1.6 discard after winning",
        after_seat_1_won,
        Discard(1, "1m"),
        PlayerNotInGameError,
        "already won",
    ),
    (
        "RULES-1.10 action after leaving",
        after_seat_3_left,
        Discard(3, "1s"),
        PlayerNotInGameError,
        "left the table",
    ),
    ("RULES-1.10 leaving twice", after_seat_3_left, Leave(3), PlayerNotInGameError, "already left"),
    ("action after the end", game_over, Discard(0, "1p"), GameOverError, "has ended"),
    ("deadline after the end", game_over, ExpireDeadline(), GameOverError, "has ended"),
]


@pytest.mark.parametrize(
    ("make_table", "command", "error", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_a_bad_command_raises_its_typed_error_and_changes_nothing(
    make_table: Callable[[], Table], command: TableCommand, error: type[TableRuleError], message: str
) -> None:
    table = make_table()
    state_before, events_before = table.state, list(table.events)
    with pytest.raises(error, match=message):
        table.act(command)
    assert table.state == state_before
    assert table.events == events_before


def test_every_typed_error_is_a_table_rule_error() -> None:
    for _, _, _, error, _ in CASES:
        assert issubclass(error, TableRuleError)


def formula_dealer_turn() -> FormulaTable:
    """A Formula deal with dealer seat 0 on turn, no flower held, no fan minimum."""
    return formula_table(CHOW_HANDS)


@pytest.mark.parametrize("make_table", [dealer_turn, formula_dealer_turn], ids=["sichuan", "formula"])
@pytest.mark.parametrize(
    "command",
    [Leave(True), Leave(False, "disconnected"), Discard(True, "1m"), Pass(False), Win(True)],
    ids=["leave True", "leave False", "discard True", "pass False", "win True"],
)
def test_a_bool_is_not_a_seat_in_either_family(
    make_table: Callable[[], Table | FormulaTable], command: TableCommand
) -> None:
    """`True` is an int in Python, and was seat 1 to the Formula `Leave` (it emitted a
    `PlayerLeft` of seat True): both families check every command's seat with one kernel check."""
    table = make_table()
    state_before, events_before = table.state, list(table.events)
    with pytest.raises(InvalidCommandError, match=r"seat must be 0\.\.3"):
        table.act(command)
    assert table.state == state_before
    assert table.events == events_before
