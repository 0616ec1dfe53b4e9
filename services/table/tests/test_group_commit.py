"""Group commit: commands queued together are decided in arrival order and written in one
transaction, with every guarantee of a single command (expected versions, idempotency keys,
rejections that write nothing, a conflict with another writer re-decided on the stored stream)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pytest
import sqlalchemy
from mahjong_platform.config import ConfigurationError
from mahjong_platform.database import create_session_factory, read_transaction, transaction
from mahjong_platform.envelopes import utc_now
from mahjong_platform.event_store import EventStore
from mahjong_table import codec, commits, stages
from mahjong_table import tables as tables_module
from mahjong_table.commits import Accepted, GroupCommitter, Outcome, Rejection
from mahjong_table.core.commands import Discard, TableCommand
from mahjong_table.selfplay import greedy_command
from mahjong_table.servicer import TABLE_ERROR_MAPPING
from mahjong_table.tables import TableEngine, first_answers, remember_answers
from mahjong_table.variants import AnyTableState, fold

from .conftest import TableServer

PLAYERS = ["east", "south", "west", "north"]


def greedy(state: AnyTableState) -> TableCommand:
    return greedy_command(state)  # type: ignore[arg-type]  # Sichuan tables only here


def committer_of(
    server: TableServer, engine: TableEngine | None = None, *, on_loop: bool | None = False
) -> GroupCommitter:
    """A committer whose writer thread starts at `start()`; `submit_async` on the writer thread
    too unless `on_loop` says otherwise (None: the default, by the database)."""
    session_factory = server.session_factory
    return GroupCommitter(
        engine or server.engine,
        lambda: transaction(session_factory),  # type: ignore[arg-type]
        TABLE_ERROR_MAPPING,
        autostart=False,
        on_loop=on_loop,
    )


def outcomes(futures: list[concurrent.futures.Future[Outcome]]) -> list[Outcome]:
    return [future.result(timeout=60) for future in futures]


def stored_state(server: TableServer, table_id: str) -> AnyTableState:
    with read_transaction(server.session_factory) as session:  # type: ignore[arg-type]
        envelopes = server.engine.store.load(session, table_id)
    return fold(codec.event_of(envelope) for envelope in envelopes)


def test_commands_queued_together_commit_as_one_batch_decided_in_arrival_order(
    table_server: TableServer,
) -> None:
    tables = [table_server.open_table(PLAYERS, seed=seed) for seed in (3, 4)]
    before = {table_id: stored_state(table_server, table_id) for table_id in tables}
    committer = committer_of(table_server)
    futures = [committer.submit(table_id, greedy) for _ in range(4) for table_id in tables]
    committer.start()
    results = outcomes(futures)
    committer.stop()
    assert committer.batches == 1
    assert all(isinstance(result, Accepted) and result.envelopes for result in results)
    for table_id in tables:
        base = before[table_id]
        mine = [
            result for result in results if isinstance(result, Accepted) and result.state.table_id == table_id
        ]
        # Each command was decided on the state its predecessor left: sequences follow on.
        sequences = [envelope.sequence for result in mine for envelope in result.envelopes]
        assert sequences == list(range(base.version + 1, base.version + 1 + len(sequences)))
        stored = stored_state(table_server, table_id)
        assert stored.version == mine[-1].state.version == table_server.engine.cached_state(table_id).version  # type: ignore[union-attr]
        assert stored == mine[-1].state


def test_a_batch_and_a_command_alone_fold_each_commands_events_once_as_they_are_decided(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit and `TableEngine.act` take the state after a command from `execute`, which
    folded its events as it decided them: the engine folds none of them again, and the states
    answered are the states the stored streams fold to."""
    tables = [table_server.open_table(PLAYERS, seed=seed) for seed in (23, 24)]
    folded: list[int] = []

    def counting_fold(events: Any, state: AnyTableState | None = None) -> AnyTableState:
        events = list(events)
        folded.append(len(events))
        return fold(events, state)

    monkeypatch.setattr(tables_module, "fold", counting_fold)
    committer = committer_of(table_server)
    futures = [committer.submit(table_id, greedy) for _ in range(3) for table_id in tables]
    committer.start()
    results = outcomes(futures)
    committer.stop()
    alone, envelopes, _answer = table_server.engine.act(
        lambda: transaction(table_server.session_factory),  # type: ignore[arg-type]
        tables[0],
        greedy,
    )
    assert envelopes and not any(folded), folded
    assert all(isinstance(result, Accepted) and result.envelopes for result in results)
    assert stored_state(table_server, tables[0]) == alone
    assert stored_state(table_server, tables[1]) == results[-1].state  # type: ignore[union-attr]


