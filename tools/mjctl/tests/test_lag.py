"""`mjctl.lag`: the settlement lag read from the ledger topic's records after the run (each game's
`GameEnded` time to the Kafka time of its last `TransferPosted`), with the records built as the
ledger's relay publishes them."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import uuid

import pytest
from mahjong.v1 import envelope_pb2, ledger_events_pb2, settlement_events_pb2, table_events_pb2
from mahjong_platform.envelopes import serialize_envelope
from mjctl.lag import (
    HOPS,
    GameTransfers,
    add_ledger_records,
    add_seat_records,
    add_settlement_records,
    hops_summary,
    lag_hops,
    lag_summary_line,
    settlement_lags,
)

ENDED = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
ENDED_MS = int(ENDED.timestamp() * 1000)
SEQUENCES = itertools.count(1)


@dataclasses.dataclass
class Record:
    key: bytes
    value: bytes
    timestamp: int


def transfer(table_id: str, event_id: str, reason: str, at_ms: int) -> Record:
    envelope = envelope_pb2.Envelope(
        event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, event_id)),
        stream_id=table_id or "player:alice",
        sequence=next(SEQUENCES),
        transfer_posted=ledger_events_pb2.TransferPosted(table_id=table_id, reason=reason),
    )
    return Record(table_id.encode(), serialize_envelope(envelope), at_ms)


def settled_game(table_id: str, first_ms: int, last_ms: int) -> list[Record]:
    """A win transfer, then the four rake transfers (the last lines of every game, RULES.md 1.9)."""
    records = [transfer(table_id, f"{table_id}-win", "win", first_ms)]
    records += [transfer(table_id, f"{table_id}-rake-{seat}", "rake", last_ms) for seat in range(4)]
    return records


def test_a_games_lag_runs_from_its_end_to_its_last_transfer_record() -> None:
    transfers: dict[str, GameTransfers] = {}
    add_ledger_records(settled_game("t1", ENDED_MS + 100, ENDED_MS + 180), {"t1"}, transfers)
    lags, unsettled, last = settlement_lags({"t1": ENDED}, transfers)
    assert lags == [pytest.approx(0.18)] and unsettled == 0
    assert last == (ENDED_MS + 180) / 1000


def test_a_game_without_its_four_rakes_yet_is_unsettled() -> None:
    transfers: dict[str, GameTransfers] = {}
    add_ledger_records(settled_game("t1", ENDED_MS + 10, ENDED_MS + 20)[:4], {"t1"}, transfers)
    assert settlement_lags({"t1": ENDED, "t2": ENDED}, transfers) == ([], 2, 0.0)


def test_other_streams_and_other_games_are_left_out() -> None:
    deposit = transfer("", "d1", "deposit", ENDED_MS + 5)
    deposit.key = b"player:alice"  # an account's stream
    other = settled_game("another-run", ENDED_MS, ENDED_MS + 999)
    transfers: dict[str, GameTransfers] = {}
    add_ledger_records([deposit, *other, *settled_game("t1", ENDED_MS, ENDED_MS + 50)], {"t1"}, transfers)
    assert list(transfers) == ["t1"]


def test_a_record_published_again_keeps_the_first_publications_time() -> None:
    """A relay that restarted before marking its batch sent publishes it again, later."""
    records = settled_game("t1", ENDED_MS + 10, ENDED_MS + 40)
    resent = dataclasses.replace(records[-1], timestamp=ENDED_MS + 5000)
    transfers: dict[str, GameTransfers] = {}
    add_ledger_records([*records, resent], {"t1"}, transfers)
    assert transfers["t1"].rakes == 4
    assert settlement_lags({"t1": ENDED}, transfers)[0] == [pytest.approx(0.04)]


def test_the_summary_line_gives_p50_and_p99_and_the_unsettled() -> None:
    assert lag_summary_line([0.1, 0.2, 0.3], 1) == (
        "settlement lag GameEnded → last TransferPosted over 3 games: p50 200 ms, p99 300 ms, 1 unsettled"
    )
    assert lag_summary_line([], 2) == "settlement lag: no game settled (2 unsettled after 120 s)"


def instruction(table_id: str, event_id: str, reason: str, at_ms: int) -> Record:
    envelope = envelope_pb2.Envelope(
        event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, event_id)),
        stream_id=table_id,
        sequence=next(SEQUENCES),
        settlement_instructed=settlement_events_pb2.SettlementInstructed(table_id=table_id, reason=reason),
    )
    return Record(table_id.encode(), serialize_envelope(envelope), at_ms)


def game_ended(table_id: str, at_ms: int) -> Record:
    envelope = envelope_pb2.Envelope(
        event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{table_id}-ended")),
        stream_id=table_id,
        sequence=next(SEQUENCES),
        game_ended=table_events_pb2.GameEnded(),
    )
    return Record(table_id.encode(), serialize_envelope(envelope), at_ms)


def test_a_games_lag_splits_into_its_three_hops() -> None:
    """Table: the end to its record on the seats topic; scoring: to the last instruction's record;
    the ledger: to the last transfer's record. A re-sent record keeps its first publication's time."""
    ended = {"t1": ENDED, "t2": ENDED, "unsettled": ENDED}
    published: dict[str, int] = {}
    add_seat_records(
        [game_ended("t1", ENDED_MS + 40), game_ended("t1", ENDED_MS + 900), game_ended("t2", ENDED_MS + 10)],
        ended,
        published,
    )
    instructed: dict[str, GameTransfers] = {}
    add_settlement_records(
        [
            instruction("t1", "t1-win", "win", ENDED_MS - 500),
            *[instruction("t1", f"t1-rake-{seat}", "rake", ENDED_MS + 150) for seat in range(4)],
            *[instruction("t2", f"t2-rake-{seat}", "rake", ENDED_MS + 400) for seat in range(4)],
            instruction("other", "other-rake", "rake", ENDED_MS),
        ],
        ended,
        instructed,
    )
    transfers: dict[str, GameTransfers] = {}
    records = settled_game("t1", ENDED_MS + 170, ENDED_MS + 180)
    add_ledger_records([*records, *settled_game("t2", ENDED_MS, ENDED_MS + 450)], ended, transfers)
    hops = lag_hops(ended, published, instructed, transfers)
    assert hops == {
        "table": [pytest.approx(0.04), pytest.approx(0.01)],
        "scoring": [pytest.approx(0.11), pytest.approx(0.39)],
        "ledger": [pytest.approx(0.03), pytest.approx(0.05)],
    }
    summary = hops_summary(hops)
    assert summary["slowest"] == {
        "table": pytest.approx(10),
        "scoring": pytest.approx(390),
        "ledger": pytest.approx(50),
    }
    assert summary["scoring"] == {"p50_ms": pytest.approx(250), "p99_ms": pytest.approx(390)}
    assert hops_summary({hop: [] for hop in HOPS}) == {}
