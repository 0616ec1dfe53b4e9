"""The event registry (`mahjong_platform.events`) declares every `Envelope` payload once, and every
consumer handles exactly the events declared for it (issue 14).

Statically: the registry's payloads are the envelope's oneof fields with their messages; the table
codec maps every table event to its domain class; each family's fold folds exactly the table
events declared for the family; the table redacts exactly the events declared `redacted`;
scoring's fold of each family handles exactly the events declared `scored_by` it; matchmaking
frees seats on exactly the events declared `releases_seat`. On seeded games of both families: a
table emits only the events declared for its family, every event the registry calls public is
shown to every seat as it is, and a claim window opens only after an event declared
`opens_claim_window`.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from mahjong.v1 import envelope_pb2
from mahjong_matchmaking.projection import SEAT_RELEASES
from mahjong_platform.events import (
    EVENTS,
    FORMULA,
    SICHUAN,
    payloads,
    scored_payloads,
    table_payloads,
)
from mahjong_platform.topics import Topics
from mahjong_scoring.game_facts import formula as formula_scoring
from mahjong_scoring.game_facts import sichuan as sichuan_scoring
from mahjong_table import codec
from mahjong_table.core import events as domain_events
from mahjong_table.core.evolve import KERNEL_FOLDS
from mahjong_table.core.views import REDACTIONS, redact
from mahjong_table.formula import evolve as formula_evolve
from mahjong_table.servicer import REDACTED_PAYLOADS
from mahjong_table.sichuan import evolve as sichuan_evolve
from mahjong_table.variants import evolve
from mahjong_table.visibility import WINDOW_OPENING_PAYLOADS

from .test_settlement_golden import formula_command, formula_rules, play, sichuan_command, sichuan_rules

ONEOF = envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"]
TABLE_PAYLOADS = table_payloads(SICHUAN) | table_payloads(FORMULA)
FAMILY_FOLDS = {SICHUAN: sichuan_evolve.HANDLERS, FORMULA: formula_evolve.HANDLERS}
FAMILY_SCORING = {SICHUAN: sichuan_scoring.HANDLERS, FORMULA: formula_scoring.HANDLERS}
SEEDS = range(12)


def payload_of(domain_class: type[Any]) -> str:
    """The payload of a domain event class: the registry's entry whose message has its name."""
    (payload,) = [name for name, kind in EVENTS.items() if kind.message.__name__ == domain_class.__name__]
    return payload


def test_every_envelope_payload_is_declared_once_with_its_message() -> None:
    assert sorted(EVENTS) == sorted(field.name for field in ONEOF.fields)  # declared twice fails at import
    for field in ONEOF.fields:
        assert EVENTS[field.name].message.DESCRIPTOR is field.message_type, field.name


def test_table_events_are_exactly_the_payloads_of_the_table_topic() -> None:
    topics = Topics()
    for payload in EVENTS:
        envelope = envelope_pb2.Envelope(event_id="e")
        getattr(envelope, payload).SetInParent()
        assert (topics.for_envelope(envelope) == topics.table) == (payload in TABLE_PAYLOADS), payload


def test_every_table_event_has_its_domain_class_and_the_codec_maps_both_ways() -> None:
    domain_classes = {payload_of(cls): cls for cls in domain_events.TableEvent.__args__}  # type: ignore[attr-defined]
    assert set(domain_classes) == TABLE_PAYLOADS
    for payload, cls in domain_classes.items():
        envelope = envelope_pb2.Envelope(event_id="e")
        getattr(envelope, payload).SetInParent()
        event = codec.event_of(envelope)
        assert type(event) is cls
        assert type(codec.to_message(event)) is EVENTS[payload].message


@pytest.mark.parametrize("family", [SICHUAN, FORMULA])
def test_each_family_folds_exactly_its_declared_events(family: str) -> None:
    folded = {payload_of(cls) for cls in [*FAMILY_FOLDS[family], *KERNEL_FOLDS]} | {"table_opened"}
    assert folded == table_payloads(family)


def test_the_table_redacts_exactly_the_events_declared_redacted() -> None:
    assert {payload_of(cls) for cls in REDACTIONS} == payloads(redacted=True) == REDACTED_PAYLOADS
    assert payloads(redacted=True) <= TABLE_PAYLOADS


@pytest.mark.parametrize("family", [SICHUAN, FORMULA])
def test_scoring_of_each_family_handles_exactly_its_declared_events(family: str) -> None:
    # `TableOpened` is folded for both families by `game_facts.fold` itself.
    assert set(FAMILY_SCORING[family]) | {"table_opened"} == scored_payloads(family)
    assert scored_payloads(family) <= table_payloads(family)


def test_matchmaking_frees_seats_on_exactly_the_events_declared_so() -> None:
    assert set(SEAT_RELEASES) == payloads(releases_seat=True)


def test_the_claim_window_payloads_are_the_declared_ones() -> None:
    assert payloads(opens_claim_window=True) == WINDOW_OPENING_PAYLOADS


@pytest.mark.parametrize(
    ("family", "make_rules", "command"),
    [(SICHUAN, sichuan_rules, sichuan_command), (FORMULA, formula_rules, formula_command)],
    ids=[SICHUAN, FORMULA],
)
def test_seeded_games_keep_to_the_declarations(family: str, make_rules: Any, command: Any) -> None:
    public = TABLE_PAYLOADS - payloads(redacted=True)
    seen: set[str] = set()
    for seed in SEEDS:
        state = None
        for event in play(seed, make_rules(random.Random(seed)), command):
            payload = payload_of(type(event))
            seen.add(payload)
            assert payload in table_payloads(family), f"a {family} table emitted {payload}"
            if payload in public:
                assert all(redact(event, seat) is event for seat in (None, 0, 1, 2, 3)), payload  # type: ignore[arg-type]
            had_window = state is not None and state.window is not None
            state = evolve(state, event)  # type: ignore[arg-type]
            if state.window is not None and not had_window:
                assert payload in payloads(opens_claim_window=True), f"{payload} opened a claim window"
    # The games exercise the declarations: most of the family's events occur.
    assert len(seen) >= len(table_payloads(family)) - 3, table_payloads(family) - seen