def test_a_key_repeated_in_one_batch_gets_the_first_answer_and_appends_once(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=5)
    version = stored_state(table_server, table_id).version
    committer = committer_of(table_server)

    def answer_of(state: AnyTableState, envelopes: list) -> bytes:
        return f"{state.version}:{len(envelopes)}".encode()

    key = ("east", "key-1", "digest-1")
    futures = [committer.submit(table_id, greedy, answer_of, idempotency=key) for _ in range(3)]
    committer.start()
    first, second, third = outcomes(futures)
    committer.stop()
    assert isinstance(first, Accepted) and isinstance(second, Accepted) and isinstance(third, Accepted)
    assert first.answer == second.answer == third.answer
    assert second.envelopes == third.envelopes == []
    assert stored_state(table_server, table_id).version == version + len(first.envelopes)


def test_a_refused_command_writes_nothing_and_the_rest_of_the_batch_commits(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=6)
    committer = committer_of(table_server)
    discard_in_the_exchange: Callable[[AnyTableState], TableCommand] = lambda _state: Discard(0, "1m")  # noqa: E731
    futures = [
        committer.submit(table_id, greedy),
        committer.submit(table_id, discard_in_the_exchange),
        committer.submit(table_id, greedy),
    ]
    committer.start()
    first, refused, third = outcomes(futures)
    committer.stop()
    assert isinstance(refused, Rejection) and refused.status_code == grpc.StatusCode.FAILED_PRECONDITION
    assert isinstance(first, Accepted) and isinstance(third, Accepted)
    assert third.envelopes[0].sequence == first.state.version + 1
    assert stored_state(table_server, table_id) == third.state


def test_a_batch_behind_another_writer_is_re_decided_on_the_stored_stream(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS, seed=8)
    session_scope = lambda: read_transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    stale = table_server.engine.read_state(session_scope, table_id)  # now cached
    # Another engine (another process) writes to the table; this one's cache does not know.
    other = TableEngine(EventStore(), utc_now)
    session_factory = create_session_factory(table_server.session_factory.kw["bind"])  # type: ignore[attr-defined]
    other.act(lambda: transaction(session_factory), table_id, greedy)
    assert table_server.engine.cached_state(table_id) is stale
    committer = committer_of(table_server)
    futures = [committer.submit(table_id, greedy), committer.submit(table_id, greedy)]
    committer.start()
    results = outcomes(futures)
    committer.stop()
    assert all(isinstance(result, Accepted) for result in results)
    stored = stored_state(table_server, table_id)
    assert stored.version > stale.version + 1  # both writers' events, one gapless stream
    assert stored == results[-1].state  # type: ignore[union-attr]


def test_a_caller_that_gives_up_costs_the_rest_of_its_batch_nothing(table_server: TableServer) -> None:
    """An Act whose client went away (its asyncio task cancelled, which cancels the submitted
    future) before its batch is decided is skipped and writes nothing; the batch's other commands
    still get their answers (a cancelled future once made the answering fail for all of them)."""
    table_id = table_server.open_table(PLAYERS, seed=9)
    version = stored_state(table_server, table_id).version
    committer = committer_of(table_server)
    gone, waiting = committer.submit(table_id, greedy), committer.submit(table_id, greedy)
    assert gone.cancel()
    committer.start()
    result = waiting.result(timeout=60)
    committer.stop()
    assert isinstance(result, Accepted) and result.envelopes
    assert result.envelopes[0].sequence == version + 1  # the cancelled command decided nothing
    assert stored_state(table_server, table_id) == result.state


