"""The ledger's own settings, beyond the platform's `Settings`.

``MAHJONG_STARTING_GRANT_BEANS`` is read here because the platform's `config.py` does not know it
(its `KNOWN_VARIABLES` lists every variable it reads). When the platform adopts it, this module
should read it from there instead.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Final

from mahjong_platform.config import ConfigurationError

from mahjong_ledger.domain import DEPOSIT_BEANS_MAX

STARTING_GRANT_BEANS_VARIABLE: Final = "MAHJONG_STARTING_GRANT_BEANS"
STARTING_GRANT_BEANS_DEFAULT: Final = 100_000
"""Enough for the novice room's entry floor (2,000) many times over, so ``make run`` just works."""


@dataclasses.dataclass(frozen=True)
class LedgerSettings:
    """Settings only the ledger reads."""

    starting_grant_beans: int = STARTING_GRANT_BEANS_DEFAULT
    """Beans a player receives from ``world`` the first time the ledger sees them; 0 = no grant."""


def load_ledger_settings(environ: Mapping[str, str] = os.environ) -> LedgerSettings:
    """Read the ledger's variables; raise `ConfigurationError` naming a variable that does not parse."""
    text = environ.get(STARTING_GRANT_BEANS_VARIABLE, "").strip()
    if not text:
        return LedgerSettings()
    try:
        starting_grant_beans = int(text)
    except ValueError:
        starting_grant_beans = -1
    if not 0 <= starting_grant_beans <= DEPOSIT_BEANS_MAX:
        raise ConfigurationError(
            f"{STARTING_GRANT_BEANS_VARIABLE} must be an integer from 0 to {DEPOSIT_BEANS_MAX}, got {text!r}"
        )
    return LedgerSettings(starting_grant_beans=starting_grant_beans)
