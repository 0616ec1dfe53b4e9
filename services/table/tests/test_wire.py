"""The feeds' messages composed from parts serialized once (`wire`) are exactly the messages built
field by field: for every seat of seeded games of both families, after every command and over
spans of several commands (a stream pulled late sends them in one update), the events are the
seat's redacted, renumbered envelopes (`servicer.seat_envelopes`, what Act's answers carry) and
the view is the TableView of the domain view (`variants.view_for`), field by field; the answers
parse to the PlayAnswer they stand for.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import timestamp_pb2
from mahjong.v1 import envelope_pb2
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.envelopes import new_envelope
from mahjong_rules import RulesError, format_tiles, parse_tiles
from mahjong_rules.room_rules import RoomRules
from mahjong_table import codec, wire
from mahjong_table.formula.decide import execute as formula_execute
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.evolve import fold as formula_fold
from mahjong_table.selfplay import formula_greedy_command, random_legal_command
from mahjong_table.servicer import seat_envelopes, table_view_message
from mahjong_table.sichuan.decide import execute, open_table
from mahjong_table.sichuan.evolve import fold
from mahjong_table.variants import AnyTableState, view_for

MOMENT = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
PLAYERS = ["p0", "p1", "p2", "p3"]
Step = tuple[AnyTableState, list[envelope_pb2.Envelope]]


def _game(
    opening: list[Any], start: Callable[[list[Any]], Any], act: Callable[[Any], tuple[list[Any], Any]]
) -> list[Step]:
    """The states of one greedy game after its opening and after each command, each with the
    envelopes the command committed (numbered from 1, as the store numbers them)."""
    table_id = opening[0].table_id
    numbered = 0

    def envelopes(events: list[Any]) -> list[envelope_pb2.Envelope]:
        nonlocal numbered
        committed = []
        for event in events:
            numbered += 1
            committed.append(
                new_envelope(
                    codec.to_message(event),
                    clock=lambda: MOMENT,
                    stream_id=table_id,
                    sequence=numbered,
                    correlation_id=table_id,
                )
            )
        return committed

    state = start(opening)
    steps: list[Step] = [(state, envelopes(opening))]
    while not state.is_over:
        new, state = act(state)
        steps.append((state, envelopes(new)))
    return steps


def sichuan_game(seed: int) -> list[Step]:
    """Random legal play, half of it greedy (wins happen), with passes, deadlines and leaves."""
    generator = random.Random(seed)
    return _game(
        open_table(f"wire-{seed}", "room", RoomRules(), PLAYERS, seed),
        fold,
        lambda state: execute(state, random_legal_command(state, generator, greedy_chance=0.5)),
    )


def formula_game(seed: int) -> list[Step]:
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
    return _game(
        open_formula_table(f"wire-f-{seed}", "room", rules, PLAYERS, seed),
        formula_fold,
        lambda state: formula_execute(state, formula_greedy_command(state)),
    )


def view_field_by_field(
    state: AnyTableState, seat: int, deadline: datetime.datetime | None
) -> messages.TableView:
    """The TableView of the seat's domain view, every field set one by one (the oracle)."""
    view = view_for(state, seat)

    def compact(tiles: tuple[str, ...]) -> str:
        return format_tiles(parse_tiles("".join(tiles))) if tiles else ""

    message = messages.TableView(
        table_id=view.table_id,
        room_id=state.room_id,
        sequence=wire.seat_sequence(state, seat),
        your_seat=seat,
        hand=compact(view.hand),
        dealer_seat=view.dealer_seat,
        phase=view.phase,
        turn_seat=view.turn_seat,
        wall_remaining=view.wall_remaining,
        claimable_tile=view.claimable_tile,
        claim_from_seat=view.claim_from_seat,
        drawn_tile=view.drawn_tile,
        exchange_pick="".join(view.exchange_pick),
        exchange_direction=view.exchange_direction,
        end_reason=view.end_reason,
        wildcard_indicator=view.wildcard_indicator,
        wildcard=view.wildcard,
        bird_tile=view.bird_tile,
        bird_seat=view.bird_seat,
        waits=compact(view.waits),
    )
    for seat_view in view.seats:
        seat_message = message.seats.add(
            seat=seat_view.seat,
            player_id=seat_view.player_id,
            concealed_count=seat_view.concealed_tile_count,
            discards=seat_view.discards,
            missing_suit=seat_view.missing_suit,
            won=seat_view.won,
            left=seat_view.left,
            exchange_picked=seat_view.exchange_picked,
            missing_suit_chosen=seat_view.missing_suit_chosen,
            flowers="".join(seat_view.flowers),
        )
        for meld in seat_view.melds:
            seat_message.melds.append(codec.to_message(meld))  # type: ignore[arg-type]
    for action in view.legal_actions:
        message.legal_actions.add(kind=action.kind, tiles=action.tiles, suits=action.suits)
    if deadline is not None:
        timestamp = timestamp_pb2.Timestamp()
        timestamp.FromDatetime(deadline)
        message.deadline.CopyFrom(timestamp)
    return message


