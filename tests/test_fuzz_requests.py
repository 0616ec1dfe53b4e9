"""Fuzzing every request of every service (issue 17): bad input is a clear error, never INTERNAL.

All four services run in process on migrated SQLite databases, with the production role tables,
error mappings and auth interceptors: scoring and ledger in one thread-pool server, the table and
matchmaking services each on its asyncio server (matchmaking asks an in-process ledger for balances).
Hypothesis builds every request message of every method from the generated descriptors, field by
field, mixing random values with hand-picked edge values (huge and negative
integers, very long strings, unknown enum numbers, out-of-range timestamps, SQL-looking ids, the
real table's id) and calls it as a seated player, a stranger, ops or finance. For every call:

- the status is never INTERNAL or UNKNOWN (a bug), and an error text is at most
  `ERROR_TEXT_MAX_CHARACTERS` long;
- a rejected unary call wrote nothing to its service's database (SQLite's ``data_version``; the
  ledger may still record a first-seen player's starting grant that matchmaking's balance check
  asked for, which is the ledger's own answered call).

`make test` runs `DEFAULT_EXAMPLES` examples per method; ``MAHJONG_FUZZ_EXAMPLES=2000 pytest
tests/test_fuzz_requests.py`` runs a longer profile.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mahjong.v1 import (
    ledger_service_pb2,
    match_events_pb2,
    matchmaking_service_pb2,
    rooms_pb2,
    scoring_service_pb2,
    table_service_pb2,
)
from mahjong_ledger.app import definition as ledger_definition
from mahjong_ledger.messages import PAGE_TOKEN_VERSION
from mahjong_ledger.servicer import ERROR_MAPPING as LEDGER_ERRORS
from mahjong_ledger.servicer import METHOD_ROLES as LEDGER_ROLES
from mahjong_ledger.settings import LedgerSettings
from mahjong_matchmaking.__main__ import DEFINITION as MATCHMAKING
from mahjong_matchmaking.servicer import METHOD_ROLES as MATCHMAKING_ROLES
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, AioRunningServer, serve_aio
from mahjong_platform.auth import AuthInterceptor, mint_token
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import utc_now
from mahjong_platform.errors import ERROR_TEXT_MAX_CHARACTERS
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import bearer_metadata
from mahjong_platform.grpc_server import RunningServer, serve
from mahjong_platform.service_runtime import migrate
from mahjong_platform.topics import Topics
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_scoring.servicer import METHOD_ROLES as SCORING_ROLES
from mahjong_table.__main__ import TableProcess
from mahjong_table.__main__ import definition as table_definition
from mahjong_table.servicer import METHOD_ROLES as TABLE_ROLES
from mahjong_table.servicer import TABLE_ERROR_MAPPING, Presence
from mahjong_table.tables import TableEngine
from sqlalchemy import Engine

SECRET = "fuzz-test-secret-that-is-long-enough-for-hs256"
DEFAULT_EXAMPLES = 25
EXAMPLES = int(os.environ.get("MAHJONG_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
SEATED = ["fuzz-east", "fuzz-south", "fuzz-west", "fuzz-north"]
IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "seated": (SEATED[0], ()),
    "stranger": ("fuzz-stranger", ()),
    "ops": ("fuzz-ops", ("ops",)),
    "finance": ("fuzz-finance", ("finance",)),
}
CALL_TIMEOUT_SECONDS = 5.0
STREAM_TIMEOUT_SECONDS = 0.5
SERVICES = [
    matchmaking_service_pb2.DESCRIPTOR.services_by_name["MatchmakingService"],
    table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
    scoring_service_pb2.DESCRIPTOR.services_by_name["ScoringService"],
    ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
]
METHODS = [method for service in SERVICES for method in service.methods]

INT64_EDGES = [0, 1, -1, 2**31 - 1, 2**31, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), 10**12]
INT32_EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 13, 108, 144]
STRING_EDGES = [
    "",
    " ",
    "x" * 201,
    "x" * 70_000,
    "1m",
    "5p",
    "1z",
    "123m",
    "0m",
    "99s",
    "m",
    "player:fuzz-east",
    "house:rake",
    "world",
    "grant:fuzz-east",
    "'; DROP TABLE tickets; --",
    "\x00",
    "🀄" * 40,
    "../../etc/passwd",
    "sichuan-novice",
    "formula-fan",
    "sichuan_bloody",
    "formula",
    "double",
    "add_one",
    "fan_plus_8",
    "east",
    "MTp4fDk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5",  # a page token shape
]


def page_token(posting_id: int) -> str:
    """A page token of the ledger's shape for fuzz-east's account (see `mahjong_ledger.messages`)."""
    text = f"{PAGE_TOKEN_VERSION}|player:fuzz-east|{posting_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


FIELD_EDGES: dict[str, list[str]] = {
    "page_token": [page_token(2**63), page_token(2**64 + 3), page_token(0), page_token(1), "@@@"],
    "account": ["", "player:fuzz-east", "player:" + "x" * 300, "world", "house:rake", "player:"],
    "idempotency_key": ["k", "grant:fuzz-east", "x" * 129, ""],
}
"""Edge values for fields whose names say what they hold, picked more often than the others."""


def scalar_strategy(field: FieldDescriptor, table_id: str) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        edges = [*STRING_EDGES, table_id, page_token(2**63), page_token(2**64 + 3), page_token(-5)]
        named = FIELD_EDGES.get(field.name, [])
        if field.name == "table_id":
            named = [table_id, "x" * 201, "x" * 70_000]
        return st.one_of(st.sampled_from(named or edges), st.sampled_from(edges), st.text(max_size=30))
    if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return st.one_of(st.sampled_from(INT64_EDGES), st.integers(-(2**63), 2**63 - 1))
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.one_of(st.sampled_from([0, 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return st.one_of(st.sampled_from(INT32_EDGES), st.integers(-(2**31), 2**31 - 1))
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=40)
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-3, 1000))  # unknown numbers too
    raise AssertionError(f"no strategy for {field.full_name}")


def timestamp_strategy() -> st.SearchStrategy[dict[str, int]]:
    seconds = st.sampled_from([0, -1, -62135596801, 253402300800, 2**40, -(2**40), 1_767_225_600])
    nanos = st.sampled_from([0, 999_999_999, 1_000_000_000, -1, 2**31 - 1])
    return st.fixed_dictionaries({"seconds": seconds, "nanos": nanos})


def message_strategy(descriptor: Descriptor, table_id: str, depth: int = 0) -> st.SearchStrategy[Any]:
    """Messages of ``descriptor`` with any subset of fields set to random or edge values."""
    message_class = message_factory.GetMessageClass(descriptor)
    if descriptor.full_name == "google.protobuf.Timestamp":
        return timestamp_strategy().map(lambda values: message_class(**values))
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3:
                continue
            value: st.SearchStrategy[Any] = message_strategy(field.message_type, table_id, depth + 1)
        else:
            value = scalar_strategy(field, table_id)
        if field.is_repeated:
            value = st.lists(value, max_size=5 if depth == 0 else 2)
        fields[field.name] = st.one_of(st.none(), value)
    return st.fixed_dictionaries(fields).map(lambda values: build(message_class, values))


def build(message_class: Any, values: dict[str, Any]) -> Any:
    message = message_class()
    for name, value in values.items():
        if value is None:
            continue
        field = message.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value:
                    getattr(message, name).add().CopyFrom(item)
            else:
                getattr(message, name).extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


@dataclass
class Stack:
    server: RunningServer
    ledger: RunningServer
    scoring: RunningServer
    table: AioRunningServer
    matchmaking: AioRunningServer
    channel: grpc.Channel
    table_channel: grpc.Channel
    matchmaking_channel: grpc.Channel
    table_id: str
    databases: dict[str, Path]
    """Each service's database, by the service's full name."""


def open_table(engine: TableEngine, engine_db: Engine) -> str:
    table_id = str(uuid.uuid4())
    assigned = match_events_pb2.TableAssigned(
        table_id=table_id,
        room_id="sichuan-novice",
        seed=11,
        seats=[match_events_pb2.SeatAssignment(seat=seat, player_id=p) for seat, p in enumerate(SEATED)],
        room=rooms_pb2.Room(
            room_id="sichuan-novice",
            rules=rooms_pb2.RoomRules(
                variant=1, coefficient=100, rake_beans=50, turn_timeout_ms=600_000, reconnect_grace_ms=600_000
            ),
        ),
    )
    with transaction(create_session_factory(engine_db)) as session:
        envelopes = engine.open_from_assignment(session, assigned, causation_id="fuzz")
    engine.committed(envelopes)
    return table_id


def start_stack(directory: Path) -> Stack:
    urls = {name: sqlite_url(directory, name) for name in ("matchmaking", "table", "scoring", "ledger")}
    ledger_process = ledger_definition(LedgerSettings(starting_grant_beans=1_000))
    definitions = {"matchmaking": MATCHMAKING, "scoring": SCORING, "ledger": ledger_process}
    for name, definition in definitions.items():
        migrate(definition, urls[name])
    settings = load_settings({"MAHJONG_JWT_SECRET": SECRET, "MAHJONG_DATA_DIR": str(directory)})
    migrate(table_definition(settings), urls["table"])
    engines = {name: create_engine_for(url) for name, url in urls.items()}
    topics = Topics.with_prefix("fuzz.")
    # The ledger serves first, so matchmaking's balance look-ups reach it.
    ledger = serve(
        ledger_process.registrations(engines["ledger"], settings, topics),
        "127.0.0.1:0",
        settings,
        interceptors=[AuthInterceptor(SECRET, LEDGER_ROLES)],
        extra_error_mapping=LEDGER_ERRORS,
    )
    # And a scoring service of its own, which the ledger's Reconcile asks for its instructions.
    scoring = serve(
        SCORING.registrations(engines["scoring"], settings, topics),
        "127.0.0.1:0",
        settings,
        interceptors=[AuthInterceptor(SECRET, SCORING_ROLES)],
    )
    with_ledger: Settings = load_settings(
        {
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_DATA_DIR": str(directory),
            "MAHJONG_LEDGER_GRPC_TARGET": f"127.0.0.1:{ledger.port}",
            "MAHJONG_SCORING_GRPC_TARGET": f"127.0.0.1:{scoring.port}",
        }
    )
    table_engine = TableEngine(EventStore(topics), utc_now)
    table_process = TableProcess(table_engine, Presence())
    registrations = [
        *SCORING.registrations(engines["scoring"], with_ledger, topics),
        *ledger_process.registrations(engines["ledger"], with_ledger, topics),
    ]
    server = serve(
        registrations,
        "127.0.0.1:0",
        with_ledger,
        interceptors=[AuthInterceptor(SECRET, {**SCORING_ROLES, **LEDGER_ROLES})],
        extra_error_mapping=LEDGER_ERRORS,
    )
    matchmaking = serve_aio(
        MATCHMAKING.registrations(engines["matchmaking"], with_ledger, topics),
        "127.0.0.1:0",
        with_ledger,
        interceptors=[AioAuthInterceptor(SECRET, MATCHMAKING_ROLES)],
    )
    table = serve_aio(
        table_process.registrations(engines["table"], with_ledger, topics),
        "127.0.0.1:0",
        with_ledger,
        interceptors=[AioAuthInterceptor(SECRET, TABLE_ROLES)],
        extra_error_mapping=TABLE_ERROR_MAPPING,
    )
    table_id = open_table(table_engine, engines["table"])
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    table_channel = grpc.insecure_channel(f"127.0.0.1:{table.port}")
    matchmaking_channel = grpc.insecure_channel(f"127.0.0.1:{matchmaking.port}")
    return Stack(
        server,
        ledger,
        scoring,
        table,
        matchmaking,
        channel,
        table_channel,
        matchmaking_channel,
        table_id,
        {f"mahjong.v1.{name.capitalize()}Service": directory / f"{name}.sqlite3" for name in urls},
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("fuzz"))
    yield running
    running.channel.close()
    running.table_channel.close()
    running.matchmaking_channel.close()
    running.table.stop(0)
    running.matchmaking.stop(0)
    running.server.stop(0)
    running.ledger.stop(0)
    running.scoring.stop(0)


def data_versions(databases: list[Path]) -> list[int]:
    """SQLite's data_version of each database, as seen by a fresh connection: it differs from an
    earlier reading on the same connection when another connection committed a change."""
    return [
        int(connection.execute("PRAGMA data_version").fetchone()[0]) for connection in _connections(databases)
    ]


_OPEN: dict[Path, sqlite3.Connection] = {}


def _connections(databases: list[Path]) -> list[sqlite3.Connection]:
    for path in databases:
        if path not in _OPEN:
            _OPEN[path] = sqlite3.connect(path, check_same_thread=False)
    return [_OPEN[path] for path in databases]


def metadata_of(identity: str) -> tuple[tuple[str, str], ...]:
    player, roles = IDENTITIES[identity]
    return bearer_metadata(mint_token(SECRET, player, roles, member=True))


def call(stack: Stack, method: MethodDescriptor, request: Any, identity: str) -> grpc.RpcError | None:
    """Call ``method``; the error it answered, if any. A stream is read up to its first message."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    response_class = message_factory.GetMessageClass(method.output_type)
    metadata = metadata_of(identity)
    channel = {
        "TableService": stack.table_channel,
        "MatchmakingService": stack.matchmaking_channel,
    }.get(method.containing_service.name, stack.channel)
    try:
        if method.server_streaming:
            stream = channel.unary_stream(
                path,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_class.FromString,
            )(request, metadata=metadata, timeout=STREAM_TIMEOUT_SECONDS)
            try:
                next(iter(stream), None)
            finally:
                stream.cancel()
        else:
            channel.unary_unary(
                path,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_class.FromString,
            )(request, metadata=metadata, timeout=CALL_TIMEOUT_SECONDS)
    except grpc.RpcError as error:
        return error
    return None


