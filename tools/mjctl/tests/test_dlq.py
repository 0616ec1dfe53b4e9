"""`mjctl dlq` on the real broker and PostgreSQL (issues 13, 14): instructions the ledger cannot apply
are dead-lettered and listed with why; `show` decodes one; `redrive` asks the ledger
(`DeadLetterService.RedriveDeadLetter`), which refuses while its handler still fails, applies them
once after the fix, says "already applied" for one the consumer applied meanwhile, and a second
`redrive` changes nothing. The RPC itself: ops only, INVALID_ARGUMENT for a malformed id, NOT_FOUND
for an entry the dead letter topic lacks, FAILED_PRECONDITION for another service's consumer group.

The fault: the ledger's decoding of settlement instructions is replaced by one with a bug for
instructions whose id starts with "lucky-" (it raises, as a release with that bug would); "the fix"
puts the real decoding back in the running ledger. mjctl runs no ledger code: the re-drive is
applied by the ledger process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from kafka import KafkaProducer
from mahjong.v1 import (
    dead_letter_service_pb2,
    dead_letter_service_pb2_grpc,
    envelope_pb2,
    ledger_service_pb2,
    ledger_service_pb2_grpc,
)
from mahjong_ledger import projection
from mahjong_ledger.app import LedgerProcess
from mahjong_ledger.settings import LedgerSettings
from mahjong_ledger.testing import instruction_envelope, payee
from mahjong_platform.auth import mint_token
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.envelopes import serialize_envelope
from mahjong_platform.grpc_client import bearer_metadata
from mahjong_platform.topics import Topics
from mjctl.__main__ import main

pytestmark = pytest.mark.integration
SECRET = "dead-letter-secret-long-enough-for-hs256-keys"
GRANT = 5_000
PATIENCE_SECONDS = 120.0
BUG = "the decoder of this release cannot read a lucky instruction"


def install_the_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    decode = projection.settlement_order_from_proto

    def buggy(message: Any) -> Any:
        if message.instruction_id.startswith("lucky-"):
            raise ValueError(BUG)
        return decode(message)

    monkeypatch.setattr(projection, "settlement_order_from_proto", buggy)


@pytest.fixture
def environment(
    kafka_bootstrap_servers: str,
    unique_prefix: str,
    postgres_database_factory: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    variables = {
        "MAHJONG_JWT_SECRET": SECRET,
        "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
        "MAHJONG_TOPIC_PREFIX": unique_prefix,
        "MAHJONG_TOPIC_PARTITIONS": "2",
        "MAHJONG_LEDGER_DATABASE_URL": postgres_database_factory("ledger"),
        "MAHJONG_STARTING_GRANT_BEANS": str(GRANT),
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MAHJONG_RUN_SERVICES", "ledger")  # mjctl dlq asks only the ledger
    return variables


@pytest.fixture
def ledger(
    environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, ledger_service_pb2_grpc.LedgerServiceStub]]:
    settings = load_settings(environment)
    process = LedgerProcess(settings, LedgerSettings(starting_grant_beans=GRANT)).start(address="127.0.0.1:0")
    assert process.server is not None
    target = f"127.0.0.1:{process.server.port}"
    monkeypatch.setenv("MAHJONG_LEDGER_GRPC_TARGET", target)  # where mjctl dlq dials the ledger
    channel = grpc.insecure_channel(target)
    yield settings, ledger_service_pb2_grpc.LedgerServiceStub(channel)
    channel.close()
    process.stop()


OPS = bearer_metadata(mint_token(SECRET, "operator", ["ops"]))


def balance(stub: ledger_service_pb2_grpc.LedgerServiceStub, player: str) -> int:
    request = ledger_service_pb2.GetBalanceRequest(account=f"player:{player}")
    return int(stub.GetBalance(request, metadata=OPS).balance_beans)


def transfers(stub: ledger_service_pb2_grpc.LedgerServiceStub, table_id: str) -> list[str]:
    request = ledger_service_pb2.GetGameStatementRequest(table_id=table_id)
    return [transfer.instruction_id for transfer in stub.GetGameStatement(request, metadata=OPS).transfers]


def publish(settings: Settings, envelopes: list[envelope_pb2.Envelope]) -> None:
    producer = KafkaProducer(bootstrap_servers=list(settings.kafka_bootstrap_servers), acks="all")
    topic = Topics.with_prefix(settings.topic_prefix).settlement
    for envelope in envelopes:
        producer.send(topic, key=envelope.stream_id.encode(), value=serialize_envelope(envelope))
    producer.flush(30)
    producer.close()


def mjctl(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    capsys.readouterr()
    exit_code = main(["dlq", *arguments])
    return exit_code, capsys.readouterr().out


def listed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    exit_code, output = mjctl(capsys, "list", "--json")
    assert exit_code == 0
    return [json.loads(line) for line in output.splitlines()]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {PATIENCE_SECONDS:.0f} s"
        time.sleep(0.3)


def test_dead_letters_are_listed_shown_and_re_driven_exactly_once_after_the_fix(
    ledger: tuple[Settings, ledger_service_pb2_grpc.LedgerServiceStub],
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, stub = ledger
    with pytest.MonkeyPatch.context() as bug:
        install_the_bug(bug)
        first_id, second_id, first, second = dead_letter_two_instructions(settings, stub, capsys)
        # Before the fix: the handler still fails, nothing is applied or recorded.
        exit_code, output = mjctl(capsys, "redrive", first_id)
        assert exit_code == 1 and "still fails" in output
        assert [entry["status"] for entry in listed(capsys)] == ["pending", "pending"]
        assert balance(stub, "alice") == GRANT
    # The fix is deployed (the bug's patch is gone). The second instruction arrives again on its
    # topic, as a re-send would bring it, and the live consumer applies it.
    publish(settings, [second])
    wait_for(lambda: balance(stub, "alice") == GRANT + 300, "the re-sent instruction applied by the consumer")
    re_drive_and_check(stub, capsys, first_id, second_id, first)


def dead_letter_two_instructions(
    settings: Settings, stub: ledger_service_pb2_grpc.LedgerServiceStub, capsys: pytest.CaptureFixture[str]
) -> tuple[str, str, envelope_pb2.Envelope, envelope_pb2.Envelope]:
    assert balance(stub, "alice") == GRANT and balance(stub, "bob") == GRANT  # the starting grants
    first = instruction_envelope("lucky-1", "player:bob", [payee("player:alice", 700)], table_id="t-dlq")
    second = instruction_envelope(
        "lucky-2", "player:bob", [payee("player:alice", 300)], table_id="t-dlq", sequence=2
    )
    publish(settings, [first, second])
    wait_for(lambda: len(listed(capsys)) == 2, "two dead letters")

    entries = listed(capsys)
    assert [entry["event_id"] for entry in entries] == [first.event_id, second.event_id]
    for entry in entries:
        assert entry["consumer_group"] == "mahjong-ledger"
        assert entry["source"].startswith(f"{settings.topic_prefix}mahjong.settlement.v1[")
        assert entry["event_type"] == "settlement_instructed"
        assert entry["status"] == "pending"
        assert BUG in entry["reason"]
    first_id, second_id = entries[0]["id"], entries[1]["id"]
    exit_code, shown = mjctl(capsys, "show", first_id)
    assert exit_code == 0
    details = json.loads(shown)
    assert details["event"]["settlement_instructed"]["instruction_id"] == "lucky-1"
    assert details["event"]["settlement_instructed"]["payer_account"] == "player:bob"
    return first_id, second_id, first, second


def re_drive_and_check(
    stub: ledger_service_pb2_grpc.LedgerServiceStub,
    capsys: pytest.CaptureFixture[str],
    first_id: str,
    second_id: str,
    first: envelope_pb2.Envelope,
) -> None:
    exit_code, output = mjctl(capsys, "redrive", "--all")
    assert exit_code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith(f"{first_id}: mahjong-ledger settlement_instructed {first.event_id}: applied")
    assert lines[1].startswith(f"{second_id}: ") and "already applied" in lines[1]
    assert balance(stub, "alice") == GRANT + 700 + 300
    assert balance(stub, "bob") == GRANT - 700 - 300
    assert sorted(transfers(stub, "t-dlq")) == ["lucky-1", "lucky-2"]

    # Again: nothing changes, and the list says what was done.
    exit_code, output = mjctl(capsys, "redrive", first_id, second_id)
    assert exit_code == 0
    assert all("already re-driven" in line for line in output.splitlines())
    statuses = [entry["status"] for entry in listed(capsys)]
    assert statuses[0].startswith("re-driven (applied)")
    assert statuses[1].startswith("re-driven (already_applied)")
    assert balance(stub, "alice") == GRANT + 1_000
    assert sorted(transfers(stub, "t-dlq")) == ["lucky-1", "lucky-2"]


def test_an_id_that_is_not_a_dead_letter_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dlq", "show", "not-an-id"]) == 2
    assert "<partition>:<offset>" in capsys.readouterr().err


def dead_letter_service() -> dead_letter_service_pb2_grpc.DeadLetterServiceStub:
    """The ledger's DeadLetterService, where mjctl dials it."""
    channel = grpc.insecure_channel(load_settings().grpc_target("ledger"))
    return dead_letter_service_pb2_grpc.DeadLetterServiceStub(channel)


