"""The ledger's own variable, MAHJONG_STARTING_GRANT_BEANS: a default that runs `make run`, else a
clear error."""

from __future__ import annotations

import pytest
from mahjong_ledger.domain import DEPOSIT_BEANS_MAX
from mahjong_ledger.settings import STARTING_GRANT_BEANS_DEFAULT, load_ledger_settings
from mahjong_platform.config import ConfigurationError


def test_the_starting_grant_defaults_and_reads_its_whole_range() -> None:
    assert load_ledger_settings({}).starting_grant_beans == STARTING_GRANT_BEANS_DEFAULT
    assert (
        load_ledger_settings({"MAHJONG_STARTING_GRANT_BEANS": ""}).starting_grant_beans
        == STARTING_GRANT_BEANS_DEFAULT
    )
    assert load_ledger_settings({"MAHJONG_STARTING_GRANT_BEANS": "0"}).starting_grant_beans == 0
    maximum = str(DEPOSIT_BEANS_MAX)
    assert (
        load_ledger_settings({"MAHJONG_STARTING_GRANT_BEANS": maximum}).starting_grant_beans
        == DEPOSIT_BEANS_MAX
    )


@pytest.mark.parametrize("value", ["-1", str(DEPOSIT_BEANS_MAX + 1), "lots", "1.5"])
def test_a_starting_grant_outside_its_range_stops_the_ledger_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigurationError, match="MAHJONG_STARTING_GRANT_BEANS must be an integer from 0 to"):
        load_ledger_settings({"MAHJONG_STARTING_GRANT_BEANS": value})
