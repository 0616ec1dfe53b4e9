"""A table process keeps memory for its live tables, not for every table it ever played: an ended
table's state, event tail, version and deadline are forgotten `ENDED_TABLES_KEPT_SECONDS` after its
end (`TableEngine.forget_ended`, asked at every commit), and the seats' absences are kept for live
tables only (`Presence.keep_only`, from the deadline worker's once-a-second pass). Before, each
game left about 345 KB behind (the table process grew 97 -> 362 MB over 768 games)."""

from __future__ import annotations

from mahjong_platform.envelopes import utc_now
from mahjong_table.deadlines import DeadlineWorker
from mahjong_table.servicer import Presence
from mahjong_table.tables import ENDED_TABLES_KEPT_SECONDS

from .conftest import TableServer

PLAYERS = ["east", "south", "west", "north"]


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def play_out(server: TableServer, table_id: str) -> None:
    """Every turn times out at once (turn_timeout_ms 0): the server plays the table to its end."""
    worker = DeadlineWorker(server.session_factory, server.engine, Presence(), utc_now)  # type: ignore[arg-type]
    for _ in range(2_000):
        if not worker.expire_deadlines():
            break
    assert server.view("east", table_id).phase == "ended"


def test_an_ended_table_is_forgotten_after_a_while_and_still_reads_the_same_from_the_store(
    table_server: TableServer,
) -> None:
    clock = FakeMonotonic()
    engine = table_server.engine
    engine.monotonic = clock
    ended = table_server.open_table(PLAYERS, seed=3, turn_timeout_ms=0)
    opened = engine.cache.get(ended)
    assert opened is not None and not opened.is_over
    play_out(table_server, ended)
    final_view = table_server.view("east", ended)
    assert engine.in_memory(ended)  # just ended: its seats' feeds still send the end from memory

    clock.now += ENDED_TABLES_KEPT_SECONDS - 0.5
    live = table_server.open_table(PLAYERS, seed=4)  # a commit: asks which ended tables are due
    assert engine.in_memory(ended)

    clock.now += 1.0
    other = table_server.open_table(PLAYERS, seed=5)
    assert not engine.in_memory(ended)
    assert engine.in_memory(live) and engine.in_memory(other)  # live tables stay
    assert engine.cache.get(ended) is None and engine.changes.version(ended) == 0
    # An earlier commit of it published only now (out of order, paused that long) is not put back
    # in memory, where it would pass for the table's latest state.
    engine.published(opened, [], None)
    assert not engine.in_memory(ended)

    # Read from the store again: the same final view, for every seat.
    assert table_server.view("east", ended) == final_view
    for player in PLAYERS[1:]:
        assert table_server.view(player, ended).phase == "ended"
    # That read cached it again, as an ended table: forgotten again after the same while.
    assert engine.in_memory(ended)
    clock.now += ENDED_TABLES_KEPT_SECONDS + 0.5
    engine.forget_ended()
    assert not engine.in_memory(ended)
    assert engine.in_memory(live) and engine.in_memory(other)


def test_games_played_one_after_another_leave_only_the_live_tables_in_memory(
    table_server: TableServer,
) -> None:
    clock = FakeMonotonic()
    table_server.engine.monotonic = clock
    played = []
    for seed in range(4):
        table_id = table_server.open_table(PLAYERS, seed=seed, turn_timeout_ms=0)
        play_out(table_server, table_id)
        played.append(table_id)
        clock.now += ENDED_TABLES_KEPT_SECONDS + 0.5
    assert table_server.engine.in_memory(played[-1])  # nothing committed since it ended
    live = table_server.open_table(PLAYERS, seed=9)
    assert [table_id for table_id in played if table_server.engine.in_memory(table_id)] == []
    assert table_server.engine.in_memory(live)


def test_a_seat_with_no_stream_open_is_kept_only_as_an_absence_and_only_for_a_live_table() -> None:
    now = [0.0]
    presence = Presence(clock=lambda: now[0])
    presence.connected("t", 0)
    presence.connected("t", 0)  # two streams of one seat (a reconnect before the old one closed)
    presence.disconnected("t", 0)
    assert presence.remembered() == 1 and presence.away_seconds("t", 0) == 0.0
    presence.disconnected("t", 0)
    now[0] = 5.0
    assert presence.remembered() == 1  # its absence, since 0.0, not a count of no streams
    assert presence.away_seconds("t", 0) == 5.0
    presence.connected("u", 1)
    presence.disconnected("u", 1)
    presence.connected("v", 2)  # open: counted whatever the live tables
    presence.keep_only({"t"})
    assert presence.remembered() == 2
    assert presence.away_seconds("t", 0) == 5.0  # a live table's absence keeps its start
    presence.keep_only(set())
    assert presence.remembered() == 1  # v's open stream
    assert presence.away_seconds("t", 0) == 0.0  # asked again: a fresh grace from now


def test_the_deadline_workers_pass_drops_the_absences_of_ended_tables(table_server: TableServer) -> None:
    presence = Presence()
    worker = DeadlineWorker(table_server.session_factory, table_server.engine, presence, utc_now)  # type: ignore[arg-type]
    ended = table_server.open_table(PLAYERS, seed=3, turn_timeout_ms=0)
    live = table_server.open_table(PLAYERS, seed=4)
    for table_id in (ended, live):
        for seat in range(4):
            presence.connected(table_id, seat)
            presence.disconnected(table_id, seat)
    play_out(table_server, ended)
    assert presence.remembered() == 8
    worker.escape_disconnected()  # nobody is past the grace (10 minutes): nothing acted
    assert presence.remembered() == 4
    assert table_server.view("east", live).phase != "ended"