def composed_update(
    steps: list[Step], seat: int, after: int, up_to: int, deadline: datetime.datetime | None
) -> bytes:
    """The feed's update of `seat` for the commands of steps `after + 1 .. up_to` (as
    `TableServicer._view_updates` composes it)."""
    state = steps[up_to][0]
    envelopes = [envelope for _state, committed in steps[after + 1 : up_to + 1] for envelope in committed]
    after_seat_sequence = wire.seat_sequence(steps[after][0], seat) if after >= 0 else 0
    events = wire.seat_event_bytes(envelopes, seat, state.hidden_counts[seat], after_seat_sequence)
    return wire.update_bytes(events, wire.view_bytes(state, seat) + wire.deadline_bytes(deadline))


def update_field_by_field(
    steps: list[Step], seat: int, after: int, up_to: int, deadline: datetime.datetime | None
) -> messages.TableUpdate:
    state = steps[up_to][0]
    envelopes = [envelope for _state, committed in steps[after + 1 : up_to + 1] for envelope in committed]
    after_seat_sequence = wire.seat_sequence(steps[after][0], seat) if after >= 0 else 0
    update = messages.TableUpdate()
    for envelope in seat_envelopes(envelopes, seat, state.hidden_counts[seat]):
        if envelope.sequence > after_seat_sequence:
            update.events.append(envelope)
    update.view.CopyFrom(view_field_by_field(state, seat, deadline))
    return update


GAMES = [("sichuan", seed, sichuan_game) for seed in range(6)] + [
    ("formula", seed, formula_game) for seed in range(3)
]


@pytest.mark.parametrize(
    ("family", "seed", "play"), GAMES, ids=[f"{family}-{seed}" for family, seed, _ in GAMES]
)
def test_every_update_is_the_message_built_field_by_field(
    family: str, seed: int, play: Callable[[int], list[Step]]
) -> None:
    steps = play(seed)
    for seat in range(len(PLAYERS)):
        for up_to in range(len(steps)):
            deadline = None if up_to % 3 == 0 else MOMENT + datetime.timedelta(seconds=up_to)
            composed = messages.TableUpdate.FromString(
                composed_update(steps, seat, up_to - 1, up_to, deadline)
            )
            assert composed == update_field_by_field(steps, seat, up_to - 1, up_to, deadline), (seat, up_to)
            assert composed.view == table_view_message(steps[up_to][0], seat, deadline)


def test_an_update_over_several_changes_is_their_updates_events_with_the_last_view() -> None:
    """A stream pulled after several commits sends one update: the events of the updates it would
    have sent one by one, in order, and the view after the last (WatchView resumes the same way)."""
    generator = random.Random(10)
    steps = sichuan_game(3)
    for seat in range(len(PLAYERS)):
        cuts = [*sorted(generator.sample(range(1, len(steps) - 1), 12)), len(steps) - 1]
        after = 0
        for cut in cuts:
            coalesced = messages.TableUpdate.FromString(composed_update(steps, seat, after, cut, None))
            one_by_one = [
                messages.TableUpdate.FromString(composed_update(steps, seat, step - 1, step, None))
                for step in range(after + 1, cut + 1)
            ]
            assert list(coalesced.events) == [event for update in one_by_one for event in update.events]
            assert coalesced.view == one_by_one[-1].view
            assert coalesced == update_field_by_field(steps, seat, after, cut, None)
            after = cut


@pytest.mark.parametrize(
    ("family", "seed", "play"), GAMES, ids=[f"{family}-{seed}" for family, seed, _ in GAMES]
)
def test_a_view_is_byte_for_byte_its_parts_as_protobuf_serializes_them(
    family: str, seed: int, play: Callable[[int], list[Step]]
) -> None:
    """Not only the same message: the same bytes. A view is its scalar fields, then each seat and
    each legal action as a field of its own, then the deadline, each part exactly as protobuf
    serializes it (a seat composed from its fields before, at and after its melds included), so
    what a client receives does not change with how the parts are composed."""
    for state, _envelopes in play(seed):
        for seat in range(len(PLAYERS)):
            deadline = MOMENT + datetime.timedelta(seconds=state.version)
            message = view_field_by_field(state, seat, deadline)
            scalars = messages.TableView()
            scalars.CopyFrom(message)
            for part in ("seats", "legal_actions", "deadline"):
                scalars.ClearField(part)
            expected = b"".join(
                [
                    scalars.SerializeToString(),
                    *[wire.field(bytes([6 << 3 | 2]), part.SerializeToString()) for part in message.seats],
                    *[
                        wire.field(bytes([10 << 3 | 2]), part.SerializeToString())
                        for part in message.legal_actions
                    ],
                    wire.field(bytes([12 << 3 | 2]), message.deadline.SerializeToString()),
                ]
            )
            composed = wire.view_bytes(state, seat) + wire.deadline_bytes(deadline)
            assert composed == expected, (seat, state.version)


