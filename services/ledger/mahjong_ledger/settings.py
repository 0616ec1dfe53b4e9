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

from mahjong_platform.config import integer_setting

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
    starting_grant_beans = integer_setting(
        environ,
        STARTING_GRANT_BEANS_VARIABLE,
        default=STARTING_GRANT_BEANS_DEFAULT,
        minimum=0,
        maximum=DEPOSIT_BEANS_MAX,
    )
    return LedgerSettings(starting_grant_beans=starting_grant_beans)
