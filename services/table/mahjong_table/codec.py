"""Domain events ↔ protobuf messages, field for field.

The domain events mirror `table_events.proto` by name (see `core/events.py`), so one generic
mapping serves every event: nested dataclasses become nested messages, tuples become repeated
fields, and the three enums travel as lower-case names in the domain ("exposed", "self_draw",
"sichuan_bloody") and as proto enum values on the wire.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from google.protobuf.message import Message
from mahjong.v1 import common_pb2, envelope_pb2, match_events_pb2, rooms_pb2, table_events_pb2
from mahjong_rules.room_rules import RoomRules

from mahjong_table.core import events as domain_events

# field name → (proto enum prefix, enum descriptor)
_ENUM_FIELDS = {
    "exposure": ("KONG_EXPOSURE_", common_pb2.KongExposure),
    "win_by": ("WIN_BY_", common_pb2.WinBy),
    "variant": ("VARIANT_", common_pb2.Variant),
}
_MESSAGE_MODULES = (table_events_pb2, common_pb2, match_events_pb2, rooms_pb2)
_DOMAIN_TYPES: dict[str, type[Any]] = {
    name: value
    for name, value in vars(domain_events).items()
    if isinstance(value, type) and dataclasses.is_dataclass(value)
}
_DOMAIN_TYPES["RoomRules"] = RoomRules


class CodecError(ValueError):
    """A message does not fit the domain event it names (a bug or a foreign producer)."""


def _message_class(name: str) -> type[Message]:
    for module in _MESSAGE_MODULES:
        message_class = getattr(module, name, None)
        if message_class is not None:
            return typing.cast(type[Message], message_class)
    raise CodecError(f"no protobuf message named {name}")


def to_message(value: Any) -> Message:
    """The protobuf message of a domain dataclass (event, meld, fan, rules...), built by one call
    of its class with every field (nested messages as dicts, which protobuf builds in C)."""
    plan = _building_plan(type(value))
    if plan is None:
        return _to_message_field_by_field(value)
    return plan[0](**_arguments(value, plan[1]))


def _arguments(value: Any, fields: _BuildingFields) -> dict[str, Any]:
    """`value`'s fields as its message class's keyword arguments (see `_building_plan`)."""
    arguments: dict[str, Any] = {}
    for name, kind, nested in fields:
        item = getattr(value, name)
        if kind in (_SCALAR, _REPEATED):
            arguments[name] = item
        elif kind == _ENUM:
            number = nested.get(item)
            arguments[name] = _enum_number(name, item, nested) if number is None else number
        elif kind == _MESSAGE:
            arguments[name] = _arguments(item, nested)
        else:  # _MESSAGES
            arguments[name] = [_arguments(element, nested) for element in item]
    return arguments


def _enum_number(name: str, item: str, known: dict[str, int]) -> int:
    """The proto enum number of the domain's lower-case name `item` ("" = unset), remembered."""
    prefix, enum = _ENUM_FIELDS[name]
    number = enum.Value(prefix + item.upper()) if item else 0
    known[item] = number
    return number


_BuildingFields = tuple[tuple[str, int, Any], ...]
_BUILDING_PLANS: dict[type[Any], tuple[type[Message], _BuildingFields] | None] = {}


def _building_plan(domain_type: type[Any]) -> tuple[type[Message], _BuildingFields] | None:
    """The message class of `domain_type` and how each field becomes a keyword argument, from the
    type hints `from_message` reads with (`_reading_plan`): a nested dataclass as its fields'
    plan, an enum with its numbers by name. None for a type whose hints do not resolve here: it
    is written field by field."""
    if domain_type in _BUILDING_PLANS:
        return _BUILDING_PLANS[domain_type]
    _BUILDING_PLANS[domain_type] = None  # while building (and if it fails)
    try:
        reading = _reading_plan(domain_type)
    except (NameError, TypeError):
        return None
    fields: list[tuple[str, int, Any]] = []
    for name, kind, nested_type in reading:
        nested: Any = None
        if kind == _ENUM:
            nested = {}
        elif kind in (_MESSAGE, _MESSAGES):
            assert nested_type is not None
            nested_plan = _building_plan(nested_type)
            if nested_plan is None:
                return None
            nested = nested_plan[1]
        fields.append((name, kind, nested))
    plan = (_message_class(domain_type.__name__), tuple(fields))
    _BUILDING_PLANS[domain_type] = plan
    return plan


