"""The event registry: every event type of the system declared once, by its `Envelope` payload.

Each payload field of `mahjong.v1.Envelope` (match, table of both families, settlement and ledger
events) is declared here by the `event(...)` decorator on the function that tells it in words,
with what its consumers must do with it:

- `families`: the table families whose tables emit the event (a table event); the family's fold
  (`mahjong_table.sichuan.evolve`, `mahjong_table.formula.evolve`) must fold exactly these;
- `redacted`: the table may show it to a seat changed or not at all (`mahjong_table.core.views`
  has a redaction for exactly these; every other table event is public as it is);
- `opens_claim_window`: a claim window may open after it (`mahjong_table.visibility`);
- `scored_by`: the families whose settlement fold must handle it (`HANDLERS` of
  `mahjong_scoring.game_facts.sichuan` and `.formula`);
- `releases_seat`: matchmaking frees a seat on it (`mahjong_matchmaking.projection`);
- the function itself: the event in one line (a `GameSettled` takes one line per player),
  which `mjctl replay` and `mjctl play` print.

`tests/test_event_registry.py` checks that every payload of the envelope is declared here with its
message, and that each consumer handles exactly the events declared for it: adding an event type is
a proto message, its envelope case, one declaration here, and what the declaration says to do.

The descriptions show what the events hold: full information (walls, hands, picks) for ops and
finance, who see every event unredacted; a player's redacted events read as "draws a tile", "picks
three tiles" (ARCHITECTURE.md "Identity and hidden information").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from google.protobuf.message import Message
from mahjong.v1 import (
    common_pb2,
    envelope_pb2,
    ledger_events_pb2,
    match_events_pb2,
    settlement_events_pb2,
    table_events_pb2,
)

WIN_BY: Final = {
    common_pb2.WIN_BY_SELF_DRAW: "self-draw",
    common_pb2.WIN_BY_DISCARD: "discard",
    common_pb2.WIN_BY_ROB_KONG: "robbing a kong",
}
EXPOSURE: Final = {
    common_pb2.KONG_EXPOSURE_EXPOSED: "exposed",
    common_pb2.KONG_EXPOSURE_ADDED: "added",
    common_pb2.KONG_EXPOSURE_CONCEALED: "concealed",
}
VARIANT: Final = {
    common_pb2.VARIANT_SICHUAN_BLOODY: "Sichuan Bloody",
    common_pb2.VARIANT_FORMULA: "Formula",
}


class Story:
    """What earlier events of the same table taught: who sits where, and which family is played
    (Sichuan wins multiply fans, Formula wins add them; RULES.md 1.7 and 2.2)."""

    def __init__(self) -> None:
        self.players: dict[int, str] = {}
        self.variant: int = common_pb2.VARIANT_UNSPECIFIED

    def name(self, seat: int) -> str:
        player = self.players.get(seat)
        return f"seat {seat} ({player})" if player else f"seat {seat}"

    @property
    def formula(self) -> bool:
        return self.variant == common_pb2.VARIANT_FORMULA


Describer = Callable[[Any, Story], str]
_Described = TypeVar("_Described", bound=Describer)

SICHUAN: Final = "sichuan_bloody"
FORMULA: Final = "formula"
"""The table families, by `RoomRules.variant` (the domain's names)."""
SICHUAN_ONLY: Final = frozenset({SICHUAN})
FORMULA_ONLY: Final = frozenset({FORMULA})
BOTH: Final = SICHUAN_ONLY | FORMULA_ONLY


@dataclass(frozen=True, slots=True)
class EventType:
    """One event type: its `Envelope` payload, its message, its words and its consumers' duties."""

    payload: str
    """The `Envelope` oneof field name ("tile_drawn")."""
    message: type[Message]
    describe: Describer
    families: frozenset[str] = frozenset()
    redacted: bool = False
    opens_claim_window: bool = False
    scored_by: frozenset[str] = frozenset()
    releases_seat: bool = False


EVENTS: dict[str, EventType] = {}
"""Payload field name of `Envelope` → its event type, in the order declared."""


def event(
    payload: str,
    message: type[Message],
    *,
    families: frozenset[str] = frozenset(),
    redacted: bool = False,
    opens_claim_window: bool = False,
    scored_by: frozenset[str] = frozenset(),
    releases_seat: bool = False,
) -> Callable[[_Described], _Described]:
    """Declare the event type of `payload`, described in words by the decorated function."""

    def declare(describe: _Described) -> _Described:
        assert payload not in EVENTS, f"{payload} declared twice"
        EVENTS[payload] = EventType(
            payload, message, describe, families, redacted, opens_claim_window, scored_by, releases_seat
        )
        return describe

    return declare


def payloads(**duty: object) -> frozenset[str]:
    """The payloads whose declaration has every `duty` given, e.g. `payloads(releases_seat=True)`."""
    return frozenset(
        name
        for name, kind in EVENTS.items()
        if all(getattr(kind, key) == value for key, value in duty.items())
    )


def table_payloads(family: str) -> frozenset[str]:
    """The payloads a table of `family` emits."""
    return frozenset(name for name, kind in EVENTS.items() if family in kind.families)


def scored_payloads(family: str) -> frozenset[str]:
    """The payloads the settlement fold of `family` must handle."""
    return frozenset(name for name, kind in EVENTS.items() if family in kind.scored_by)


def tiles(codes: Iterable[str]) -> str:
    """Tile codes separated by spaces ("-" for none)."""
    return " ".join(codes) or "-"


def melds(meld_messages: Iterable[common_pb2.Meld]) -> str:
    parts = []
    for meld in meld_messages:
        exposure = f" {EXPOSURE[meld.exposure]}" if meld.exposure in EXPOSURE else ""
        claimed = meld.kind in ("pong", "chow") or meld.exposure == common_pb2.KONG_EXPOSURE_EXPOSED
        source = f" from seat {meld.from_seat}" if claimed and meld.from_seat >= 0 else ""
        parts.append(f"{meld.kind}{exposure} {meld.tile}{source}")
    return ", ".join(parts)


def _hidden(codes: Sequence[str], what: str) -> str:
    """The tiles, or `what` when they are redacted for the viewer."""
    return tiles(codes) if codes else what


def _flag(condition: bool, text: str) -> str:
    return f" [{text}]" if condition else ""


def fans_text(fans: Iterable[common_pb2.Fan], formula: bool) -> str:
    """Sichuan: "name ×factor" (they multiply). Formula: "name value" (×count when counted more
    than once; they add)."""
    if formula:
        return " · ".join(
            f"{fan.name or fan.id} {fan.multiplier}" + (f"×{fan.count}" if fan.count > 1 else "")
            for fan in fans
        )
    return " · ".join(
        f"{fan.name or fan.id} ×{fan.multiplier}" + (f" (×{fan.count})" if fan.count > 1 else "")
        for fan in fans
    )


def fan_sum(fans: Iterable[common_pb2.Fan]) -> int:
    """A Formula hand's fan total: each fan's value times its count."""
    return sum(fan.multiplier * max(fan.count, 1) for fan in fans)


# --- matchmaking (mahjong.match.v1) ------------------------------------------------------------


@event("ticket_queued", match_events_pb2.TicketQueued)
def _ticket_queued(event: match_events_pb2.TicketQueued, _story: Story) -> str:
    return f"player {event.player_id} queues for room {event.room_id} (ticket {event.ticket_id})"


@event("ticket_cancelled", match_events_pb2.TicketCancelled)
def _ticket_cancelled(event: match_events_pb2.TicketCancelled, _story: Story) -> str:
    return (
        f"player {event.player_id} leaves the queue (ticket {event.ticket_id}, {event.reason or 'no reason'})"
    )


@event("table_assigned", match_events_pb2.TableAssigned)
def _table_assigned(event: match_events_pb2.TableAssigned, _story: Story) -> str:
    seats = ", ".join(f"seat {seat.seat} {seat.player_id}" for seat in event.seats)
    return f"table {event.table_id} formed in room {event.room_id}: {seats}; shuffle seed {event.seed}"


# --- the table (mahjong.table.v1), both families -----------------------------------------------


@event("table_opened", table_events_pb2.TableOpened, families=BOTH, redacted=True, scored_by=BOTH)
def _table_opened(opened: table_events_pb2.TableOpened, story: Story) -> str:
    story.players = {seat.seat: seat.player_id for seat in opened.seats}
    story.variant = opened.rules.variant
    rules = opened.rules
    family = VARIANT.get(rules.variant, "unknown family")
    wildcard = (
        f", wildcard {opened.wildcard} (indicator {opened.wildcard_indicator})" if opened.wildcard else ""
    )
    exchange = "" if story.formula else f"; exchange {opened.exchange_direction or '-'}"
    return (
        f"table {opened.table_id} opened in room {opened.room_id} ({family}, "
        f"coefficient {rules.coefficient}, rake {rules.rake_beans} beans): "
        + ", ".join(story.name(seat) for seat in sorted(story.players))
        + f"; dealer seat {opened.dealer_seat}"
        + f"; dice {opened.die_1}+{opened.die_2} by seat {opened.dice_roller_seat}"
        + f"{exchange}{wildcard}"
        + (f"; wall ({len(opened.wall)} tiles) {tiles(opened.wall)}" if opened.wall else "")
    )


@event("hands_dealt", table_events_pb2.HandsDealt, families=BOTH, redacted=True, scored_by=SICHUAN_ONLY)
def _hands_dealt(dealt: table_events_pb2.HandsDealt, story: Story) -> str:
    hands = "; ".join(f"{story.name(hand.seat)} {_hidden(hand.tiles, 'tiles')}" for hand in dealt.hands)
    return f"hands dealt: {hands}; wall {dealt.wall_remaining} left"


@event("exchange_picked", table_events_pb2.ExchangePicked, families=SICHUAN_ONLY, redacted=True)
def _exchange_picked(picked: table_events_pb2.ExchangePicked, story: Story) -> str:
    return f"{story.name(picked.seat)} picks {_hidden(picked.tiles, 'three tiles')} to exchange" + _flag(
        picked.automatic, "auto"
    )


@event(
    "tiles_exchanged",
    table_events_pb2.TilesExchanged,
    families=SICHUAN_ONLY,
    redacted=True,
    scored_by=SICHUAN_ONLY,
)
def _tiles_exchanged(exchanged: table_events_pb2.TilesExchanged, _story: Story) -> str:
    transfers = "; ".join(
        f"seat {transfer.from_seat} → seat {transfer.to_seat}: {tiles(transfer.tiles)}"
        for transfer in exchanged.transfers
    )
    return f"tiles exchanged {exchanged.direction}: {transfers}"


@event("missing_suit_chosen", table_events_pb2.MissingSuitChosen, families=SICHUAN_ONLY, redacted=True)
def _missing_suit_chosen(chosen: table_events_pb2.MissingSuitChosen, story: Story) -> str:
    suit = f"missing suit {chosen.suit}" if chosen.suit else "a missing suit"
    return f"{story.name(chosen.seat)} chooses {suit}{_flag(chosen.automatic, 'auto')}"


@event(
    "missing_suits_declared",
    table_events_pb2.MissingSuitsDeclared,
    families=SICHUAN_ONLY,
    scored_by=SICHUAN_ONLY,
)
def _missing_suits_declared(declared: table_events_pb2.MissingSuitsDeclared, _story: Story) -> str:
    return "missing suits declared: " + ", ".join(
        f"seat {seat} {suit}" for seat, suit in enumerate(declared.suits)
    )


@event("tile_drawn", table_events_pb2.TileDrawn, families=BOTH, redacted=True, scored_by=SICHUAN_ONLY)
def _tile_drawn(drawn: table_events_pb2.TileDrawn, story: Story) -> str:
    return (
        f"{story.name(drawn.seat)} draws {drawn.tile or 'a tile'}{_flag(drawn.from_tail, 'from the tail')}"
        f" (wall {drawn.wall_remaining} left)"
    )


@event(
    "tile_discarded",
    table_events_pb2.TileDiscarded,
    families=BOTH,
    opens_claim_window=True,
    scored_by=SICHUAN_ONLY,
)
def _tile_discarded(discarded: table_events_pb2.TileDiscarded, story: Story) -> str:
    return f"{story.name(discarded.seat)} discards {discarded.tile}{_flag(discarded.automatic, 'auto')}"


@event("claim_passed", table_events_pb2.ClaimPassed, families=BOTH, redacted=True)
def _claim_passed(passed: table_events_pb2.ClaimPassed, story: Story) -> str:
    win = _flag(passed.passed_win, f"passed a win ×{passed.passed_win_multiplier}")
    return f"{story.name(passed.seat)} passes on {passed.tile}{win}{_flag(passed.automatic, 'auto')}"


@event("pong_claimed", table_events_pb2.PongClaimed, families=BOTH, scored_by=SICHUAN_ONLY)
def _pong_claimed(pong: table_events_pb2.PongClaimed, story: Story) -> str:
    return f"{story.name(pong.seat)} pongs {pong.tile} from {story.name(pong.from_seat)}"


@event("chow_claimed", table_events_pb2.ChowClaimed, families=FORMULA_ONLY)
def _chow_claimed(chow: table_events_pb2.ChowClaimed, story: Story) -> str:
    return (
        f"{story.name(chow.seat)} chows {chow.claimed_tile} from {story.name(chow.from_seat)}"
        f" (run from {chow.tile})"
    )


@event("flower_replaced", table_events_pb2.FlowerReplaced, families=FORMULA_ONLY, scored_by=FORMULA_ONLY)
def _flower_replaced(flower: table_events_pb2.FlowerReplaced, story: Story) -> str:
    return (
        f"{story.name(flower.seat)} sets aside flower {flower.flower} (a replacement from the tail follows)"
    )


@event("bird_revealed", table_events_pb2.BirdRevealed, families=FORMULA_ONLY, scored_by=FORMULA_ONLY)
def _bird_revealed(bird: table_events_pb2.BirdRevealed, story: Story) -> str:
    return f"bird {bird.tile} lands on {story.name(bird.seat)}"


@event(
    "kong_declared",
    table_events_pb2.KongDeclared,
    families=BOTH,
    redacted=True,
    opens_claim_window=True,
    scored_by=SICHUAN_ONLY,
)
def _kong_declared(kong: table_events_pb2.KongDeclared, story: Story) -> str:
    source = (
        f" from {story.name(kong.from_seat)}"
        if kong.from_seat >= 0 and kong.exposure == common_pb2.KONG_EXPOSURE_EXPOSED
        else ""
    )
    tile = kong.tile or "a hidden tile"
    return f"{story.name(kong.seat)} declares {EXPOSURE.get(kong.exposure, '?')} kong of {tile}{source}"


@event("kong_robbed", table_events_pb2.KongRobbed, families=BOTH, scored_by=SICHUAN_ONLY)
def _kong_robbed(robbed: table_events_pb2.KongRobbed, story: Story) -> str:
    winners = ", ".join(story.name(seat) for seat in robbed.winner_seats)
    return f"kong of {robbed.tile} by {story.name(robbed.kong_seat)} robbed by {winners}"


@event("player_won", table_events_pb2.PlayerWon, families=BOTH, scored_by=BOTH)
def _player_won(won: table_events_pb2.PlayerWon, story: Story) -> str:
    source = f" from {story.name(won.from_seat)}" if won.from_seat >= 0 else ""
    # Formula wins add fans (RULES.md 2.2): their total is fan_total, multiplier stays 0.
    formula = story.formula or (won.fan_total > 0 and won.multiplier == 0)
    total = f"{won.fan_total} fan" if formula else f"×{won.multiplier}"
    circumstances = (
        _flag(won.after_kong, "after a kong")
        + _flag(won.last_tile, "last tile")
        + _flag(won.first_turn, "first turn")
        + _flag(won.fourth_tile, "fourth tile")
    )
    held = f" + {melds(won.melds)}" if won.melds else ""
    return (
        f"{story.name(won.seat)} wins (#{won.win_order}) on {won.win_tile} "
        f"by {WIN_BY.get(won.win_by, '?')}{source}"
        f"{circumstances}: {fans_text(won.fans, formula) or 'no fans'} = {total}; "
        f"hand {tiles(won.concealed)}{held}"
    )


@event("player_left", table_events_pb2.PlayerLeft, families=BOTH, scored_by=BOTH, releases_seat=True)
def _player_left(left: table_events_pb2.PlayerLeft, story: Story) -> str:
    return f"{story.name(left.seat)} leaves ({left.reason or 'no reason'}){_flag(left.had_won, 'had won')}"


@event("turn_timed_out", table_events_pb2.TurnTimedOut, families=BOTH, redacted=True)
def _turn_timed_out(timed_out: table_events_pb2.TurnTimedOut, story: Story) -> str:
    return f"{story.name(timed_out.seat)} timed out ({timed_out.phase}); the server acts for them"


@event("wall_exhausted", table_events_pb2.WallExhausted, families=BOTH, scored_by=SICHUAN_ONLY)
def _wall_exhausted(_event: table_events_pb2.WallExhausted, _story: Story) -> str:
    return "wall exhausted"


@event("game_ended", table_events_pb2.GameEnded, families=BOTH, scored_by=BOTH, releases_seat=True)
def _game_ended(ended: table_events_pb2.GameEnded, story: Story) -> str:
    hands = "; ".join(
        f"{story.name(hand.seat)} {tiles(hand.concealed)}"
        + (f" + {melds(hand.melds)}" if hand.melds else "")
        + _flag(hand.won, "won")
        + _flag(hand.left, "left")
        for hand in ended.hands
    )
    return f"game ended ({ended.reason}): {hands}"


# --- settlement (mahjong.settlement.v1) and the ledger (mahjong.ledger.v1) ---------------------


@event("settlement_instructed", settlement_events_pb2.SettlementInstructed)
def _settlement_instructed(instructed: settlement_events_pb2.SettlementInstructed, story: Story) -> str:
    payees = ", ".join(
        f"{payee.account} {payee.beans} beans ({payee.points} points"
        + (f", {payee.reason}" if payee.reason and payee.reason != instructed.reason else "")
        + ")"
        for payee in instructed.payees
    )
    formula = story.formula or any(fan.count > 1 for fan in instructed.fans)
    fans = fans_text(instructed.fans, formula)
    if fans and formula:
        total = instructed.multiplier or fan_sum(instructed.fans)  # Formula: the fan total
        detail = f" [{fans} = {total} fan, N={instructed.coefficient}]"
    elif fans:
        detail = f" [{fans} = ×{instructed.multiplier}, N={instructed.coefficient}]"
    else:
        detail = ""
    beans = sum(payee.beans for payee in instructed.payees)
    if instructed.income_instruction_ids:  # RULES.md 1.9a.1: at most what the kong brought in
        count = len(instructed.income_instruction_ids)
        detail += f" (at most the kong income received from {count} instruction{'s' * (count > 1)})"
    return (
        f"paid, line {instructed.line} {instructed.reason}: {instructed.payer_account} pays {beans} beans → "
        f"{payees}{detail}"
    )


@event("game_settled", settlement_events_pb2.GameSettled)
def _game_settled(settled: settlement_events_pb2.GameSettled, _story: Story) -> str:
    lines = [f"settled: {settled.instruction_count} lines"]
    for player in sorted(settled.players, key=lambda player: player.seat):
        lines.append(
            f"  seat {player.seat} {player.account}: {player.beans:+d} beans "
            f"({player.points:+d} points, rake {player.rake_beans})"
        )
    return "\n".join(lines)


@event("transfer_posted", ledger_events_pb2.TransferPosted)
def _transfer_posted(posted: ledger_events_pb2.TransferPosted, _story: Story) -> str:
    legs = ", ".join(f"{posting.account} {posting.beans:+d}" for posting in posted.postings)
    short = "" if posted.posted_beans == posted.requested_beans else f" of {posted.requested_beans} asked"
    if posted.HasField("income_limit_beans"):  # RULES.md 1.9a.1
        short += f", kong income received {posted.income_limit_beans}"
    memo = f" ({posted.memo})" if posted.memo else ""
    return f"ledger moved {posted.posted_beans} beans{short} for {posted.reason}{memo}: {legs or '-'}"


DESCRIPTIONS: Final[Mapping[str, Describer]] = {name: kind.describe for name, kind in EVENTS.items()}
"""Payload field name of `Envelope` → its description in words."""


def describe_event(envelope: envelope_pb2.Envelope, story: Story) -> str:
    """The envelope's event in words (several lines for a `GameSettled`); learns into `story`."""
    kind = envelope.WhichOneof("payload")
    if kind is None:
        return f"empty event {envelope.event_id}"
    return DESCRIPTIONS[kind](getattr(envelope, kind), story)
