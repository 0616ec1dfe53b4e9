"""``mjctl bots``: the command line of the bots (`mjctl.bots`), one process or, with ``--processes``
or ``--json``, spread over several (`mjctl.load`).

Its own module so that the bots do not import the load runner that imports them, and light: the
bots (gRPC, the stubs) are imported only by the process that runs them, not by the parent of
``--processes`` (its CPU counts as the bots').
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mjctl.bot_options import PLAY_HOLD_IDLE_UPDATES_MS

if TYPE_CHECKING:
    import grpc


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bots", help="run bot players against the running services")
    parser.add_argument("--room", default="sichuan-novice", help="room id (see ListRooms)")
    parser.add_argument("--players", type=int, default=4, help="number of bots, a multiple of 4")
    parser.add_argument("--games", type=int, default=1, help="stop after this many finished games")
    parser.add_argument(
        "--settlement-lag",
        action="store_true",
        help="also measure each game's lag from GameEnded to its last ledger posting: read from the ledger "
        "topic on Kafka once, after the run (polled from the ledger with a finance token when Kafka cannot "
        "be reached within 5 s)",
    )
    parser.add_argument(
        "--think-ms",
        type=int,
        default=0,
        help="each bot waits this long before each decision (a human's pace)",
    )
    parser.add_argument(
        "--hold-idle-updates-ms",
        type=int,
        default=PLAY_HOLD_IDLE_UPDATES_MS,
        metavar="MS",
        help="with --processes or --json (the grpc.aio bots' Play streams): hold an update that gives the "
        "bot nothing to decide up to this long and merge the next into it (PlayOptions."
        "hold_idle_updates_ms, 0..1000; 0: every update at once)",
    )
    parser.add_argument(
        "--processes", type=int, default=1, help="spread the bots over this many processes (the client's CPU)"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write the run's figures as JSON (for make bench-system)"
    )
    parser.add_argument(
        "--starting-balance",
        type=int,
        default=0,
        metavar="BEANS",
        help="each bot starts with exactly this many beans instead of the starting grant and is topped "
        "up to it before each later game (deposits with a finance token), so a run in a low-floor room "
        "such as sichuan-cap64-practice produces short payers (RULES.md 1.9)",
    )
    parser.set_defaults(handler=_run)


def _run(arguments: argparse.Namespace) -> int:
    if arguments.processes > 1 or arguments.json:
        from mjctl.load import run_load

        return run_load(arguments)
    from mahjong_platform.auth import mint_token
    from mahjong_platform.config import load_settings
    from mahjong_platform.grpc_client import open_channel

    from mjctl.bots import BelowEntryFloorError, run_bots, starting_balance_funder

    settings = load_settings()

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        # Bots are Happy Points members, so they may play the members-only Formula rooms too.
        token = mint_token(settings.jwt_secret, player_id, ttl_seconds=24 * 3600, member=True)
        return open_channel(settings.grpc_target(service), token)  # type: ignore[arg-type]

    probe = None
    if arguments.settlement_lag:
        from mjctl.lag import settlement_lag_probe

        probe = settlement_lag_probe(settings)
    fund = None
    if arguments.starting_balance:
        finance_token = mint_token(settings.jwt_secret, "bots-finance", ["finance"], ttl_seconds=24 * 3600)
        ledger = open_channel(settings.grpc_target("ledger"), finance_token)
        fund = starting_balance_funder(ledger, arguments.starting_balance)
    try:
        report = run_bots(
            arguments.room,
            arguments.players,
            arguments.games,
            channel_for,
            on_game_ended=None if probe is None else probe.game_ended,
            think_seconds=arguments.think_ms / 1000,
            fund=fund,
        )
    except BelowEntryFloorError as error:
        print(f"mjctl bots: {error}", file=sys.stderr)
        return 2
    for line in report.summary_lines():
        print(line)
    if probe is not None:
        print(probe.summary_line())
    return 0
