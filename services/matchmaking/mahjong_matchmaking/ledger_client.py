"""Matchmaking's one synchronous read of another service: a player's balance, for the room's entry
floor (RULES.md 1.9). The ledger grants a never-seen player their starting beans on this first read,
so a new player can play at once.

Asked on the matchmaking server's event loop (`grpc.aio`): an Enqueue awaits the answer without
holding a thread."""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio
from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.auth import ROLE_OPS, mint_token
from mahjong_platform.config import Settings
from mahjong_platform.errors import ServiceError
from mahjong_platform.grpc_client import bearer_metadata

BALANCE_TIMEOUT_SECONDS = 5.0
SERVICE_IDENTITY = "service.matchmaking"
TOKEN_TTL_SECONDS = 300
TOKEN_RENEW_SECONDS = 60
"""A token is replaced this long before it expires (the ledger allows some clock leeway too)."""


class LedgerUnavailableError(ServiceError):
    """The ledger did not answer: the balance cannot be checked, so nobody is seated."""

    status_code = grpc.StatusCode.UNAVAILABLE


class LedgerBalances:
    """`BalanceLookup` backed by LedgerService.GetBalance, called with a short-lived service token
    (minted once per `TOKEN_TTL_SECONDS - TOKEN_RENEW_SECONDS`, not per call) on an asyncio channel
    opened on the loop of the first call (a channel belongs to one loop)."""

    def __init__(self, settings: Settings) -> None:
        self._target = settings.grpc_target("ledger")
        self._secret = settings.jwt_secret
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stub: ledger_service_pb2_grpc.LedgerServiceStub | None = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._renew_at = 0.0

    def _stub_for_this_loop(self) -> ledger_service_pb2_grpc.LedgerServiceStub:
        loop = asyncio.get_running_loop()
        if self._stub is None or self._loop is not loop:
            self._loop = loop
            self._channel = grpc.aio.insecure_channel(self._target)
            self._stub = ledger_service_pb2_grpc.LedgerServiceStub(self._channel)
        return self._stub

    def _token_metadata(self) -> tuple[tuple[str, str], ...]:
        now = time.time()  # the clock the token's expiry is on
        if now >= self._renew_at:
            token = mint_token(self._secret, SERVICE_IDENTITY, [ROLE_OPS], ttl_seconds=TOKEN_TTL_SECONDS)
            self._metadata = bearer_metadata(token)
            self._renew_at = now + TOKEN_TTL_SECONDS - TOKEN_RENEW_SECONDS
        return self._metadata

    async def __call__(self, player_id: str) -> int:
        request = ledger_service_pb2.GetBalanceRequest(account=f"player:{player_id}")
        try:
            response = await self._stub_for_this_loop().GetBalance(
                request, timeout=BALANCE_TIMEOUT_SECONDS, metadata=self._token_metadata()
            )
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.aio.AioRpcError) else grpc.StatusCode.UNKNOWN
            raise LedgerUnavailableError(
                f"the ledger could not confirm the balance of {player_id!r} ({code.name}); retry"
            ) from None
        return int(response.balance_beans)
