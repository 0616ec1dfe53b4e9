"""``mjctl dlq list|show|redrive``: what is dead-lettered on ``mahjong.dlq.v1``, why, and re-driving
it, exactly once, to the consumer group it came from once the cause is fixed.

An entry is named ``<partition>:<offset>`` (its place on the dead letter topic). ``redrive`` applies
the entry's event through its consumer group's own handler into that group's service database
(`mahjong_platform.dead_letters.redrive`: processed ids guard against an event applied meanwhile,
and the entry is recorded as re-driven in the same transaction, so running it again changes
nothing). It needs the fixed code installed where it runs, like the service itself.

Exit codes: 0 done; 1 an entry could not be re-driven (its handler still fails, it holds no
decodable event, or its consumer group is unknown) or an id is not on the topic; 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mahjong_platform.config import ServiceName, Settings
    from mahjong_platform.dead_letters import DeadLetterEntry, Redrive
    from mahjong_platform.service_runtime import ConsumerDefinition, ServiceDefinition
    from sqlalchemy.engine import Engine

REASON_WIDTH = 70


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="list, show and re-drive dead letters (mahjong.dlq.v1)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="dlq_command", required=True, metavar="COMMAND", help="list, show or redrive"
    )
    listing = commands.add_parser(
        "list", help="every dead letter: where it came from, why, whether re-driven"
    )
    listing.add_argument("--consumer", metavar="GROUP", help="only this consumer group's dead letters")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=_list)
    show = commands.add_parser("show", help="one dead letter in full, its event decoded")
    show.add_argument("entry", metavar="PARTITION:OFFSET", help="the id `mjctl dlq list` shows")
    show.set_defaults(handler=_show)
    redrive = commands.add_parser(
        "redrive", help="apply dead letters to the consumer they came from, once (after a fix)"
    )
    redrive.add_argument("entries", metavar="PARTITION:OFFSET", nargs="*", help="ids from `mjctl dlq list`")
    redrive.add_argument("--all", action="store_true", help="every dead letter not yet re-driven")
    redrive.add_argument("--consumer", metavar="GROUP", help="with --all: only this consumer group's")
    redrive.set_defaults(handler=_redrive)


class _Consumers:
    """The consumer groups of the installed services, each with its service and its database."""

    def __init__(self, settings: Settings) -> None:
        from mahjong_platform.topics import Topics

        self._settings = settings
        self._topics = Topics.with_prefix(settings.topic_prefix)
        self._engines: dict[str, Engine] = {}
        self._groups: dict[str, tuple[ServiceName, ConsumerDefinition]] | None = None

    def service_of(self, group: str) -> ServiceName | None:
        found = self._all().get(group)
        return None if found is None else found[0]

    def definition_of(self, group: str) -> ConsumerDefinition | None:
        found = self._all().get(group)
        return None if found is None else found[1]

    def engine(self, service: ServiceName) -> Engine:
        from mahjong_platform.database import create_engine_for

        if service not in self._engines:
            self._engines[service] = create_engine_for(self._settings.database_url(service))
        return self._engines[service]

    def close(self) -> None:
        for engine in self._engines.values():
            engine.dispose()

    def _all(self) -> dict[str, tuple[ServiceName, ConsumerDefinition]]:
        if self._groups is None:
            self._groups = {}
            for service, definition in service_definitions(self._settings).items():
                for consumer in definition.consumers(self.engine(service), self._settings, self._topics):
                    self._groups[consumer.group_id] = (service, consumer)
        return self._groups


def service_definitions(settings: Settings) -> dict[ServiceName, ServiceDefinition]:
    """Each installed service's definition, as its ``python -m`` process builds it."""
    from mjctl.run import installed_services, service_name

    builders: dict[str, Callable[[], ServiceDefinition]] = {
        "matchmaking": _matchmaking,
        "table": lambda: _table(settings),
        "scoring": _scoring,
        "ledger": _ledger,
    }
    return {service_name(name): builders[name]() for name in installed_services()}


