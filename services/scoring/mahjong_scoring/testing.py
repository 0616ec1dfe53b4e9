"""Test helper: write a game's table events (protobuf envelopes) as a short script.

`TableScript` keeps each seat's tiles itself (independently of `game_facts`, so tests do not check
the fold against itself) and builds realistic events: `PlayerWon` carries the revealed hand and
the rules library's multiplier and fans, as the table engine would. Event ids are UUID 5 of the
table id and the sequence, so the same script always gives the same events.

Used by the scoring tests and available to other services' tests; not used by production code.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from dataclasses import dataclass, field

from google.protobuf.message import Message
from mahjong.v1 import common_pb2, envelope_pb2, match_events_pb2, rooms_pb2, table_events_pb2
from mahjong_platform.envelopes import new_envelope
from mahjong_rules import Meld, WinContext, evaluate_win, parse_tile, parse_tiles, tile_code

SCRIPT_NAMESPACE = uuid.UUID("0b7f2a8e-3c41-5d7a-a1f0-2e6b9c8d4f30")
SCRIPT_START = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)

_EXPOSURES = {
    "exposed": common_pb2.KONG_EXPOSURE_EXPOSED,
    "added": common_pb2.KONG_EXPOSURE_ADDED,
    "concealed": common_pb2.KONG_EXPOSURE_CONCEALED,
}
_WIN_BYS = {
    "self_draw": common_pb2.WIN_BY_SELF_DRAW,
    "discard": common_pb2.WIN_BY_DISCARD,
    "rob_kong": common_pb2.WIN_BY_ROB_KONG,
}


def room_rules(**overrides: object) -> rooms_pb2.RoomRules:
    """A Sichuan Bloody room with every RULES.md default; N = 1 and A = 0 unless overridden."""
    values: dict[str, object] = {
        "variant": common_pb2.VARIANT_SICHUAN_BLOODY,
        "coefficient": 1,
        "rake_beans": 0,
        "self_draw_bonus": "double",
        "flower_pig_points": 16,
        "escape_cap_points": 64,
        "escape_correction": 1,
        "escape_penalty_floor": 16,
        "escape_compensation_floor": 4,
    }
    values.update(overrides)
    return rooms_pb2.RoomRules(**values)  # type: ignore[arg-type]


@dataclass
class TableScript:
    """Builds one table's events in order; every method returns the envelope it appended."""

    table_id: str = "table-1"
    rules: rooms_pb2.RoomRules = field(default_factory=room_rules)
    dealer_seat: int = 0
    events: list[envelope_pb2.Envelope] = field(default_factory=list)
    hands: list[Counter[int]] = field(default_factory=lambda: [Counter() for _ in range(4)])
    melds: list[list[Meld]] = field(default_factory=lambda: [[] for _ in range(4)])
    missing_suits: str = ""
    last_discard: tuple[int, str] | None = None

    def emit(self, payload: Message) -> envelope_pb2.Envelope:
        """Append one event with the next sequence and a deterministic id and time."""
        sequence = len(self.events) + 1
        occurred_at = SCRIPT_START + datetime.timedelta(seconds=sequence)
        envelope = new_envelope(
            payload,
            clock=lambda: occurred_at,
            stream_id=self.table_id,
            sequence=sequence,
            event_id=str(uuid.uuid5(SCRIPT_NAMESPACE, f"{self.table_id}/{sequence}")),
            correlation_id=self.table_id,
        )
        self.events.append(envelope)
        return envelope

    def open(self, hands: list[str], missing_suits: str = "") -> TableScript:
        """TableOpened, HandsDealt (the dealer's hand has 14 tiles) and, if given, MissingSuitsDeclared."""
        self.emit(
            table_events_pb2.TableOpened(
                table_id=self.table_id,
                room_id="room-1",
                rules=self.rules,
                seats=[
                    match_events_pb2.SeatAssignment(seat=seat, player_id=f"p{seat}", ticket_id=f"t{seat}")
                    for seat in range(4)
                ],
                dealer_seat=self.dealer_seat,
            )
        )
        dealt = []
        for seat, hand in enumerate(hands):
            tiles = parse_tiles(hand)
            self.hands[seat] = Counter(tiles)
            dealt.append(table_events_pb2.DealtHand(seat=seat, tiles=[tile_code(tile) for tile in tiles]))
        self.emit(table_events_pb2.HandsDealt(hands=dealt, wall_remaining=55))
        if missing_suits:
            self.missing_suits = missing_suits
            self.emit(table_events_pb2.MissingSuitsDeclared(suits=list(missing_suits)))
        return self

    def draw(self, seat: int, tile: str, *, from_tail: bool = False) -> envelope_pb2.Envelope:
        """TileDrawn (a kong replacement comes from the tail)."""
        self.hands[seat][parse_tile(tile)] += 1
        return self.emit(
            table_events_pb2.TileDrawn(seat=seat, tile=tile, from_tail=from_tail, wall_remaining=10)
        )

    def discard(self, seat: int, tile: str) -> envelope_pb2.Envelope:
        """TileDiscarded."""
        self._take(seat, tile, 1)
        self.last_discard = (seat, tile)
        return self.emit(table_events_pb2.TileDiscarded(seat=seat, tile=tile))

    def passes(self, seat: int, tile: str) -> envelope_pb2.Envelope:
        """ClaimPassed."""
        return self.emit(table_events_pb2.ClaimPassed(seat=seat, tile=tile))

    def pong(self, seat: int, from_seat: int, tile: str) -> envelope_pb2.Envelope:
        """PongClaimed."""
        self._take(seat, tile, 2)
        self.melds[seat].append(Meld("pong", parse_tile(tile)))
        return self.emit(table_events_pb2.PongClaimed(seat=seat, from_seat=from_seat, tile=tile))

    def kong(self, seat: int, tile: str, exposure: str, from_seat: int = -1) -> envelope_pb2.Envelope:
        """KongDeclared (exposed: on `from_seat`'s discard; added: onto the seat's pong)."""
        code = parse_tile(tile)
        if exposure == "added":
            self._take(seat, tile, 1)
            self.melds[seat] = [
                Meld("kong", code, "added") if meld == Meld("pong", code) else meld
                for meld in self.melds[seat]
            ]
        else:
            self._take(seat, tile, 3 if exposure == "exposed" else 4)
            self.melds[seat].append(Meld("kong", code, exposure))  # type: ignore[arg-type]
        return self.emit(
            table_events_pb2.KongDeclared(
                seat=seat, tile=tile, exposure=_EXPOSURES[exposure], from_seat=from_seat
            )
        )

    def robbed(self, kong_seat: int, tile: str, winner_seats: list[int]) -> envelope_pb2.Envelope:
        """KongRobbed: the added kong reverts to a pong."""
        code = parse_tile(tile)
        self.melds[kong_seat] = [
            Meld("pong", code) if meld == Meld("kong", code, "added") else meld
            for meld in self.melds[kong_seat]
        ]
        return self.emit(
            table_events_pb2.KongRobbed(kong_seat=kong_seat, tile=tile, winner_seats=winner_seats)
        )

    def win(
        self,
        seat: int,
        tile: str,
        win_by: str = "discard",
        from_seat: int = -1,
        *,
        after_kong: bool = False,
        last_tile: bool = False,
    ) -> envelope_pb2.Envelope:
        """PlayerWon with the revealed hand and the rules library's multiplier and fans."""
        code = parse_tile(tile)
        if win_by == "self_draw":
            self._take(seat, tile, 1)
        concealed = sorted(self.hands[seat].elements())
        missing = self.missing_suits[seat] if self.missing_suits else None
        evaluation = evaluate_win(
            concealed,
            self.melds[seat],
            code,
            missing,  # type: ignore[arg-type]
            WinContext(
                win_by=win_by,  # type: ignore[arg-type]
                after_kong=after_kong,
                last_tile=last_tile,
                dealer=seat == self.dealer_seat,
                self_draw_bonus=self.rules.self_draw_bonus or "double",  # type: ignore[arg-type]
                cap_points=self.rules.cap_points,
            ),
        )
        assert evaluation is not None, f"seat {seat} does not win on {tile}"
        return self.emit(
            table_events_pb2.PlayerWon(
                seat=seat,
                win_tile=tile,
                win_by=_WIN_BYS[win_by],
                from_seat=from_seat,
                concealed=[tile_code(tile) for tile in concealed],
                melds=[_meld_message(meld) for meld in self.melds[seat]],
                fans=[
                    common_pb2.Fan(id=fan.id, name=fan.name, multiplier=fan.multiplier)
                    for fan in evaluation.fans
                ],
                multiplier=evaluation.multiplier,
                after_kong=after_kong,
                last_tile=last_tile,
            )
        )

    def left(self, seat: int, *, had_won: bool = False) -> envelope_pb2.Envelope:
        """PlayerLeft."""
        return self.emit(table_events_pb2.PlayerLeft(seat=seat, reason="leave", had_won=had_won))

    def wall_exhausted(self) -> envelope_pb2.Envelope:
        """WallExhausted."""
        return self.emit(table_events_pb2.WallExhausted())

    def ended(self, reason: str) -> envelope_pb2.Envelope:
        """GameEnded with every seat's revealed hand."""
        hands = [
            table_events_pb2.RevealedHand(
                seat=seat,
                concealed=[tile_code(tile) for tile in sorted(self.hands[seat].elements())],
                melds=[_meld_message(meld) for meld in self.melds[seat]],
            )
            for seat in range(4)
        ]
        return self.emit(table_events_pb2.GameEnded(reason=reason, hands=hands))

    def _take(self, seat: int, tile: str, copies: int) -> None:
        code = parse_tile(tile)
        assert self.hands[seat][code] >= copies, f"seat {seat} holds fewer than {copies} {tile}"
        self.hands[seat][code] -= copies


def _meld_message(meld: Meld) -> common_pb2.Meld:
    exposure = _EXPOSURES[meld.exposure] if meld.exposure else common_pb2.KONG_EXPOSURE_UNSPECIFIED
    return common_pb2.Meld(kind=meld.kind, tile=tile_code(meld.tile), exposure=exposure, from_seat=-1)