def _to_message_field_by_field(value: Any) -> Message:
    message_class, fields = _writing_plan(type(value))
    message = message_class()
    for name, enum_field in fields:
        item = getattr(value, name)
        if enum_field is not None:
            prefix, enum = enum_field
            setattr(message, name, enum.Value(prefix + item.upper()) if item else 0)
        elif isinstance(item, tuple):
            target = getattr(message, name)
            if item and hasattr(type(item[0]), "__dataclass_fields__"):
                target.extend(to_message(element) for element in item)
            else:
                target.extend(item)
        elif hasattr(type(item), "__dataclass_fields__"):
            getattr(message, name).CopyFrom(to_message(item))
        else:
            setattr(message, name, item)
    return message


_WritingPlan = tuple[type[Message], tuple[tuple[str, Any], ...]]
_WRITING_PLANS: dict[type[Any], _WritingPlan] = {}


def _writing_plan(domain_type: type[Any]) -> _WritingPlan:
    """The message class of `domain_type` and its fields (with their enum, if any), worked out
    once per type."""
    known = _WRITING_PLANS.get(domain_type)
    if known is None:
        fields = tuple(
            (field.name, _ENUM_FIELDS.get(field.name)) for field in dataclasses.fields(domain_type)
        )
        known = _WRITING_PLANS[domain_type] = (_message_class(domain_type.__name__), fields)
    return known


def from_message(message: Message, domain_type: type[Any] | None = None) -> Any:
    """The domain dataclass of a protobuf message (the inverse of `to_message`)."""
    domain_type = domain_type or _DOMAIN_TYPES[message.DESCRIPTOR.name]
    arguments: dict[str, Any] = {}
    for name, kind, nested in _reading_plan(domain_type):
        value = getattr(message, name)
        if kind == _ENUM:
            prefix, enum = _ENUM_FIELDS[name]
            arguments[name] = enum.Name(value).removeprefix(prefix).lower() if value else ""
        elif kind == _MESSAGE:
            arguments[name] = from_message(value, nested)
        elif kind == _MESSAGES:
            arguments[name] = tuple(from_message(item, nested) for item in value)
        elif kind == _REPEATED:
            arguments[name] = tuple(value)
        else:
            arguments[name] = value
    return domain_type(**arguments)


_ENUM, _MESSAGE, _MESSAGES, _REPEATED, _SCALAR = range(5)


_ReadingPlan = tuple[tuple[str, int, type[Any] | None], ...]
_READING_PLANS: dict[type[Any], _ReadingPlan] = {}


def _reading_plan(domain_type: type[Any]) -> _ReadingPlan:
    """How each field of `domain_type` is read from its message, worked out once per type (the
    type hints are costly to resolve, 1.5 ms an event, and the codec runs for every event read)."""
    known = _READING_PLANS.get(domain_type)
    if known is not None:
        return known
    hints = typing.get_type_hints(domain_type, vars(domain_events) | {"RoomRules": RoomRules})
    plan: list[tuple[str, int, type[Any] | None]] = []
    for field in dataclasses.fields(domain_type):
        hint = hints[field.name]
        if field.name in _ENUM_FIELDS:
            plan.append((field.name, _ENUM, None))
        elif dataclasses.is_dataclass(hint):
            plan.append((field.name, _MESSAGE, typing.cast(type[Any], hint)))
        elif typing.get_origin(hint) is tuple:
            (element_type, *_rest) = typing.get_args(hint)
            if dataclasses.is_dataclass(element_type):
                plan.append((field.name, _MESSAGES, typing.cast(type[Any], element_type)))
            else:
                plan.append((field.name, _REPEATED, None))
        else:
            plan.append((field.name, _SCALAR, None))
    _READING_PLANS[domain_type] = tuple(plan)
    return _READING_PLANS[domain_type]


def event_of(envelope: envelope_pb2.Envelope) -> domain_events.TableEvent:
    """The domain event an envelope carries; CodecError when it carries no table event."""
    payload_name = envelope.WhichOneof("payload")
    if payload_name is None:
        raise CodecError(f"event {envelope.event_id} has no payload")
    payload = getattr(envelope, payload_name)
    if payload.DESCRIPTOR.name not in _DOMAIN_TYPES:
        raise CodecError(f"event {envelope.event_id} carries {payload.DESCRIPTOR.name}, not a table event")
    return typing.cast(domain_events.TableEvent, from_message(payload))


def room_rules_of(message: rooms_pb2.RoomRules) -> RoomRules:
    """The domain room rules of the room snapshot in `TableAssigned`."""
    return typing.cast(RoomRules, from_message(message, RoomRules))
