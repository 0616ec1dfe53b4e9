"""``mjctl token``: mint a development token for trying the API by hand (never for production)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("token", help="mint a dev JWT signed with MAHJONG_JWT_SECRET")
    parser.add_argument("--player", required=True, help="player id (the token's subject)")
    parser.add_argument("--role", action="append", default=[], choices=["ops", "finance"], help="repeatable")
    parser.add_argument("--ttl-seconds", type=int, default=3600, help="at most 30 days (2592000)")
    parser.add_argument(
        "--member",
        action="store_true",
        help="the player is a Happy Points (欢乐积分计划) member: may enter members-only rooms",
    )
    parser.set_defaults(handler=_run)


def _run(arguments: argparse.Namespace) -> int:
    from mahjong_platform.auth import mint_token
    from mahjong_platform.config import load_settings

    settings = load_settings()
    print(
        mint_token(
            settings.jwt_secret,
            arguments.player,
            arguments.role,
            arguments.ttl_seconds,
            member=arguments.member,
        )
    )
    return 0