def publish_dead_letter(settings: Settings, letter: envelope_pb2.DeadLetter) -> None:
    producer = KafkaProducer(bootstrap_servers=list(settings.kafka_bootstrap_servers), acks="all")
    producer.send(Topics.with_prefix(settings.topic_prefix).dead_letter, value=letter.SerializeToString())
    producer.flush(30)
    producer.close()


def test_the_ledgers_dead_letter_service_is_ops_only_and_refuses_bad_ids_changing_nothing(
    ledger: tuple[Settings, ledger_service_pb2_grpc.LedgerServiceStub],
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, stub = ledger
    dead_letters = dead_letter_service()
    request = dead_letter_service_pb2.RedriveDeadLetterRequest
    player = bearer_metadata(mint_token(SECRET, "alice", []))
    for call, message in (
        (dead_letters.RedriveDeadLetter, request(entry_id="0:0")),
        (dead_letters.ListRedrives, dead_letter_service_pb2.ListRedrivesRequest()),
    ):
        with pytest.raises(grpc.RpcError) as denied:
            call(message, metadata=player)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for malformed in ("", "0", "a:1", "-1:2", "1:2:3"):
        with pytest.raises(grpc.RpcError) as refused:
            dead_letters.RedriveDeadLetter(request(entry_id=malformed), metadata=OPS)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, malformed
        assert "<partition>:<offset>" in (refused.value.details() or "")
    for absent_id in ("0:999999", "1:99999999999999999999999", "77:0", "99999999999999999999:0"):
        with pytest.raises(grpc.RpcError) as absent:
            dead_letters.RedriveDeadLetter(request(entry_id=absent_id), metadata=OPS)
        assert absent.value.code() == grpc.StatusCode.NOT_FOUND, absent_id

    # A dead letter of another service's consumer group, holding an instruction the ledger could
    # apply: the ledger does not apply it.
    stranger = instruction_envelope("stranger-1", "player:bob", [payee("player:alice", 100)], table_id="t-x")
    letter = envelope_pb2.DeadLetter(
        topic=Topics.with_prefix(settings.topic_prefix).settlement,
        partition=0,
        offset=0,
        key=b"t-x",
        value=serialize_envelope(stranger),
        error="not the ledger's",
        consumer_group="scoring-settlement",
    )
    publish_dead_letter(settings, letter)
    wait_for(lambda: len(listed(capsys)) == 1, "the stranger's dead letter")
    (entry,) = listed(capsys)
    assert entry["status"].startswith("? ")  # no service asked runs scoring-settlement
    with pytest.raises(grpc.RpcError) as elsewhere:
        dead_letters.RedriveDeadLetter(request(entry_id=entry["id"]), metadata=OPS)
    assert elsewhere.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "scoring-settlement" in (elsewhere.value.details() or "")
    exit_code, output = mjctl(capsys, "redrive", entry["id"])
    assert exit_code == 1 and "no reachable service" in output
    assert balance(stub, "alice") == GRANT
    answer = dead_letters.ListRedrives(dead_letter_service_pb2.ListRedrivesRequest(), metadata=OPS)
    assert list(answer.consumer_groups) == ["mahjong-ledger"] and not answer.redrives
