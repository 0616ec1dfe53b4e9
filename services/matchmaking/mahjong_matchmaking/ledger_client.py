"""Matchmaking's one synchronous read of another service: a player's balance, for the room's entry
floor (RULES.md 1.9). The ledger grants a never-seen player their starting beans on this first read,
so a new player can play at once."""

from __future__ import annotations

import grpc
from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.auth import ROLE_OPS, mint_token
from mahjong_platform.config import Settings
from mahjong_platform.errors import ServiceError
from mahjong_platform.grpc_client import open_channel

BALANCE_TIMEOUT_SECONDS = 5.0
SERVICE_IDENTITY = "service.matchmaking"
TOKEN_TTL_SECONDS = 300


class LedgerUnavailableError(ServiceError):
    """The ledger did not answer: the balance cannot be checked, so nobody is seated."""

    status_code = grpc.StatusCode.UNAVAILABLE


class LedgerBalances:
    """`BalanceLookup` backed by LedgerService.GetBalance, called with a short-lived service token."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.jwt_secret
        channel = open_channel(
            settings.grpc_target("ledger"),
            lambda: mint_token(secret, SERVICE_IDENTITY, [ROLE_OPS], ttl_seconds=TOKEN_TTL_SECONDS),
        )
        self._stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)

    def __call__(self, player_id: str) -> int:
        request = ledger_service_pb2.GetBalanceRequest(account=f"player:{player_id}")
        try:
            response = self._stub.GetBalance(request, timeout=BALANCE_TIMEOUT_SECONDS)
        except grpc.RpcError as error:
            raise LedgerUnavailableError(
                f"the ledger could not confirm the balance of {player_id!r} ({error.code().name}); retry"
            ) from None
        return int(response.balance_beans)