def _matchmaking() -> ServiceDefinition:
    from mahjong_matchmaking.__main__ import DEFINITION

    return DEFINITION


def _table(settings: Settings) -> ServiceDefinition:
    from mahjong_table.__main__ import definition

    return definition(settings)


def _scoring() -> ServiceDefinition:
    from mahjong_scoring.__main__ import DEFINITION

    return DEFINITION


def _ledger() -> ServiceDefinition:
    from mahjong_ledger.app import definition
    from mahjong_ledger.settings import load_ledger_settings

    return definition(load_ledger_settings())


def _read(settings: Settings, only: Sequence[tuple[int, int]] | None = None) -> list[DeadLetterEntry]:
    from mahjong_platform.dead_letters import read_dead_letters
    from mahjong_platform.topics import Topics

    topic = Topics.with_prefix(settings.topic_prefix).dead_letter
    return read_dead_letters(settings.kafka_bootstrap_servers, topic, only=only)


def _statuses(consumers: _Consumers, entries: Sequence[DeadLetterEntry]) -> dict[tuple[int, int], str]:
    """Each entry's re-drive status: "pending", "re-driven <outcome> <time>", or "?" (unknown group)."""
    from mahjong_platform.dead_letters import redrives_recorded

    by_service: dict[ServiceName, list[DeadLetterEntry]] = {}
    statuses: dict[tuple[int, int], str] = {}
    for entry in entries:
        service = consumers.service_of(entry.dead_letter.consumer_group)
        if service is None:
            statuses[(entry.dlq_partition, entry.dlq_offset)] = "? (unknown consumer group)"
        else:
            by_service.setdefault(service, []).append(entry)
    for known_service, service_entries in by_service.items():
        recorded = redrives_recorded(consumers.engine(known_service), service_entries)
        for entry in service_entries:
            key = (entry.dlq_partition, entry.dlq_offset)
            statuses[key] = _status_text(recorded.get(key))
    return statuses


def _status_text(redrive: Redrive | None) -> str:
    if redrive is None:
        return "pending"
    return f"re-driven ({redrive.outcome}) {redrive.redriven_at.isoformat(timespec='seconds')}"


def _summary(entry: DeadLetterEntry, status: str) -> dict[str, Any]:
    letter = entry.dead_letter
    return {
        "id": entry.entry_id,
        "failed_at": entry.failed_at.isoformat(timespec="seconds"),
        "consumer_group": letter.consumer_group,
        "source": f"{letter.topic}[{letter.partition}]@{letter.offset}",
        "event_id": entry.event_id,
        "event_type": entry.event_type,
        "status": status,
        "reason": letter.error,
    }


def _list(arguments: argparse.Namespace) -> int:
    from mahjong_platform.config import load_settings

    settings = load_settings()
    entries = [
        entry
        for entry in _read(settings)
        if arguments.consumer is None or entry.dead_letter.consumer_group == arguments.consumer
    ]
    consumers = _Consumers(settings)
    try:
        statuses = _statuses(consumers, entries)
    finally:
        consumers.close()
    rows = [_summary(entry, statuses[(entry.dlq_partition, entry.dlq_offset)]) for entry in entries]
    if arguments.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return 0
    if not rows:
        print("no dead letters")
        return 0
    for row in rows:
        reason = " ".join(row["reason"].split())
        if len(reason) > REASON_WIDTH:
            reason = reason[: REASON_WIDTH - 1] + "…"
        print(
            f"{row['id']:>8}  {row['failed_at']}  {row['consumer_group']}  {row['source']}  "
            f"{row['event_type'] or '-'} {row['event_id'] or '(undecodable)'}  [{row['status']}]  {reason}"
        )
    print(f"{len(rows)} dead letters, {sum(row['status'] == 'pending' for row in rows)} pending")
    return 0


