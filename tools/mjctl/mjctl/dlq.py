"""``mjctl dlq list|show|redrive``: what is dead-lettered on ``mahjong.dlq.v1``, why, and re-driving
it, exactly once, to the consumer group it came from once the cause is fixed.

An entry is named ``<partition>:<offset>`` (its place on the dead letter topic). ``list`` and
``show`` read the dead letter topic (Kafka is a public contract) and ask each service's
``DeadLetterService.ListRedrives`` which consumer groups it runs and what it has re-driven.
``redrive`` asks the service that runs the entry's consumer group to re-drive it
(``DeadLetterService.RedriveDeadLetter``): that service applies the event with the handler it has
installed, in its own database, once (processed ids guard against an event applied meanwhile, and
the re-drive is recorded in the same transaction, so running it again changes nothing). mjctl
runs no service code: deploy the fix to the service, then re-drive.

The services are dialled at ``MAHJONG_<SERVICE>_GRPC_TARGET`` (those of ``MAHJONG_RUN_SERVICES``,
default all four) with an ops token minted from ``MAHJONG_JWT_SECRET`` (or ``--token``).

Exit codes: 0 done; 1 an entry could not be re-driven (its handler still fails, it holds no
decodable event, or no reachable service runs its consumer group) or an id is not on the topic;
2 usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mahjong.v1 import dead_letter_service_pb2
    from mahjong_platform.config import Settings
    from mahjong_platform.dead_letters import DeadLetterEntry

SERVICES: Final = ("matchmaking", "table", "scoring", "ledger")
TOKEN_TTL_SECONDS: Final = 600
CALL_TIMEOUT_SECONDS: Final = 60.0
REASON_WIDTH = 70


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="list, show and re-drive dead letters (mahjong.dlq.v1)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    token = argparse.ArgumentParser(add_help=False)
    token.add_argument(
        "--token", metavar="JWT", help="an ops token (default: one minted with MAHJONG_JWT_SECRET)"
    )
    commands = parser.add_subparsers(
        dest="dlq_command", required=True, metavar="COMMAND", help="list, show or redrive"
    )
    listing = commands.add_parser(
        "list", help="every dead letter: where it came from, why, whether re-driven", parents=[token]
    )
    listing.add_argument("--consumer", metavar="GROUP", help="only this consumer group's dead letters")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=_list)
    show = commands.add_parser("show", help="one dead letter in full, its event decoded", parents=[token])
    show.add_argument("entry", metavar="PARTITION:OFFSET", help="the id `mjctl dlq list` shows")
    show.set_defaults(handler=_show)
    redrive = commands.add_parser(
        "redrive",
        help="have the service that runs their consumer apply dead letters, once (after a fix)",
        parents=[token],
    )
    redrive.add_argument("entries", metavar="PARTITION:OFFSET", nargs="*", help="ids from `mjctl dlq list`")
    redrive.add_argument("--all", action="store_true", help="every dead letter not yet re-driven")
    redrive.add_argument("--consumer", metavar="GROUP", help="with --all: only this consumer group's")
    redrive.set_defaults(handler=_redrive)


@dataclasses.dataclass
class _Services:
    """The services mjctl asks: which consumer groups each runs, and its recorded re-drives."""

    settings: Settings
    token: str
    groups: dict[str, str] = dataclasses.field(default_factory=dict)
    """consumer group -> the service that runs it (among those that answered)."""
    redrives: dict[str, dead_letter_service_pb2.Redrive] = dataclasses.field(default_factory=dict)
    """entry id -> its recorded re-drive."""
    unreachable: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def ask(cls, settings: Settings, token: str | None) -> _Services:
        from mahjong.v1 import dead_letter_service_pb2
        from mahjong_platform.auth import ROLE_OPS, mint_token

        services = cls(
            settings,
            token or mint_token(settings.jwt_secret, "mjctl-dlq", [ROLE_OPS], ttl_seconds=TOKEN_TTL_SECONDS),
        )
        for name in _service_names():
            try:
                answer = services.call(name, "ListRedrives", dead_letter_service_pb2.ListRedrivesRequest())
            except _CallError as error:
                services.unreachable[name] = str(error)
                continue
            services.groups.update(dict.fromkeys(answer.consumer_groups, name))
            services.redrives.update({redrive.entry_id: redrive for redrive in answer.redrives})
        return services

    def call(self, service: str, method: str, request: Any) -> Any:
        """One ``DeadLetterService`` call to ``service``; `_CallError` with the status it answered."""
        import grpc
        from mahjong.v1 import dead_letter_service_pb2_grpc
        from mahjong_platform.grpc_client import open_channel

        from mjctl.run import service_name

        target = self.settings.grpc_target(service_name(service))
        with open_channel(target, lambda: self.token) as channel:
            stub = dead_letter_service_pb2_grpc.DeadLetterServiceStub(channel)
            try:
                return getattr(stub, method)(request, timeout=CALL_TIMEOUT_SECONDS)
            except grpc.RpcError as error:
                raise _CallError(f"{service} at {target}: {error.code().name}: {error.details()}") from None

    def status(self, entry: DeadLetterEntry) -> str:
        """ "pending", "re-driven (<outcome>) <time>", or "?" when no service that answered runs its group."""
        group = entry.dead_letter.consumer_group
        if group not in self.groups:
            return "? (no reachable service runs this consumer group)"
        redrive = self.redrives.get(entry.entry_id)
        if redrive is None or redrive.consumer_group != group:
            return "pending"
        return _status_text(redrive)

    def warn_unreachable(self) -> None:
        for said in self.unreachable.values():
            print(f"mjctl dlq: not reachable: {said}", file=sys.stderr)


class _CallError(Exception):
    """A service did not answer a DeadLetterService call (its status code and details)."""


def _service_names() -> list[str]:
    """``MAHJONG_RUN_SERVICES`` (as `mjctl run` reads it) or all four services."""
    from mjctl.run import requested_services

    return [name for name in requested_services() if name in SERVICES] or list(SERVICES)


def _read(settings: Settings, only: Sequence[tuple[int, int]] | None = None) -> list[DeadLetterEntry]:
    from mahjong_platform.dead_letters import read_dead_letters
    from mahjong_platform.topics import Topics

    topic = Topics.with_prefix(settings.topic_prefix).dead_letter
    return read_dead_letters(settings.kafka_bootstrap_servers, topic, only=only)


def _status_text(redrive: dead_letter_service_pb2.Redrive) -> str:
    return f"re-driven ({_outcome_name(redrive.outcome)}) {_redriven_at(redrive)}"


def _redriven_at(redrive: dead_letter_service_pb2.Redrive) -> str:
    return redrive.redriven_at.ToDatetime(tzinfo=datetime.UTC).isoformat(timespec="seconds")


def _outcome_name(outcome: int) -> str:
    """A `RedriveOutcome` in the words mjctl has always shown: "applied", "already_applied", ..."""
    from mahjong.v1 import dead_letter_service_pb2

    name: str = dead_letter_service_pb2.RedriveOutcome.Name(outcome)  # type: ignore[arg-type]
    return name.removeprefix("REDRIVE_OUTCOME_").lower()


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
    services = _Services.ask(settings, arguments.token)
    services.warn_unreachable()
    rows = [_summary(entry, services.status(entry)) for entry in entries]
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
    services = _Services.ask(settings, arguments.token)
    services.warn_unreachable()
    details = _summary(entry, services.status(entry))
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
    services = _Services.ask(settings, arguments.token)
    services.warn_unreachable()
    failures = sum(not _redrive_one(services, entry) for entry in entries)
    return 1 if failures or missing else 0


def _redrive_one(services: _Services, entry: DeadLetterEntry) -> bool:
    """Ask the service that runs the entry's group to re-drive it; print what happened; False when
    it was not re-driven."""
    from mahjong.v1 import dead_letter_service_pb2

    group = entry.dead_letter.consumer_group
    service = services.groups.get(group)
    if service is None:
        print(f"{entry.entry_id}: consumer group {group!r} is run by no reachable service; not re-driven")
        return False
    request = dead_letter_service_pb2.RedriveDeadLetterRequest(entry_id=entry.entry_id)
    try:
        answer = services.call(service, "RedriveDeadLetter", request)
    except _CallError as error:
        print(f"{entry.entry_id}: not re-driven: {error}")
        return False
    redrive = answer.redrive
    outcome = _outcome_name(redrive.outcome)
    if answer.newly_redriven:
        print(f"{entry.entry_id}: {group} {answer.event_type} {redrive.event_id}: {_words(outcome)}")
    else:
        print(f"{entry.entry_id}: already re-driven at {_redriven_at(redrive)} ({outcome}); nothing changed")
    return True


def _words(outcome: str) -> str:
    return {
        "applied": "applied",
        "already_applied": "already applied (by the consumer meanwhile): recorded, nothing applied twice",
        "not_wanted": "not an event this consumer applies: recorded, nothing applied",
    }.get(outcome, outcome)
