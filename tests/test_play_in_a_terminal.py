"""``mjctl play`` driven in a pseudo-terminal (pexpect) through a whole game on the real servers
(Kafka, PostgreSQL, the four services): a person at seat N, three bots, keys read off the screen's
legal actions, then the settlement."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect
import pytest
from mahjong_platform.config import Settings

from .test_end_to_end import SECRET, services, settings  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\r")
SCREEN_TIMEOUT_SECONDS = 120


def key_for(keys_line: str) -> str | None:
    """What the person presses for the legal actions the screen offers: win, else the first
    allowed tile to discard, else pass, else the exchange suggestion, else the first missing suit."""
    if "[w] win" in keys_line:
        return "w"
    discard = re.search(r"\[(\d+)[^\]]*\] discard", keys_line)
    if discard:
        return discard.group(1)
    if "[s] pass" in keys_line:
        return "s"
    if "[x] exchange" in keys_line:
        return "x"
    missing = re.search(r"\[([mps])\] \w+ missing", keys_line)
    return missing.group(1) if missing else None


def test_a_person_plays_a_whole_game_against_three_bots_in_a_terminal(
    settings: Settings,  # noqa: F811
    services: dict[str, int],  # noqa: F811
) -> None:
    environment = dict(os.environ)
    environment.update(
        {
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": ",".join(settings.kafka_bootstrap_servers),
            "MAHJONG_TOPIC_PREFIX": settings.topic_prefix,
            "MAHJONG_JWT_SECRET": SECRET,
        }
    )
    for name, port in services.items():
        environment[f"MAHJONG_{name.upper()}_GRPC_TARGET"] = f"127.0.0.1:{port}"
    mjctl = str(Path(sys.executable).with_name("mjctl"))
    child = pexpect.spawn(
        mjctl,
        ["play", "--room", "sichuan-novice", "--player", "person"],
        env=environment,
        encoding="utf-8",
        timeout=SCREEN_TIMEOUT_SECONDS,
        dimensions=(60, 200),
    )
    pressed: list[str] = []
    try:
        while child.expect([r"> $", r"Settlement:"]) == 0:
            screen = ANSI.sub("", child.before)
            keys = [line for line in screen.splitlines() if line.startswith("Keys: ")]
            key = key_for(keys[-1]) if keys else None
            if key is not None:
                child.sendline(key)
                pressed.append(key)
        last = ANSI.sub("", child.before).split("Happy Mahjong")[-1]  # the final screen, no prompt
        child.expect(pexpect.EOF)
        settlement = ANSI.sub("", child.before)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, settlement[-2000:]
    assert "Game over:" in last and "seat " in last and "Your hand:" in last
    assert all(f"seat {seat} " in last for seat in range(4))
    # The person's keys were the game's moves: they exchanged, chose a suit, discarded.
    assert "x" in pressed and any(key.isdigit() for key in pressed)
    your_seat = re.search(r"you are seat (\d)", last)
    assert your_seat is not None
    discards = re.search(rf"seat {your_seat.group(1)} you.*\n    discards: (.*)", last)
    assert discards is not None and discards.group(1) != "-"
    assert "player:person" in settlement and "settled:" in settlement and "rake" in settlement