def _show(arguments: argparse.Namespace) -> int:
    from google.protobuf import json_format
    from mahjong_platform.config import load_settings
    from mahjong_platform.dead_letters import parse_entry_id

    settings = load_settings()
    try:
        wanted = parse_entry_id(arguments.entry)
    except ValueError as error:
        print(f"mjctl dlq: {error}", file=sys.stderr)
        return 2
    entries = _read(settings, only=[wanted])
    if not entries:
        print(f"mjctl dlq: no dead letter {arguments.entry} on the dead letter topic", file=sys.stderr)
        return 1
    entry = entries[0]
    consumers = _Consumers(settings)
    try:
        status = _statuses(consumers, [entry])[wanted]
    finally:
        consumers.close()
    details = _summary(entry, status)
    details["key"] = entry.dead_letter.key.decode(errors="replace")
    details["event"] = (
        None
        if entry.envelope is None
        else json.loads(json_format.MessageToJson(entry.envelope, preserving_proto_field_name=True))
    )
    if entry.envelope is None:
        details["value_hex"] = entry.dead_letter.value.hex()
    print(json.dumps(details, indent=2, ensure_ascii=False))
    return 0


def _redrive(arguments: argparse.Namespace) -> int:
    from mahjong_platform.config import load_settings
    from mahjong_platform.dead_letters import parse_entry_id

    if bool(arguments.entries) == bool(arguments.all):
        print("mjctl dlq redrive: give dead letter ids or --all (not both)", file=sys.stderr)
        return 2
    settings = load_settings()
    try:
        wanted = [parse_entry_id(text) for text in arguments.entries]
    except ValueError as error:
        print(f"mjctl dlq redrive: {error}", file=sys.stderr)
        return 2
    entries = _read(settings, only=wanted or None)
    missing = set(wanted) - {(entry.dlq_partition, entry.dlq_offset) for entry in entries}
    for partition, offset in sorted(missing):
        print(f"{partition}:{offset}: no such dead letter on the dead letter topic", file=sys.stderr)
    if arguments.consumer is not None:
        entries = [entry for entry in entries if entry.dead_letter.consumer_group == arguments.consumer]
    consumers = _Consumers(settings)
    try:
        failures = sum(not _redrive_one(consumers, entry) for entry in entries)
    finally:
        consumers.close()
    return 1 if failures or missing else 0


def _redrive_one(consumers: _Consumers, entry: DeadLetterEntry) -> bool:
    """Re-drive one entry and print what happened; False when it could not be re-driven."""
    from mahjong_platform.dead_letters import RedriveError, redrive

    group = entry.dead_letter.consumer_group
    service = consumers.service_of(group)
    definition = consumers.definition_of(group)
    if service is None or definition is None:
        print(f"{entry.entry_id}: consumer group {group!r} belongs to no installed service; not re-driven")
        return False
    try:
        result = redrive(consumers.engine(service), entry, _event_handler(definition), wants=definition.wants)
    except RedriveError as error:
        print(f"{entry.entry_id}: not re-driven: {error}")
        return False
    if result.newly:
        print(f"{entry.entry_id}: {group} {entry.event_type} {entry.event_id}: {_words(result.outcome)}")
    else:
        when = result.redriven_at.isoformat(timespec="seconds")
        print(f"{entry.entry_id}: already re-driven at {when} ({result.outcome}); nothing changed")
    return True


def _words(outcome: str) -> str:
    return {
        "applied": "applied",
        "already_applied": "already applied (by the consumer meanwhile): recorded, nothing applied twice",
        "not_wanted": "not an event this consumer applies: recorded, nothing applied",
    }.get(outcome, outcome)


def _event_handler(definition: ConsumerDefinition) -> Any:
    """The group's handler for one event (a batch handler called with a batch of one)."""
    from mahjong_platform.tracked_consumer import Delivery

    if definition.handler is not None:
        return definition.handler
    batch_handler = definition.batch_handler
    assert batch_handler is not None, definition.group_id

    def handle(session: Any, envelope: Any, position: Any) -> None:
        batch_handler(session, [Delivery(envelope, position)])

    return handle