def test_a_redacted_payload_shared_by_the_seats_that_see_the_same_is_the_bytes_made_for_each() -> None:
    """Another seat's draw shows every other seat the same event without its tile: its payload
    is serialized once, for the first seat that sees it, and the others get those bytes, exactly
    the bytes made for each seat alone."""
    shared = 0
    for steps in [sichuan_game(seed) for seed in range(3)] + [formula_game(0)]:
        for _state, envelopes in steps:
            for envelope in envelopes:
                stored = wire._StoredEnvelope(envelope)
                for seat in (3, 1, 0, 2):
                    alone = wire._StoredEnvelope(envelope).payload_for(seat)
                    assert stored.payload_for(seat) == alone, (envelope.sequence, seat)
                shared += len(stored.redacted) < sum(
                    stored.payload_for(seat) not in (None, stored.payload) for seat in range(len(PLAYERS))
                )
    assert shared > 100, "no payload was shared"


def test_the_games_cover_what_the_seat_numbering_and_redaction_change() -> None:
    """The checks above see events hidden from a seat (numbers shift), redacted ones and public ones."""
    steps = [step for seed in range(6) for step in sichuan_game(seed)]
    assert any(max(state.hidden_counts) > 0 for state, _envelopes in steps)
    payloads = {envelope.WhichOneof("payload") for _state, envelopes in steps for envelope in envelopes}
    assert {
        "hands_dealt",
        "tile_drawn",
        "claim_passed",
        "turn_timed_out",
        "kong_declared",
        "game_ended",
    } <= payloads


def test_a_composed_answer_is_the_play_answer() -> None:
    result = messages.ActResponse(sequence=7, events=[envelope_pb2.Envelope(event_id="e", sequence=7)])
    composed = messages.PlayResponse.FromString(
        wire.play_answer_bytes("key-1", result=result.SerializeToString())
    )
    assert composed == messages.PlayResponse(
        answer=messages.PlayAnswer(idempotency_key="key-1", result=result)
    )
    refused = messages.PlayResponse.FromString(wire.play_answer_bytes("key-2", 9, "not your turn"))
    assert refused == messages.PlayResponse(
        answer=messages.PlayAnswer(idempotency_key="key-2", code=9, message="not your turn")
    )
    assert not refused.answer.HasField("result")


def test_compact_codes_is_compact_of_the_joined_codes_refusals_included() -> None:
    """Seeded random tile codes of every family, sorted or not, with unknown codes and more
    copies than a set holds now and then: the same notation as parsing and formatting the
    joined text, or the same refusal."""
    generator = random.Random(0)
    codes = [format_tiles([tile]) for tile in range(42)]
    for _ in range(20_000):
        tiles = tuple(
            generator.choice(["0m", "x5", "5"]) if generator.random() < 0.01 else generator.choice(codes)
            for _ in range(generator.randint(0, 18))
        )
        if generator.random() < 0.5:
            tiles = tuple(sorted(tiles))
        assert _outcome(wire.compact, "".join(tiles)) == _outcome(wire.compact_codes, tiles), tiles


def _outcome(compose: Callable[[Any], str], tiles: object) -> object:
    try:
        return compose(tiles)
    except RulesError as error:
        return type(error)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2**35 + 5])
def test_varint(value: int) -> None:
    envelope = envelope_pb2.Envelope.FromString(bytes([3 << 3]) + wire.varint(value))
    assert envelope.sequence == value


def test_the_varints_made_once_are_varint_s() -> None:
    assert all(made == wire.varint(value) for value, made in enumerate(wire._VARINTS))


def test_a_composed_field_is_its_tag_length_and_data_at_any_length() -> None:
    for size in (0, 1, 127, 128, 4_095, 4_096, 20_000):
        envelope = envelope_pb2.Envelope.FromString(wire.field(bytes([6 << 3 | 2]), b"x" * size))
        assert envelope.causation_id == "x" * size


def test_timestamp_of_is_what_from_datetime_makes() -> None:
    """Aware moments in several zones and naive ones (taken as UTC, as SQLite gives them back),
    before and after the epoch, with and without microseconds."""
    generator = random.Random(20261204)
    zones = [
        datetime.UTC,
        datetime.timezone(datetime.timedelta(hours=5, minutes=30)),
        datetime.timezone(datetime.timedelta(hours=-8)),
        None,
    ]
    moments = [MOMENT, MOMENT.replace(tzinfo=None), datetime.datetime(1969, 12, 31, 23, 59, 59, 1)]
    for _ in range(20_000):
        moment = datetime.datetime(1900, 1, 1) + datetime.timedelta(
            microseconds=generator.randrange(0, 200 * 365 * 86_400 * 10**6)
        )
        moments.append(moment.replace(tzinfo=generator.choice(zones)))
    for moment in moments:
        expected = timestamp_pb2.Timestamp()
        expected.FromDatetime(moment)
        assert wire.timestamp_of(moment) == expected, moment
