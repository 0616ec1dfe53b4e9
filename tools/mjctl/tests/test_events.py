"""Every event in words (`mahjong_platform.events`, the event registry): one description per
`Envelope` payload, so a new event cannot be forgotten; Formula wins show their fan totals; chows,
flowers and birds get lines."""

from __future__ import annotations

import datetime
import uuid

import pytest
from google.protobuf.message import Message
from mahjong.v1 import common_pb2, envelope_pb2, settlement_events_pb2, table_events_pb2
from mahjong_platform.envelopes import new_envelope
from mahjong_platform.events import DESCRIPTIONS, Story, describe_event
from mahjong_rules.room_rules import RoomRules
from mahjong_table import codec
from mahjong_table.formula.decide import execute as formula_execute
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.evolve import fold as formula_fold
from mahjong_table.selfplay import formula_greedy_command
from mjctl.replay import describe

PAYLOADS = [field.name for field in envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields]
START = datetime.datetime(2026, 3, 1, 12, tzinfo=datetime.UTC)


def test_every_envelope_payload_has_a_description_and_nothing_else_does() -> None:
    assert sorted(DESCRIPTIONS) == sorted(PAYLOADS)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_each_payload_reads_as_words_even_when_its_fields_are_empty(payload: str) -> None:
    envelope = envelope_pb2.Envelope(event_id="e1")
    getattr(envelope, payload).SetInParent()
    text = describe_event(envelope, Story())
    assert text.strip() and payload not in text  # words, not the field name


def formula_game(seed: int) -> list[envelope_pb2.Envelope]:
    """A greedy Formula game (RULES.md 2) of the table aggregate, as the service's envelopes."""
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
    events = open_formula_table(f"formula-{seed}", "formula-test", rules, ("ann", "bo", "cy", "di"), seed)
    state = formula_fold(events)
    while not state.is_over:
        new, state = formula_execute(state, formula_greedy_command(state))
        events.extend(new)
    return [
        new_envelope(
            codec.to_message(event),
            clock=lambda sequence=sequence: START + datetime.timedelta(seconds=sequence),
            stream_id=f"formula-{seed}",
            sequence=sequence,
            event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"formula-{seed}/{sequence}")),
        )
        for sequence, event in enumerate(events, start=1)
    ]


def kinds(game: list[envelope_pb2.Envelope]) -> set[str]:
    return {kind for envelope in game if (kind := envelope.WhichOneof("payload"))}


def test_a_formula_game_tells_its_chows_flowers_bird_and_the_win_s_fan_total() -> None:
    wanted = {"chow_claimed", "flower_replaced", "bird_revealed", "player_won"}
    game = next(game for game in map(formula_game, range(60)) if wanted <= kinds(game))
    lines = list(describe(game))
    assert len(lines) == len(game)
    won = next(envelope.player_won for envelope in game if envelope.HasField("player_won"))
    win_line = next(line for line in lines if " wins " in line)
    assert f"= {won.fan_total} fan" in win_line and "×0" not in win_line  # RULES.md 2.2: fans add
    assert won.fan_total > 0 and all(f" {fan.name} {fan.multiplier}" in win_line for fan in won.fans)
    assert any(" chows " in line for line in lines)
    assert any("sets aside flower" in line for line in lines)
    assert any("Z  bird " in line and " lands on seat " in line for line in lines)
    assert "(Formula," in lines[0] and "wildcard" in lines[0]


def payload_of(message: Message) -> envelope_pb2.Envelope:
    envelope = envelope_pb2.Envelope()
    field = next(name for name in PAYLOADS if getattr(envelope, name).DESCRIPTOR is message.DESCRIPTOR)
    getattr(envelope, field).CopyFrom(message)
    return envelope


def test_a_formula_settlement_line_shows_the_fan_total_it_was_paid_on() -> None:
    story = Story()
    describe_event(
        payload_of(table_events_pb2.TableOpened(rules={"variant": common_pb2.VARIANT_FORMULA})), story
    )
    line = settlement_events_pb2.SettlementInstructed(
        line=1,
        reason="win",
        payer_account="player:bo",
        payees=[settlement_events_pb2.Payee(account="player:ann", points=16, beans=160)],
        fans=[
            common_pb2.Fan(name="碰碰和", multiplier=6),
            common_pb2.Fan(name="花牌", multiplier=1, count=2),
        ],
        multiplier=8,
        coefficient=10,
    )
    text = describe_event(payload_of(line), story)
    assert "碰碰和 6 · 花牌 1×2 = 8 fan" in text and "pays 160 beans" in text


def test_a_sichuan_win_multiplies_its_fans() -> None:
    won = table_events_pb2.PlayerWon(
        seat=1, win_tile="5p", win_by=common_pb2.WIN_BY_SELF_DRAW, from_seat=-1, multiplier=4, win_order=1
    )
    won.fans.add(name="清一色", multiplier=4)
    text = describe_event(payload_of(won), Story())
    assert "清一色 ×4 = ×4" in text and "by self-draw" in text


def test_kong_income_lines_say_they_move_at_most_what_the_kong_brought_in() -> None:
    # RULES.md 1.9a.1: a kong refund names the kong instruction; its posting names the income.
    refund = envelope_pb2.Envelope(event_id="e1")
    refund.settlement_instructed.CopyFrom(
        settlement_events_pb2.SettlementInstructed(
            reason="kong_refund",
            payer_account="player:a",
            payees=[settlement_events_pb2.Payee(account="player:b", points=2, beans=200)],
            income_instruction_ids=["kong-b"],
            line=7,
        )
    )
    assert describe_event(refund, Story()).endswith("(at most the kong income received from 1 instruction)")
    posted = envelope_pb2.Envelope(event_id="e2")
    posted.transfer_posted.reason = "kong_refund"
    posted.transfer_posted.requested_beans = 200
    posted.transfer_posted.posted_beans = 50
    posted.transfer_posted.income_limit_beans = 50
    assert "of 200 asked, kong income received 50" in describe_event(posted, Story())
