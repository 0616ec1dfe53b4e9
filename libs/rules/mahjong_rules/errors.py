"""Typed errors raised by the rules package.

Every error is a ``RulesError`` (itself a ``ValueError``) so a caller can catch the whole family, and
each message names the offending tile or value so a person can fix the input without a debugger.
"""


class RulesError(ValueError):
    """Base class: the input breaks a rule of the game or of the notation."""


class InvalidTileError(RulesError):
    """A tile code is malformed, or the tile does not exist in the variant being played."""


class TileCountError(RulesError):
    """A tile appears more often than the set holds (a fifth copy, a second flower)."""


class HandSizeError(RulesError):
    """A hand has the wrong number of tiles for the operation (e.g. not 14 with its melds)."""


class InvalidMeldError(RulesError):
    """A meld is malformed: unknown kind, a kong without exposure, a pong with one."""


class WallError(RulesError):
    """A wall operation is impossible: drawing from an exhausted wall, bad dice or seat."""