def test_callers_on_an_event_loop_get_a_batchs_outcomes_in_one_wake_up_of_the_loop(
    table_server: TableServer,
) -> None:
    """`submit_async`: the writer hands a batch's outcomes to the loop at once (one call per
    batch, not one per command), and its tables' watchers are told in one call too."""
    tables = [table_server.open_table(PLAYERS, seed=seed) for seed in (10, 11, 12)]
    committer = committer_of(table_server)
    told: list[list[str]] = []
    table_server.engine.changes.add_listener(lambda table_ids: told.append(list(table_ids)))

    async def play() -> tuple[list[Outcome], int]:
        loop = asyncio.get_running_loop()
        handed = 0
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counted(*arguments: Any, **keywords: Any) -> Any:
            nonlocal handed
            handed += 1
            return call_soon_threadsafe(*arguments, **keywords)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        tasks = [
            asyncio.ensure_future(committer.submit_async(table_id, greedy))
            for _ in range(2)
            for table_id in tables
        ]
        await asyncio.sleep(0)  # every command queued before the writer starts
        committer.start()
        results = await asyncio.gather(*tasks)
        return results, handed

    results, handed = asyncio.run(play())
    committer.stop()
    assert committer.batches == 1 and handed == 1
    assert all(isinstance(result, Accepted) and result.envelopes for result in results)
    assert told == [tables]
    for table_id, result in zip(tables, results[len(tables) :], strict=True):
        assert isinstance(result, Accepted) and stored_state(table_server, table_id) == result.state