def check_call(stack: Stack, method: MethodDescriptor, request: Any, identity: str) -> None:
    database = [stack.databases[method.containing_service.full_name]]
    before = data_versions(database)
    error = call(stack, method, request, identity)
    if error is None:
        return
    code, details = error.code(), error.details() or ""
    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), f"{method.full_name}: {details}"
    assert len(details) <= ERROR_TEXT_MAX_CHARACTERS, f"{method.full_name}: {len(details)} characters"
    if not method.server_streaming and code != grpc.StatusCode.CANCELLED:
        assert data_versions(database) == before, f"{method.full_name} wrote and then failed: {details}"


def requests_for(method: MethodDescriptor, table_id: str) -> st.SearchStrategy[Any]:
    return message_strategy(method.input_type, table_id)


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.full_name)
def test_no_request_is_internal_unknown_over_long_or_a_partial_write(
    stack: Stack, method: MethodDescriptor
) -> None:
    fuzz: Callable[..., None]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=EXAMPLES == DEFAULT_EXAMPLES,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request=requests_for(method, stack.table_id), identity=st.sampled_from(sorted(IDENTITIES)))
    def fuzz(request: Any, identity: str) -> None:
        check_call(stack, method, request, identity)

    fuzz()


def test_the_hand_picked_findings_are_clear_errors(stack: Stack) -> None:
    """Issue 17 item 6, each as it was found: INTERNAL before, INVALID_ARGUMENT now."""
    methods = {method.full_name: method for method in METHODS}
    long_table_id = table_service_pb2.GetViewRequest(table_id="x" * 201)
    huge_page = ledger_service_pb2.ListEntriesRequest(page_token=page_token(2**63))
    out_of_range = ledger_service_pb2.ReconcileRequest()
    getattr(out_of_range, "from").seconds = 2**40
    for name, request, identity in [
        ("mahjong.v1.TableService.GetView", long_table_id, "seated"),
        ("mahjong.v1.LedgerService.ListEntries", huge_page, "seated"),
        ("mahjong.v1.LedgerService.Reconcile", out_of_range, "finance"),
    ]:
        error = call(stack, methods[name], request, identity)
        assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, error)


def test_an_error_quoting_a_megabyte_of_input_stays_short(stack: Stack) -> None:
    methods = {method.full_name: method for method in METHODS}
    request = matchmaking_service_pb2.EnqueueRequest(room_id="r" * 1_000_000, idempotency_key="k")
    error = call(stack, methods["mahjong.v1.MatchmakingService.Enqueue"], request, "stranger")
    assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(error.details()) <= ERROR_TEXT_MAX_CHARACTERS
