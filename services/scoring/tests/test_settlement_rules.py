"""Every settlement rule of RULES.md 1.5-1.10, from protobuf table events through `game_facts` and the
pure game settlement: table-driven, each case named after the RULES.md section it checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from mahjong.v1 import settlement_events_pb2
from mahjong_scoring.game_facts import GameFactsError
from mahjong_scoring.game_settlement import new_game_settlement, settle_table_event, settle_table_events
from mahjong_scoring.testing import TableScript, room_rules

# Deal D (dealer seat 0; missing suits s, m, p, m):
# seat 0 waits on 1m / 9p once 5s is discarded; seat 1 waits on 2s / 5s; seat 2 is not ready;
# seat 3 holds three suits (a flower pig at the end).
DEAL_D = ["11234567888m99p5s", "123456789p2255s", "11335779s24699m", "123m1122456p789s"]
MISSING_D = "smpm"

Line = tuple[str, str, tuple[tuple[str, int], ...]]


def _short(account: str) -> str:
    return account.removeprefix("player:")


def lines_of(
    instructions: tuple[settlement_events_pb2.SettlementInstructed, ...], *, rake: bool = False
) -> list[Line]:
    return [
        (
            instruction.reason,
            _short(instruction.payer_account),
            tuple((_short(payee.account), payee.points) for payee in instruction.payees),
        )
        for instruction in instructions
        if rake or instruction.reason != "rake"
    ]


def script_d(**rules: object) -> TableScript:
    return TableScript(rules=room_rules(**rules)).open(DEAL_D, MISSING_D)


def discard_win(script: TableScript) -> None:
    script.discard(0, "5s")
    script.win(1, "5s", "discard", from_seat=0)
    script.draw(2, "1s")


def self_draw(script: TableScript) -> None:
    script.discard(0, "5s")
    script.passes(1, "5s")
    script.draw(1, "2s")
    script.win(1, "2s", "self_draw")
    script.draw(2, "1s")


def exposed_kong(script: TableScript) -> None:
    script.discard(0, "5s")
    script.draw(1, "8m")
    script.discard(1, "8m")
    script.kong(0, "8m", "exposed", from_seat=1)
    script.draw(0, "4p", from_tail=True)
    script.discard(0, "9p")


def concealed_kong(script: TableScript) -> None:
    script.discard(0, "5s")
    script.draw(1, "1s")
    script.discard(1, "1s")
    script.draw(0, "8m")
    script.kong(0, "8m", "concealed")
    script.draw(0, "4p", from_tail=True)
    script.discard(0, "9p")


def added_kong(script: TableScript) -> None:
    script.discard(0, "5s")
    script.draw(3, "1s")
    script.discard(3, "1m")
    script.pong(0, 3, "1m")
    script.discard(0, "9p")
    script.draw(1, "3s")
    script.discard(1, "3s")
    script.draw(0, "1m")
    script.kong(0, "1m", "added")
    script.passes(1, "1m")
    script.draw(0, "4p", from_tail=True)
    script.discard(0, "4p")


def call_transfer_one_winner(script: TableScript) -> None:
    script.discard(0, "9p")
    script.draw(1, "8m")
    script.discard(1, "8m")
    script.kong(0, "8m", "exposed", from_seat=1)
    script.draw(0, "4p", from_tail=True)
    script.discard(0, "5s")
    script.win(1, "5s", "discard", from_seat=0, after_kong=True)
    script.draw(2, "1s")


def flower_pig_not_ready_kong_refund(script: TableScript) -> None:
    concealed_kong(script)
    script.draw(1, "9s")
    script.discard(1, "9s")
    script.wall_exhausted()
    script.ended("wall_exhausted")


def transferred_kong_is_not_refunded(script: TableScript) -> None:
    call_transfer_one_winner(script)
    script.discard(2, "1s")
    script.wall_exhausted()
    script.ended("wall_exhausted")


def escape_of_a_non_winner(script: TableScript) -> None:
    script.discard(0, "5s")
    script.passes(1, "5s")
    script.left(2)


def escape_of_a_winner(script: TableScript) -> None:
    discard_win(script)
    script.left(1, had_won=True)


@dataclass(frozen=True)
class Case:
    id: str
    play: Callable[[TableScript], None]
    expected: list[Line]
    rules: dict[str, object] | None = None


CASES = [
    Case("1.5-exposed-kong-discarder-pays-2", exposed_kong, [("exposed_kong", "p1", (("p0", 2),))]),
    Case(
        "1.5-concealed-kong-every-other-pays-2",
        concealed_kong,
        [("concealed_kong", payer, (("p0", 2),)) for payer in ("p1", "p2", "p3")],
    ),
    Case(
        "1.5-added-kong-every-other-pays-1-once-it-stands",
        added_kong,
        [("added_kong", payer, (("p0", 1),)) for payer in ("p1", "p2", "p3")],
    ),
    Case("1.6-discard-win-discarder-pays", discard_win, [("win", "p0", (("p1", 1),))]),
    Case(
        "1.6-self-draw-every-other-pays",
        self_draw,
        [("win", payer, (("p1", 2),)) for payer in ("p2", "p3", "p0")],
    ),
    Case(
        "1.9-cap-limits-each-win-payment",
        self_draw,
        [("win", payer, (("p1", 1),)) for payer in ("p2", "p3", "p0")],
        {"cap_points": 1},
    ),
    Case(
        "1.7-add-one-self-draw-pays-one-point-after-the-cap",
        self_draw,
        [("win", payer, (("p1", 2),)) for payer in ("p2", "p3", "p0")],
        {"cap_points": 1, "self_draw_bonus": "add_one"},
    ),
    Case(
        "1.5-call-transfer-moves-kong-income-to-the-one-winner",
        call_transfer_one_winner,
        [
            ("exposed_kong", "p1", (("p0", 2),)),
            ("win", "p0", (("p1", 2),)),
            ("call_transfer", "p0", (("p1", 2),)),
        ],
    ),
    Case(
        "1.8-flower-pig-then-not-ready-then-kong-refund",
        flower_pig_not_ready_kong_refund,
        [
            ("concealed_kong", "p1", (("p0", 2),)),
            ("concealed_kong", "p2", (("p0", 2),)),
            ("concealed_kong", "p3", (("p0", 2),)),
            ("flower_pig", "p3", (("p0", 16), ("p1", 16), ("p2", 16))),
            ("not_ready", "p0", (("p1", 1),)),
            ("not_ready", "p2", (("p1", 1),)),
            # RULES.md 1.9a.2: one refund instruction per original payer.
            ("kong_refund", "p0", (("p1", 2),)),
            ("kong_refund", "p0", (("p2", 2),)),
            ("kong_refund", "p0", (("p3", 2),)),
        ],
    ),
    Case(
        "1.8-kong-refund-skips-a-transferred-kong",
        transferred_kong_is_not_refunded,
        [
            ("exposed_kong", "p1", (("p0", 2),)),
            ("win", "p0", (("p1", 2),)),
            ("call_transfer", "p0", (("p1", 2),)),
            # The pig pays the winner too (1.8); p0 is not ready but its only kong was transferred.
            ("flower_pig", "p3", (("p0", 16), ("p1", 16), ("p2", 16))),
        ],
    ),
    Case(
        "1.10-escape-of-a-non-winner-pays-penalty-and-compensations",
        escape_of_a_non_winner,
        # u = 3 others in game: max(16, 64 × 3) = 192; compensations max(4, owed) = 4 each.
        [("escape_penalty", "p2", (("house:escape", 192), ("p3", 4), ("p0", 4), ("p1", 4)))],
    ),
    Case("1.10-escape-of-a-winner-pays-nothing", escape_of_a_winner, [("win", "p0", (("p1", 1),))]),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_settlement_rule(case: Case) -> None:
    script = TableScript(rules=room_rules(**(case.rules or {}))).open(DEAL_D, MISSING_D)
    case.play(script)
    _, output = settle_table_events(new_game_settlement(), script.events)
    assert output.notices == ()
    assert lines_of(output.instructions) == case.expected


def test_1_5_robbing_an_added_kong_voids_it_and_the_declarer_pays_like_a_discarder() -> None:
    hands = ["11234567888m99p6s", "123456789p3477s", "11335579s24699m", "123m1122456p789s"]
    script = TableScript().open(hands, "smpm")
    script.discard(0, "6s")
    script.draw(3, "5s")
    script.discard(3, "5s")
    script.pong(2, 3, "5s")
    script.discard(2, "2m")
    script.draw(2, "5s")
    script.kong(2, "5s", "added")
    script.win(1, "5s", "rob_kong", from_seat=2)
    script.robbed(2, "5s", [1])
    script.draw(2, "1s")
    _, output = settle_table_events(new_game_settlement(), script.events)
    assert lines_of(output.instructions) == [("win", "p2", (("p1", 2),))]
    assert [fan.id for fan in output.instructions[0].fans] == ["plain", "rob_kong"]


def test_1_4_multi_win_pays_each_winner_and_1_5_no_call_transfer_with_two_winners() -> None:
    hands = ["11234567888m99p5s", "123456789p2255s", "111s46s234567m99m", "123m1122456p789s"]
    script = TableScript().open(hands, "smpm")
    call_transfer_one_winner_start = [
        lambda: script.discard(0, "9p"),
        lambda: script.draw(1, "8m"),
        lambda: script.discard(1, "8m"),
        lambda: script.kong(0, "8m", "exposed", from_seat=1),
        lambda: script.draw(0, "4p", from_tail=True),
        lambda: script.discard(0, "5s"),
    ]
    for step in call_transfer_one_winner_start:
        step()
    script.win(1, "5s", "discard", from_seat=0, after_kong=True)
    script.win(2, "5s", "discard", from_seat=0, after_kong=True)
    script.draw(3, "1s")
    _, output = settle_table_events(new_game_settlement(), script.events)
    assert lines_of(output.instructions) == [
        ("exposed_kong", "p1", (("p0", 2),)),
        ("win", "p0", (("p1", 2),)),
        ("win", "p0", (("p2", 2),)),
    ]
    # Both wins settle from the first PlayerWon of the discard, once the claim window closed.
    assert {line.source_event_id for line in output.instructions[1:]} == {script.events[-3].event_id}


def test_1_9_worked_example_three_losers_of_18_points_rake_400() -> None:
    script = TableScript(rules=room_rules(coefficient=200, rake_beans=400)).open(
        ["13579m2468m3579p9m", "1111234567789p", "13579s2468s1359m", "13579s2468s2468m"], "sspp"
    )
    script.discard(0, "9m")
    script.draw(1, "5s")
    script.kong(1, "1p", "concealed")
    script.draw(1, "9p", from_tail=True)
    script.discard(1, "5s")
    script.draw(2, "7m")
    script.discard(2, "7m")
    script.draw(1, "9p")
    script.win(1, "9p", "self_draw")
    script.draw(2, "8m")
    script.discard(2, "8m")
    script.wall_exhausted()
    script.ended("wall_exhausted")
    _, output = settle_table_events(new_game_settlement(), script.events)
    game_settled = output.envelopes[-1].game_settled
    net_beans = {player.account: player.beans - player.rake_beans for player in game_settled.players}
    assert net_beans == {
        "player:p0": -3_600 - 400,
        "player:p1": 10_800 - 400,
        "player:p2": -3_600 - 400,
        "player:p3": -3_600 - 400,
    }
    rake_lines = [line for line in output.instructions if line.reason == "rake"]
    assert sum(payee.beans for line in rake_lines for payee in line.payees) == 1_600
    assert game_settled.instruction_count == len(output.instructions) == 10


def test_1_9_rake_for_every_seated_player_escapees_included() -> None:
    script = script_d(rake_beans=50, coefficient=100)
    escape_of_a_non_winner(script)
    script.left(3)
    script.left(0)
    script.ended("escapes")
    _, output = settle_table_events(new_game_settlement(), script.events)
    rake = lines_of(output.instructions, rake=True)[-4:]
    assert rake == [("rake", f"p{seat}", (("house:rake", 0),)) for seat in range(4)]
    assert all(line.payees[0].beans == 50 for line in output.instructions[-4:])


def test_the_same_event_twice_settles_nothing_new() -> None:
    script = script_d()
    exposed_kong(script)
    state, first = settle_table_events(new_game_settlement(), script.events)
    state, again = settle_table_events(state, script.events)
    assert again.envelopes == ()
    assert len(first.instructions) == 1


def test_instruction_ids_are_derived_from_the_source_so_a_replay_gives_identical_events() -> None:
    script = script_d()
    flower_pig_not_ready_kong_refund(script)
    _, live = settle_table_events(new_game_settlement(), script.events)
    _, replay = settle_table_events(new_game_settlement(), list(script.events))
    assert [envelope.SerializeToString(deterministic=True) for envelope in live.envelopes] == [
        envelope.SerializeToString(deterministic=True) for envelope in replay.envelopes
    ]
    ids = [line.instruction_id for line in live.instructions]
    assert len(set(ids)) == len(ids)
    assert [line.line for line in live.instructions] == list(range(1, len(ids) + 1))


def test_an_added_kong_robbed_after_its_replacement_draw_is_refused() -> None:
    hands = ["11234567888m99p6s", "123456789p3477s", "11335579s24699m", "123m1122456p789s"]
    script = TableScript().open(hands, "smpm")
    script.discard(0, "6s")
    script.draw(3, "5s")
    script.discard(3, "5s")
    script.pong(2, 3, "5s")
    script.discard(2, "2m")
    script.draw(2, "5s")
    script.kong(2, "5s", "added")
    script.draw(2, "1s", from_tail=True)
    script.win(1, "5s", "rob_kong", from_seat=2)
    state, _ = settle_table_events(new_game_settlement(), script.events[:-1])
    with pytest.raises(GameFactsError, match="already stood"):
        settle_table_event(state, script.events[-1])


def test_an_event_before_table_opened_is_refused() -> None:
    script = script_d()
    with pytest.raises(GameFactsError, match="before TableOpened"):
        settle_table_event(new_game_settlement(), script.events[1])