def test_a_batch_is_published_then_answered_then_its_watchers_are_told(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the commit: the states (a caller that reads once answered sees its own write), then
    the answers handed to the event loop, then the watchers, so the loop runs the answers before
    the view updates the commit wakes. With stage times on (`stages`), each command is stamped
    at every stage of the committer, in order."""
    monkeypatch.setattr(stages, "ENABLED", True)
    tables = [table_server.open_table(PLAYERS, seed=seed) for seed in (14, 15)]
    committer = committer_of(table_server)
    told: list[tuple[int, list[int]]] = []

    async def play() -> tuple[list[Outcome], list[stages.Timeline]]:
        loop = asyncio.get_running_loop()
        handed: list[object] = []
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counted(*arguments: Any, **keywords: Any) -> Any:
            handed.append(arguments[0])
            return call_soon_threadsafe(*arguments, **keywords)

        def listener(table_ids: Sequence[str]) -> None:
            versions = [table_server.engine.cached_state(table_id) for table_id in table_ids]
            told.append((len(handed), [state.version if state else 0 for state in versions]))

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        table_server.engine.changes.add_listener(listener)
        timelines = [stages.timeline() for _ in tables]
        tasks = [
            asyncio.ensure_future(committer.submit_async(table_id, greedy, stamps=stamps))
            for table_id, stamps in zip(tables, timelines, strict=True)
        ]
        await asyncio.sleep(0)
        committer.start()
        return await asyncio.gather(*tasks), [stamps for stamps in timelines if stamps is not None]

    results, timelines = asyncio.run(play())
    committer.stop()
    assert all(isinstance(result, Accepted) for result in results)
    assert told == [(1, [result.state.version for result in results if isinstance(result, Accepted)])]
    for stamps in timelines:
        path = stamps[stages.QUEUED : stages.RESOLVED + 1]
        assert all(path) and path == sorted(path), stamps


def test_an_event_loop_caller_that_gives_up_before_its_batch_writes_nothing(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=13)
    version = stored_state(table_server, table_id).version
    committer = committer_of(table_server)

    async def play() -> Outcome:
        gone = asyncio.ensure_future(committer.submit_async(table_id, greedy))
        waiting = asyncio.ensure_future(committer.submit_async(table_id, greedy))
        await asyncio.sleep(0)  # both queued
        gone.cancel()
        await asyncio.sleep(0)  # the cancellation reached the queued command
        committer.start()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        return await waiting

    result = asyncio.run(play())
    committer.stop()
    assert isinstance(result, Accepted) and result.envelopes[0].sequence == version + 1
    assert stored_state(table_server, table_id) == result.state


@pytest.mark.parametrize("on_loop", [True, None], ids=["on the loop", "the default on SQLite"])
def test_on_sqlite_a_loop_turns_commands_commit_as_one_batch_on_the_loops_own_thread(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch, on_loop: bool | None
) -> None:
    """`submit_async` on the loop: the commands submitted in one turn of the loop are one batch,
    decided, written and committed by a later callback of the loop, on its own thread (no writer
    thread: none is started); published, then answered, then the watchers told, each command
    stamped at every stage in order; the stored streams are the answered states. The default on
    SQLite (`commits.WRITES_ON_LOOP`, unless MAHJONG_TABLE_WRITES_ON_LOOP=0); the other tests here
    ask for the writer thread."""
    monkeypatch.setattr(stages, "ENABLED", True)
    tables = [table_server.open_table(PLAYERS, seed=seed) for seed in (16, 17, 18)]
    committer = committer_of(table_server, on_loop=on_loop)
    deciding_threads: set[int] = set()
    told: list[list[str]] = []
    table_server.engine.changes.add_listener(lambda table_ids: told.append(list(table_ids)))

    def greedy_here(state: AnyTableState) -> TableCommand:
        deciding_threads.add(threading.get_ident())
        return greedy(state)

    async def play() -> tuple[list[Outcome], list[stages.Timeline], int]:
        timelines = [stages.timeline() for _ in range(2) for _table_id in tables]
        tasks = [
            asyncio.ensure_future(committer.submit_async(table_id, greedy_here, stamps=stamps))
            for table_id, stamps in zip(tables * 2, timelines, strict=True)
        ]
        results = await asyncio.gather(*tasks)
        return results, [stamps for stamps in timelines if stamps is not None], threading.get_ident()

    results, timelines, loop_thread = asyncio.run(play())
    committer.stop()
    assert deciding_threads == {loop_thread} and committer._thread is None
    assert committer.batches == 1 and told == [tables]
    assert all(isinstance(result, Accepted) and result.envelopes for result in results)
    for table_id, first, second in zip(tables, results[: len(tables)], results[len(tables) :], strict=True):
        assert isinstance(first, Accepted) and isinstance(second, Accepted)
        assert second.envelopes[0].sequence == first.envelopes[-1].sequence + 1
        assert stored_state(table_server, table_id) == second.state
    for stamps in timelines:
        path = stamps[stages.QUEUED : stages.RESOLVED + 1]
        assert all(path) and path == sorted(path), stamps


@pytest.mark.parametrize("turns", [1, 2])
def test_on_the_loop_a_batch_takes_the_commands_of_its_turns(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch, turns: int
) -> None:
    """A loop batch runs `LOOP_BATCH_TURNS` turns of the loop after its first command (two by
    default): a command submitted by a callback of the next turn (a Play stream's read that
    completed meanwhile) is the next batch with one turn, and commits in the same transaction
    with two; each is answered after its own commit."""
    assert commits.LOOP_BATCH_TURNS == 2
    monkeypatch.setattr(commits, "LOOP_BATCH_TURNS", turns)
    tables = [table_server.open_table(PLAYERS, seed=seed) for seed in (21, 22)]
    committer = committer_of(table_server, on_loop=True)

    async def play() -> list[Outcome]:
        first = asyncio.ensure_future(committer.submit_async(tables[0], greedy))
        await asyncio.sleep(0)  # a turn: the first is queued and its batch scheduled
        second = asyncio.ensure_future(committer.submit_async(tables[1], greedy))
        return list(await asyncio.gather(first, second))

    results = asyncio.run(play())
    assert committer.batches == (2 if turns == 1 else 1) and committer.commands == 2
    for table_id, result in zip(tables, results, strict=True):
        assert isinstance(result, Accepted) and result.envelopes
        assert stored_state(table_server, table_id) == result.state


def test_on_the_loop_a_caller_that_gives_up_before_its_batch_runs_writes_nothing(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=19)
    version = stored_state(table_server, table_id).version
    committer = committer_of(table_server, on_loop=True)

    async def play() -> Outcome:
        gone = asyncio.ensure_future(committer.submit_async(table_id, greedy))
        waiting = asyncio.ensure_future(committer.submit_async(table_id, greedy))
        await asyncio.sleep(0)  # both queued, their batch scheduled
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        return await waiting

    result = asyncio.run(play())
    assert isinstance(result, Accepted) and result.envelopes[0].sequence == version + 1
    assert stored_state(table_server, table_id) == result.state
    assert committer.batches == 1 and committer.commands == 1


def test_the_stored_first_answers_are_found_for_exactly_the_keys_asked(table_server: TableServer) -> None:
    """`first_answers` (on SQLite one query per 256 keys, padded to a power of two): the answers of the
    keys asked, none of a key that shares its table and idempotency key but not its player."""
    stored = {
        (f"table-{index % 3}", f"player-{index % 5}", f"key-{index}"): (
            f"digest-{index}",
            bytes([index % 256]) * 3,
        )
        for index in range(300)
    }
    with transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        remember_answers(session, stored)
    asked = [*list(stored)[:290], ("table-0", "nobody", "key-0"), ("table-9", "player-0", "key-1")]
    with read_transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        found = first_answers(session, asked)
        assert first_answers(session, []) == {}
    assert found == {key: stored[key] for key in list(stored)[:290]}


def test_the_first_answers_query_searches_the_primary_key_instead_of_scanning(
    table_server: TableServer,
) -> None:
    """The writer looks up every batch's idempotency keys; a query that scanned `table_answers`
    would cost each batch time in proportion to every answer ever stored. SQLite's own plan of
    each statement `first_answers` runs must search the primary key, for one key and for many."""
    engine = table_server.session_factory.kw["bind"]  # type: ignore[attr-defined]
    assert engine.dialect.name == "sqlite"  # the PostgreSQL path is one expanding IN on an index
    statements: list[tuple[str, Any]] = []

    def remember(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        if "FROM table_answers" in statement:
            statements.append((statement, parameters))

    sqlalchemy.event.listen(engine, "before_cursor_execute", remember)
    try:
        with read_transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
            for count in (1, 3, 40):
                first_answers(session, [(f"table-{i}", f"player-{i}", f"key-{i}") for i in range(count)])
    finally:
        sqlalchemy.event.remove(engine, "before_cursor_execute", remember)
    assert len(statements) >= 3
    with engine.connect() as connection:
        for statement, parameters in statements:
            plan = [
                row[3] for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
            ]
            assert any("SEARCH table_answers" in step for step in plan), plan
            assert not any("SCAN table_answers" in step for step in plan), plan


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MAHJONG_TABLE_WRITES_ON_LOOP", "yes"),
        ("MAHJONG_TABLE_WRITES_ON_LOOP", ""),
        ("MAHJONG_TABLE_LOOP_BATCH_TURNS", "0"),
        ("MAHJONG_TABLE_LOOP_BATCH_TURNS", "9"),
        ("MAHJONG_TABLE_LOOP_BATCH_TURNS", "-1"),
        ("MAHJONG_TABLE_LOOP_BATCH_TURNS", "two"),
    ],
)
def test_a_bad_loop_commit_setting_stops_the_process_naming_its_variable(variable: str, value: str) -> None:
    """The loop commit's two tuning variables are checked as `mahjong_platform.config` checks the
    others: a value the process cannot run with is a `ConfigurationError` naming the variable."""
    setting = {
        "MAHJONG_TABLE_WRITES_ON_LOOP": commits.writes_on_loop_setting,
        "MAHJONG_TABLE_LOOP_BATCH_TURNS": commits.loop_batch_turns_setting,
    }[variable]
    with pytest.raises(ConfigurationError, match=variable):
        setting({variable: value})


def test_the_loop_commit_settings_read_their_defaults_and_values() -> None:
    assert commits.writes_on_loop_setting({}) is True
    assert commits.writes_on_loop_setting({"MAHJONG_TABLE_WRITES_ON_LOOP": "0"}) is False
    assert commits.loop_batch_turns_setting({}) == 2
    assert commits.loop_batch_turns_setting({"MAHJONG_TABLE_LOOP_BATCH_TURNS": "1"}) == 1
    assert (
        commits.loop_batch_turns_setting(
            {"MAHJONG_TABLE_LOOP_BATCH_TURNS": str(commits.LOOP_BATCH_TURNS_MAX)}
        )
        == 8
    )
