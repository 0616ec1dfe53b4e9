"""Typed rule errors of the table aggregate. A rejected command changes nothing.

The service maps `InvalidCommandError` to INVALID_ARGUMENT and every other `TableRuleError` to
FAILED_PRECONDITION (ARCHITECTURE.md "Errors"). Messages say what was wrong in words a client
developer can act on.
"""

from __future__ import annotations


class TableRuleError(Exception):
    """A command that the table rules reject now."""


class InvalidCommandError(TableRuleError):
    """The command is malformed: bad tile code, unknown suit, seat out of range, unknown reason."""


class NotYourTurnError(TableRuleError):
    """The seat is not the one the table waits on for this action."""


class TileNotInHandError(TableRuleError):
    """The seat does not hold the named tile(s) in its concealed hand."""


class MissingSuitObligationError(TableRuleError):
    """The seat still holds a tile of its missing suit and must discard one (RULES.md 1.3)."""


class IllegalClaimError(TableRuleError):
    """A pong or pass the rules forbid on the open discard (RULES.md 1.3, 1.4)."""


class IllegalKongError(TableRuleError):
    """A kong the rules forbid now (RULES.md 1.3, 1.5)."""


class IllegalWinError(TableRuleError):
    """A win the rules forbid: not a winning hand, missing suit held, skip-win lock (RULES.md 1.3-1.6)."""


class InvalidExchangeError(TableRuleError):
    """An exchange-three pick that is not exactly three tiles of one suit (RULES.md 1.2)."""


class AlreadyDeclaredError(TableRuleError):
    """The seat already picked its exchange tiles or declared its missing suit."""


class PlayerNotInGameError(TableRuleError):
    """The seat has won or left and takes no further part (RULES.md 1.6, 1.10)."""


class GameOverError(TableRuleError):
    """The game has ended; no command is accepted."""


class WrongPhaseError(TableRuleError):
    """The command does not belong to the game's current phase (e.g. a discard during exchange)."""
