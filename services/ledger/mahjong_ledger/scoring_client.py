"""The ledger's one read of the scoring service: the instructions scoring emitted in a window, for
reconcile's "ledger postings equal the scoring projection" (`reconcile.MATCHES_SCORING`).

`ScoringServiceInstructions` is the `reconcile.ScoringInstructions` hook over
`ScoringService.ListSettlementInstructions` (ops/finance only), called with a short-lived
finance token of the ledger's own identity and paged through to the end. Scoring not answering
is UNAVAILABLE for the caller of Reconcile: a reconcile that could not compare says so rather
than passing.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping
from typing import Final

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from mahjong.v1 import scoring_service_pb2, scoring_service_pb2_grpc
from mahjong_platform.auth import ROLE_FINANCE, mint_token
from mahjong_platform.config import Settings
from mahjong_platform.errors import InvalidArgumentError, ServiceError
from mahjong_platform.grpc_client import open_channel

from mahjong_ledger.reconcile import InstructedBeans

SERVICE_IDENTITY: Final = "service.ledger"
TOKEN_TTL_SECONDS: Final = 300
PAGE_SIZE: Final = 5_000
PAGE_TIMEOUT_SECONDS: Final = 30.0
BUDGET_SECONDS_MAX: Final = 300.0
"""The longest one reconcile waits for scoring's whole list (and never past its caller's deadline)."""
INSTRUCTIONS_MAX: Final = 2_000_000
"""The most instructions one reconcile compares (held in memory); a larger window is refused."""


class ScoringUnavailableError(ServiceError):
    """The scoring service did not answer: the postings cannot be compared with its instructions."""

    status_code = grpc.StatusCode.UNAVAILABLE


@dataclasses.dataclass(frozen=True)
class ScoringServiceInstructions:
    """`ScoringInstructions` read from the scoring service over gRPC, every page of the window,
    before `deadline` (`time.monotonic()` seconds; None: each page gets `PAGE_TIMEOUT_SECONDS`)."""

    stub: scoring_service_pb2_grpc.ScoringServiceStub
    deadline: float | None = None

    def within(self, seconds: float) -> ScoringServiceInstructions:
        """The same source, giving up after `seconds` from now (a caller's remaining time)."""
        return dataclasses.replace(self, deadline=time.monotonic() + seconds)

    @classmethod
    def from_settings(cls, settings: Settings) -> ScoringServiceInstructions:
        """Dial ``settings.grpc_target("scoring")`` with the ledger's own finance token."""
        secret = settings.jwt_secret
        channel = open_channel(
            settings.grpc_target("scoring"),
            lambda: mint_token(secret, SERVICE_IDENTITY, [ROLE_FINANCE], ttl_seconds=TOKEN_TTL_SECONDS),
        )
        return cls(scoring_service_pb2_grpc.ScoringServiceStub(channel))

    def instructions(
        self, from_time: datetime.datetime | None, to_time: datetime.datetime | None
    ) -> Mapping[str, InstructedBeans]:
        """Every instruction id scoring emitted in [from, to), with its game and requested beans."""
        request = scoring_service_pb2.ListSettlementInstructionsRequest(page_size=PAGE_SIZE)
        if from_time is not None:
            getattr(request, "from").CopyFrom(_timestamp(from_time))
        if to_time is not None:
            request.to.CopyFrom(_timestamp(to_time))
        found: dict[str, InstructedBeans] = {}
        while True:
            try:
                page = self.stub.ListSettlementInstructions(request, timeout=self._page_timeout())
            except grpc.RpcError as error:
                raise ScoringUnavailableError(
                    "the scoring service did not list its instructions "
                    f"({error.code().name}); the postings could not be compared with scoring; retry"
                ) from None
            for instruction in page.instructions:
                found[instruction.instruction_id] = InstructedBeans(
                    instruction.table_id, instruction.requested_beans
                )
            if len(found) > INSTRUCTIONS_MAX:
                raise InvalidArgumentError(
                    f"the window holds more than {INSTRUCTIONS_MAX:,} instructions; reconcile a shorter one"
                )
            if not page.next_page_token:
                return found
            request.page_token = page.next_page_token

    def _page_timeout(self) -> float:
        if self.deadline is None:
            return PAGE_TIMEOUT_SECONDS
        return max(0.0, min(PAGE_TIMEOUT_SECONDS, self.deadline - time.monotonic()))


def _timestamp(moment: datetime.datetime) -> Timestamp:
    timestamp = Timestamp()
    timestamp.FromDatetime(moment)
    return timestamp
