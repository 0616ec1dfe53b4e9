"""A claim window keeps the deadline it opened with (ARCHITECTURE.md "Information hiding").

When a discard asks several seats (Sichuan's win stage, RULES.md 1.4) and one of them passes, the
pass is hidden from the others; if the table's deadline were the last event's time plus the turn
timeout, the pass would move the deadline the other asked seats see in their views and so tell
them that someone else had been asked and had answered. The window's deadline is therefore fixed
when it opens, on both write paths (a single command, the group commit) and after a reload.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction
from mahjong_table.core.commands import Pass
from mahjong_table.models import table_status
from mahjong_table.selfplay import greedy_command
from mahjong_table.variants import AnyTableState

from .conftest import TableServer
from .test_table_service import PLAYERS


def window_asking_several(table_server: TableServer) -> tuple[str, AnyTableState]:
    """A seeded table played greedily up to a discard that asks at least two seats."""
    session_scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    engine = table_server.engine
    for seed in (58, *range(1, 200)):
        table_id = table_server.open_table(PLAYERS, seed=seed)
        state = engine.read_state(session_scope, table_id)
        while not state.is_over and (state.window is None or len(state.window.pending) < 2):
            state, _envelopes, _answer = engine.act(session_scope, table_id, greedy_command)  # type: ignore[arg-type]
        if not state.is_over:
            return table_id, state
    raise AssertionError("no seed gave a window asking two seats")


def _stored_deadline(table_server: TableServer, table_id: str) -> object:
    with transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        return session.execute(
            sqlalchemy.select(table_status.c.deadline_at).where(table_status.c.table_id == table_id)
        ).scalar_one()


@pytest.mark.parametrize("path", ["act_rpc", "engine", "engine_after_reload"])
def test_another_asked_seats_pass_does_not_move_the_window_deadline_rules_1_4(
    table_server: TableServer, path: str
) -> None:
    table_id, state = window_asking_several(table_server)
    assert state.window is not None
    watcher, passer, *_rest = sorted(state.window.pending)
    before = table_server.view(PLAYERS[watcher], table_id)
    assert before.phase == "claim" and before.HasField("deadline")
    stored_before = _stored_deadline(table_server, table_id)

    if path == "act_rpc":  # the group commit (write_batch)
        request = messages.ActRequest(table_id=table_id, idempotency_key=str(uuid.uuid4()))
        request.__getattribute__("pass").SetInParent()
        table_server.stub_for(PLAYERS[passer]).Act(request)
    else:  # one command alone (write_appended); after a reload the deadline comes from the store
        if path == "engine_after_reload":
            table_server.engine.forget_where(lambda _table_id: True)
        session_scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
        table_server.engine.act(session_scope, table_id, lambda _state: Pass(passer))  # type: ignore[arg-type,misc]

    after = table_server.view(PLAYERS[watcher], table_id)
    assert after.phase == "claim" and after.claimable_tile == before.claimable_tile
    assert after.sequence == before.sequence  # the pass is hidden from the watcher
    assert after.deadline == before.deadline
    assert _stored_deadline(table_server, table_id) == stored_before  # what the deadline worker acts on


def test_the_deadline_moves_again_once_the_window_has_closed_rules_1_4(table_server: TableServer) -> None:
    table_id, state = window_asking_several(table_server)
    assert state.window is not None
    session_scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    opened_with = _stored_deadline(table_server, table_id)
    engine = table_server.engine
    while state.window is not None and not state.is_over:  # every asked seat passes, stage by stage
        seat = min(state.window.pending)
        state, _envelopes, _answer = engine.act(session_scope, table_id, lambda _state, seat=seat: Pass(seat))  # type: ignore[arg-type,misc]
    assert state.is_over or _stored_deadline(table_server, table_id) != opened_with
