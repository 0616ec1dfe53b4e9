"""The bytes a seat's stream sends, composed from parts serialized once (issue 10).

A table change goes out to every seat's feed (WatchView, Play): the same stored events, each
redacted and numbered for its seat, and each seat's view. Building one `TableUpdate` message per
seat copied every envelope into it and serialized it again for every seat; most of a view's parts
(the four seats' public facts, the legal actions, the deadline) are the same objects from one
update to the next. Here each part is serialized once and an update is the concatenation of its
parts in the protobuf wire format (an embedded message is its field's tag, its length and its
bytes; the fields of a message may come in any order; a repeated field's elements keep theirs),
so what a client parses is exactly the message the parts make (tests/test_wire.py checks it
against the messages built field by field).

What a seat may see is decided where it was: `core.views.redact` for the events (with the seat's
own numbering, `servicer.seat_envelopes`), `variants.view_for` for the view.
"""

from __future__ import annotations

import collections
import datetime
import functools
import typing
from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

from google.protobuf import timestamp_pb2
from mahjong.v1 import envelope_pb2
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.envelopes import timestamp_of as aware_timestamp_of
from mahjong_platform.events import payloads
from mahjong_rules import format_tiles, parse_tiles
from mahjong_rules.tiles import TILE_KIND_COUNT, copies_allowed, tile_code

from mahjong_table import codec
from mahjong_table.core.views import ACTION_LEAVE, redact
from mahjong_table.formula import views as formula_views
from mahjong_table.formula.state import FormulaTableState
from mahjong_table.sichuan import views as sichuan_views
from mahjong_table.variants import AnyTableState, view_for

_T = TypeVar("_T")

REDACTED_PAYLOADS: Final = payloads(redacted=True)
"""The payloads `redact` may change or drop (the event registry's `redacted`); every other event
is public as it is."""

# Field tags (field number << 3 | wire type): 0 varint, 2 length-delimited.
_ENVELOPE_SEQUENCE: Final = bytes([3 << 3 | 0])
_UPDATE_EVENTS: Final = bytes([1 << 3 | 2])
_UPDATE_VIEW: Final = bytes([2 << 3 | 2])
_VIEW_SEATS: Final = bytes([6 << 3 | 2])
_SEAT_MELDS: Final = bytes([4 << 3 | 2])
_VIEW_LEGAL_ACTIONS: Final = bytes([10 << 3 | 2])
_VIEW_DEADLINE: Final = bytes([12 << 3 | 2])
_RESPONSE_UPDATE: Final = bytes([1 << 3 | 2])
_RESPONSE_ANSWER: Final = bytes([2 << 3 | 2])
_RESPONSE_ANSWERS: Final = bytes([3 << 3 | 2])
_ANSWER_RESULT: Final = bytes([4 << 3 | 2])


def varint(value: int) -> bytes:
    """A non-negative integer in the protobuf base-128 varint encoding (below 4,096, the lengths
    and sequence numbers most parts have, made once)."""
    if value < _VARINTS_MADE:
        return _VARINTS[value]
    return _encode_varint(value)


