"""The auth interceptor on a real in-process gRPC server, called by a real client over loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from mahjong.v1 import (
    envelope_pb2,
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    table_service_pb2,
    table_service_pb2_grpc,
)
from mahjong_platform.auth import (
    EVERY_CALLER,
    MAXIMUM_TOKEN_TTL_SECONDS,
    OPERATIONS_ROLES,
    AuthInterceptor,
    Identity,
    current_identity,
    identity_scope,
    mint_token,
    verify_token,
)
from mahjong_platform.config import load_settings
from mahjong_platform.errors import UnauthenticatedError
from mahjong_platform.grpc_client import bearer_metadata, open_channel
from mahjong_platform.grpc_server import RunningServer, register_service, serve

SECRET = "test-secret-that-is-long-enough-for-hs256-keys"
OTHER_SECRET = "another-secret-that-is-long-enough-for-hs256-keys"
DEPOSIT = "/mahjong.v1.LedgerService/Deposit"
GET_BALANCE = "/mahjong.v1.LedgerService/GetBalance"
WATCH = "/mahjong.v1.TableService/Watch"
ROLES = {DEPOSIT: OPERATIONS_ROLES, GET_BALANCE: EVERY_CALLER, WATCH: EVERY_CALLER}


class FakeLedger(ledger_service_pb2_grpc.LedgerServiceServicer):
    """Answers with what the handler sees of the caller, so tests can check the identity arrived."""

    def GetBalance(
        self, request: ledger_service_pb2.GetBalanceRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        identity = current_identity()
        return ledger_service_pb2.GetBalanceResponse(
            account=f"player:{identity.player_id}", balance_beans=100
        )

    def Deposit(
        self, request: ledger_service_pb2.DepositRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.DepositResponse:
        return ledger_service_pb2.DepositResponse(balance_beans=request.beans)


class FakeTable(table_service_pb2_grpc.TableServiceServicer):
    """A Watch stream that names the watcher in every event's stream id."""

    def Watch(
        self, request: table_service_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[envelope_pb2.Envelope]:
        for sequence in range(1, 4):
            yield envelope_pb2.Envelope(
                stream_id=f"{request.table_id}:{current_identity().player_id}", sequence=sequence
            )


@pytest.fixture
def server() -> Iterator[RunningServer]:
    settings = load_settings({"MAHJONG_JWT_SECRET": SECRET})
    running = serve(
        [
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                FakeLedger(),  # type: ignore[abstract]  # implements only what the tests call
            ),
            register_service(
                table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                FakeTable(),  # type: ignore[abstract]  # implements only what the tests call
            ),
        ],
        "127.0.0.1:0",
        settings,
        interceptors=[AuthInterceptor(SECRET, method_roles=ROLES)],
    )
    yield running
    running.stop(grace_seconds=0)


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel


def call_get_balance(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...] = ()) -> grpc.RpcError:
    stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
    with pytest.raises(grpc.RpcError) as raised:
        stub.GetBalance(ledger_service_pb2.GetBalanceRequest(), metadata=metadata, timeout=60)
    return raised.value


def test_a_call_without_a_token_is_unauthenticated(channel: grpc.Channel) -> None:
    error = call_get_balance(channel)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "missing 'authorization' metadata" in error.details()


def test_an_expired_token_is_unauthenticated(channel: grpc.Channel) -> None:
    two_hours_ago = int(time.time()) - 7200
    token = mint_token(SECRET, "alice", ttl_seconds=3600, issued_at_epoch_seconds=two_hours_ago)
    error = call_get_balance(channel, bearer_metadata(token))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "expired" in error.details()


def test_a_token_signed_with_another_secret_is_unauthenticated(channel: grpc.Channel) -> None:
    error = call_get_balance(channel, bearer_metadata(mint_token(OTHER_SECRET, "alice")))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "signature does not verify" in error.details()


@pytest.mark.parametrize(
    ("header", "expected_message"),
    [
        ("Basic dXNlcjpwYXNz", "expected 'Bearer <token>'"),
        ("Bearer", "expected 'Bearer <token>'"),
        ("Bearer two tokens", "expected 'Bearer <token>'"),
        ("Bearer not-a-jwt", "not a well-formed JWT"),
    ],
)
def test_a_malformed_authorization_header_is_unauthenticated(
    channel: grpc.Channel, header: str, expected_message: str
) -> None:
    error = call_get_balance(channel, (("authorization", header),))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert expected_message in error.details()


def test_a_token_without_the_roles_claim_is_unauthenticated(channel: grpc.Channel) -> None:
    import jwt

    token = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")
    error = call_get_balance(channel, bearer_metadata(token))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "'roles'" in error.details()