def _encode_varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    encoded = bytearray()
    while value >= 0x80:
        encoded.append((value & 0x7F) | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


_VARINTS_MADE: Final = 4_096
_VARINTS: Final = tuple(_encode_varint(value) for value in range(_VARINTS_MADE))


def field(tag: bytes, data: bytes) -> bytes:
    """One length-delimited field: `tag`, the length of `data`, `data`."""
    return tag + varint(len(data)) + data


class ByIdentity(Generic[_T]):
    """Values derived from immutable objects, kept per object (at most `capacity`, the oldest
    out): the domain keeps a seat's public view as one object while the seat does not change (and
    shares it between viewers who may see the same), a table's deadline as one datetime per
    version, and a committed event as one envelope, so each is turned into bytes once.

    An `OrderedDict`, whose oldest entry goes in O(1) (`popitem(last=False)`): a plain dict's
    first key is found by scanning past the slots of the keys deleted before it, up to thousands
    of them at every eviction once the cache is full (5-13 us a miss, measured)."""

    def __init__(self, build: Callable[[typing.Any], _T], capacity: int) -> None:
        self._build = build
        self._capacity = capacity
        self._built: collections.OrderedDict[int, tuple[object, _T]] = collections.OrderedDict()

    def __call__(self, value: object) -> _T:
        known = self._built.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        built = self._build(value)
        if len(self._built) >= self._capacity:
            self._built.popitem(last=False)
        self._built[id(value)] = (value, built)  # the value is kept, so its id is not reused
        return built


class _StoredEnvelope:
    """A committed envelope in parts: everything but its sequence and payload, and its payload
    field, each serialized once (a seat's copy may carry another sequence, or another payload)."""

    __slots__ = ("envelope", "event", "head", "payload", "payload_name", "redacted")

    def __init__(self, envelope: envelope_pb2.Envelope) -> None:
        self.envelope = envelope
        payload_name = envelope.WhichOneof("payload")
        self.payload_name = payload_name
        head = envelope_pb2.Envelope()
        head.CopyFrom(envelope)
        head.ClearField("sequence")
        if payload_name is not None:
            head.ClearField(payload_name)
            payload_only = envelope_pb2.Envelope()
            getattr(payload_only, payload_name).CopyFrom(getattr(envelope, payload_name))
            self.payload = payload_only.SerializeToString()
        else:
            self.payload = b""
        # Its fields but the sequence, then the sequence's tag: a seat's copy adds its number.
        self.head = head.SerializeToString() + _ENVELOPE_SEQUENCE
        self.event: object = None
        # The redacted payloads made so far, each with the event it shows: the seats that see the
        # same (another seat's draw without its tile) share one.
        self.redacted: list[tuple[object, bytes]] = []

    def payload_for(self, viewer_seat: int) -> bytes | None:
        """The payload field as `viewer_seat` may see it; None: the seat must not learn of it."""
        if self.payload_name not in REDACTED_PAYLOADS:
            return self.payload
        if self.event is None:
            self.event = codec.event_of(self.envelope)
        event = typing.cast(typing.Any, self.event)
        visible = redact(event, viewer_seat)
        if visible is None:
            return None
        if visible is event:
            return self.payload
        for shown, payload in self.redacted:
            if shown == visible:
                return payload
        payload_only = envelope_pb2.Envelope()
        assert self.payload_name is not None
        getattr(payload_only, self.payload_name).CopyFrom(codec.to_message(visible))
        payload = payload_only.SerializeToString()
        self.redacted.append((visible, payload))
        return payload


_stored = ByIdentity(_StoredEnvelope, capacity=32_768)


def seat_event_bytes(
    envelopes: Sequence[envelope_pb2.Envelope], seat: int, hidden_at_last: int, after_seat_sequence: int
) -> list[bytes]:
    """The serialized envelopes `seat` may see of `envelopes` (consecutive, ending at a state
    whose ``hidden_counts[seat]`` is ``hidden_at_last``), redacted and numbered in the seat's own
    sequence as `servicer.seat_envelopes` numbers them, those numbered above `after_seat_sequence`."""
    visible: list[bytes] = []
    hidden_after = 0
    for envelope in reversed(envelopes):
        parts = _stored(envelope)
        payload = parts.payload_for(seat)
        if payload is None:
            hidden_after += 1
            continue
        number = envelope.sequence - (hidden_at_last - hidden_after)
        if number <= after_seat_sequence:
            break  # the earlier ones are numbered lower still
        visible.append(parts.head + varint(number) + payload)
    visible.reverse()
    return visible


@functools.lru_cache(maxsize=65_536)
def compact(tiles: str) -> str:
    """Tile codes ("1m2m2m") in compact notation ("122m"); a hand recurs in many views."""
    return tiles and format_tiles(parse_tiles(tiles))


@functools.lru_cache(maxsize=65_536)
def compact_codes(codes: tuple[str, ...]) -> str:
    """`compact` of the tile codes `codes` ("1m", "2m", "2m": "122m"), without joining them into
    a text to parse again: the tiles sorted, each one's digit, a suit's letter after its run, in
    one pass that also counts each tile's copies. Codes that are not all known tile codes, or
    more copies of a tile than a set holds, go through `compact` itself (which refuses them as
    it always did). A seat's hand changes with each of its draws and discards, so most of its
    views miss this cache once."""
    tiles: list[int | None] = [_TILE_BY_CODE.get(code) for code in codes]
    if None in tiles:
        return compact("".join(codes))
    known = typing.cast(list[int], tiles)
    known.sort()
    parts: list[str] = []
    letter = ""
    previous = -1
    copies = 0
    for tile in known:
        if tile == previous:
            copies += 1
            if copies > _COPIES_ALLOWED[tile]:
                return compact("".join(codes))  # more copies than a set holds: refused as compact refuses
        else:
            previous, copies = tile, 1
            if _TILE_LETTERS[tile] != letter:
                if letter:
                    parts.append(letter)
                letter = _TILE_LETTERS[tile]
        parts.append(_TILE_DIGITS[tile])
    if letter:
        parts.append(letter)
    return "".join(parts)


_TILE_CODES: Final = tuple(tile_code(tile) for tile in range(TILE_KIND_COUNT))
_TILE_BY_CODE: Final = {code: tile for tile, code in enumerate(_TILE_CODES)}
_TILE_DIGITS: Final = tuple(code[0] for code in _TILE_CODES)
_TILE_LETTERS: Final = tuple(code[1] for code in _TILE_CODES)
_COPIES_ALLOWED: Final = tuple(copies_allowed(tile) for tile in range(TILE_KIND_COUNT))


def _seat_field(seat_view: object) -> bytes:
    """The `TableView.seats` field of a `SeatView`. With melds, the fields before them (1-3), each
    meld (4, serialized once per value: `_meld_field`) and the fields after them (5-11), in the
    field order the message serializes in, so the bytes are the whole message's
    (tests/test_wire.py compares them)."""
    view = typing.cast(typing.Any, seat_view)
    if not view.melds:
        return field(
            _VIEW_SEATS,
            messages.SeatView(
                seat=view.seat,
                player_id=view.player_id,
                concealed_count=view.concealed_tile_count,
                **_seat_fields_after_melds(view),
            ).SerializeToString(),
        )
    before = messages.SeatView(
        seat=view.seat, player_id=view.player_id, concealed_count=view.concealed_tile_count
    ).SerializeToString()
    after = messages.SeatView(**_seat_fields_after_melds(view)).SerializeToString()
    return field(_VIEW_SEATS, b"".join([before, *[_meld_field(meld) for meld in view.melds], after]))


def _seat_fields_after_melds(view: typing.Any) -> dict[str, typing.Any]:
    return {
        "discards": view.discards,
        "missing_suit": view.missing_suit,
        "won": view.won,
        "left": view.left,
        "exchange_picked": view.exchange_picked,
        "missing_suit_chosen": view.missing_suit_chosen,
        "flowers": "".join(view.flowers),
    }


@functools.lru_cache(maxsize=4_096)
def _meld_field(meld: object) -> bytes:
    """The `SeatView.melds` field of a (public) meld: a function of its value."""
    return field(_SEAT_MELDS, codec.to_message(meld).SerializeToString())


def _legal_action_field(legal_action: object) -> bytes:
    action = typing.cast(typing.Any, legal_action)
    message = messages.LegalAction(kind=action.kind, tiles=action.tiles, suits=action.suits)
    return field(_VIEW_LEGAL_ACTIONS, message.SerializeToString())


def timestamp_of(moment: datetime.datetime) -> timestamp_pb2.Timestamp:
    """The `Timestamp` protobuf's `FromDatetime` makes of `moment`, naive taken as UTC (SQLite
    gives deadlines back naive), by the envelopes' own fast conversion (`envelopes.timestamp_of`;
    tests/test_wire.py compares the two)."""
    if moment.utcoffset() is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return aware_timestamp_of(moment)


def _deadline_field(moment: object) -> bytes:
    timestamp = timestamp_of(typing.cast(datetime.datetime, moment))
    return field(_VIEW_DEADLINE, timestamp.SerializeToString())


_seat_fields = ByIdentity(_seat_field, capacity=16_384)
_legal_action_fields = ByIdentity(_legal_action_field, capacity=4_096)
_deadline_fields = ByIdentity(_deadline_field, capacity=4_096)


def seat_sequence(state: AnyTableState, seat: int) -> int:
    """The table's version in `seat`'s own numbering (what its views and answers carry)."""
    return state.version - state.hidden_counts[seat]


def decides(state: AnyTableState, seat: int) -> bool:
    """Whether `seat`'s view of `state` gives it something to decide: a legal action other than
    leaving (which a seat may do at any moment, RULES.md 1.10). The view's own legal actions,
    without building the rest of the view."""
    if isinstance(state, FormulaTableState):
        actions = formula_views.legal_actions(state, seat)
    else:
        actions = sichuan_views.legal_actions(state, seat)
    return any(action.kind != ACTION_LEAVE for action in actions)


def view_bytes(state: AnyTableState, seat: int) -> bytes:
    """The serialized `TableView` of `seat` without its deadline (`deadline_bytes` adds it)."""
    view = view_for(state, seat)
    scalars = messages.TableView(
        table_id=view.table_id,
        room_id=state.room_id,
        sequence=seat_sequence(state, seat),
        your_seat=seat,
        hand=compact_codes(view.hand),
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
        waits=compact_codes(view.waits),
    ).SerializeToString()
    return b"".join(
        [
            scalars,
            *[_seat_fields(seat_view) for seat_view in view.seats],
            *[_legal_action_fields(action) for action in view.legal_actions],
        ]
    )


def deadline_bytes(deadline: datetime.datetime | None) -> bytes:
    """The `TableView.deadline` field of `deadline` (nothing for None), to follow `view_bytes`."""
    return b"" if deadline is None else _deadline_fields(deadline)


def update_bytes(events: Sequence[bytes], view: bytes) -> bytes:
    """A serialized `TableUpdate` of serialized envelopes and a serialized view."""
    return b"".join([*[field(_UPDATE_EVENTS, event) for event in events], field(_UPDATE_VIEW, view)])


def play_update_bytes(update: bytes) -> bytes:
    """A serialized `PlayResponse` carrying the serialized `TableUpdate` `update`."""
    return field(_RESPONSE_UPDATE, update)


def answer_bytes(
    idempotency_key: str, code: int = 0, message: str = "", result: bytes | None = None
) -> bytes:
    """A serialized `PlayAnswer`; `result`: the serialized `ActResponse` of an applied command (as
    the group committer made it, not parsed and serialized again)."""
    answer = messages.PlayAnswer(
        idempotency_key=idempotency_key, code=code, message=message
    ).SerializeToString()
    if result is not None:
        answer += field(_ANSWER_RESULT, result)
    return answer


def play_answer_bytes(
    idempotency_key: str, code: int = 0, message: str = "", result: bytes | None = None
) -> bytes:
    """A serialized `PlayResponse` carrying a `PlayAnswer` (`answer_bytes`)."""
    return play_answer_response(answer_bytes(idempotency_key, code, message, result))


def play_answer_response(answer: bytes) -> bytes:
    """A serialized `PlayResponse` carrying the serialized `PlayAnswer` `answer` alone."""
    return field(_RESPONSE_ANSWER, answer)


def play_answered_update_bytes(update: bytes, answers: Sequence[bytes]) -> bytes:
    """A serialized `PlayResponse` carrying the serialized `TableUpdate` `update` and, in its
    `answers`, the serialized `PlayAnswer`s `answers` (`PlayOptions.answers_with_updates`)."""
    return b"".join(
        [*[field(_RESPONSE_ANSWERS, answer) for answer in answers], field(_RESPONSE_UPDATE, update)]
    )