def test_a_token_with_the_none_algorithm_is_unauthenticated(channel: grpc.Channel) -> None:
    import jwt

    token = jwt.encode(
        {"sub": "mallory", "roles": ["ops"], "exp": int(time.time()) + 60}, None, algorithm="none"
    )
    error = call_get_balance(channel, bearer_metadata(token))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_player_without_an_operations_role_may_not_deposit(channel: grpc.Channel) -> None:
    stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
    token = mint_token(SECRET, "alice", roles=["player"])
    with pytest.raises(grpc.RpcError) as raised:
        stub.Deposit(ledger_service_pb2.DepositRequest(beans=5), metadata=bearer_metadata(token), timeout=60)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert raised.value.details() == (
        "/mahjong.v1.LedgerService/Deposit needs one of the roles finance, ops; "
        "player 'alice' has roles: player"
    )


@pytest.mark.parametrize("role", sorted(OPERATIONS_ROLES))
def test_either_operations_role_may_deposit(channel: grpc.Channel, role: str) -> None:
    stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
    token = mint_token(SECRET, "operator", roles=[role])
    response = stub.Deposit(
        ledger_service_pb2.DepositRequest(beans=5), metadata=bearer_metadata(token), timeout=5
    )
    assert response.balance_beans == 5


def test_a_good_token_reaches_the_handler_with_the_identity(server: RunningServer) -> None:
    with open_channel(f"127.0.0.1:{server.port}", token=mint_token(SECRET, "alice")) as channel:
        response = ledger_service_pb2_grpc.LedgerServiceStub(channel).GetBalance(
            ledger_service_pb2.GetBalanceRequest(), timeout=5
        )
    assert response.account == "player:alice"


def test_a_server_stream_sees_the_identity_in_every_step(server: RunningServer) -> None:
    with open_channel(f"127.0.0.1:{server.port}", token=lambda: mint_token(SECRET, "bob")) as channel:
        stream = table_service_pb2_grpc.TableServiceStub(channel).Watch(
            table_service_pb2.WatchRequest(table_id="table-7"), timeout=5
        )
        events = list(stream)
    assert [(event.stream_id, event.sequence) for event in events] == [
        ("table-7:bob", 1),
        ("table-7:bob", 2),
        ("table-7:bob", 3),
    ]


def test_a_server_stream_without_a_token_is_unauthenticated(channel: grpc.Channel) -> None:
    stream = table_service_pb2_grpc.TableServiceStub(channel).Watch(
        table_service_pb2.WatchRequest(table_id="table-7"), timeout=5
    )
    with pytest.raises(grpc.RpcError) as raised:
        list(stream)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_health_is_public(server: RunningServer) -> None:
    from mahjong_platform.grpc_client import check_health

    assert check_health(f"127.0.0.1:{server.port}", "mahjong.v1.LedgerService")


def test_verify_token_returns_the_player_and_roles() -> None:
    token = mint_token(SECRET, "carol", roles=["ops", "player"])
    assert verify_token(SECRET, token) == Identity("carol", frozenset({"ops", "player"}))


def test_current_identity_outside_an_authenticated_call_is_refused() -> None:
    with pytest.raises(UnauthenticatedError):
        current_identity()
    with identity_scope(Identity("dave", frozenset())):
        assert current_identity().player_id == "dave"
    with pytest.raises(UnauthenticatedError):
        current_identity()


def test_a_method_missing_from_the_role_table_is_refused_whoever_calls(channel: grpc.Channel) -> None:
    stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
    for roles in ((), ("ops",), ("finance",)):
        token = mint_token(SECRET, "alice", roles=roles)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ListEntries(
                ledger_service_pb2.ListEntriesRequest(), metadata=bearer_metadata(token), timeout=5
            )
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "not in the service's role table" in raised.value.details()


def test_a_token_without_issued_at_is_unauthenticated(channel: grpc.Channel) -> None:
    import jwt

    token = jwt.encode({"sub": "alice", "roles": [], "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")
    error = call_get_balance(channel, bearer_metadata(token))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "'iat'" in error.details()


def test_a_token_living_longer_than_the_maximum_is_unauthenticated(channel: grpc.Channel) -> None:
    import jwt

    now = int(time.time())
    claims = {"sub": "alice", "roles": ["ops"], "iat": now, "exp": now + MAXIMUM_TOKEN_TTL_SECONDS + 60}
    error = call_get_balance(channel, bearer_metadata(jwt.encode(claims, SECRET, algorithm="HS256")))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "lives longer than" in error.details()


@pytest.mark.parametrize("subject", ["", " alice", "a" * 65, "player:alice", "../etc", "élan", 42])
def test_a_token_whose_subject_is_no_player_id_is_unauthenticated(
    channel: grpc.Channel, subject: object
) -> None:
    import jwt

    now = int(time.time())
    claims = {"sub": subject, "roles": [], "iat": now, "exp": now + 60}
    error = call_get_balance(channel, bearer_metadata(jwt.encode(claims, SECRET, algorithm="HS256")))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "sub" in error.details().lower()


def test_the_member_claim_reaches_the_identity_and_defaults_to_false() -> None:
    assert verify_token(SECRET, mint_token(SECRET, "erin", member=True)).member
    assert not verify_token(SECRET, mint_token(SECRET, "erin")).member
