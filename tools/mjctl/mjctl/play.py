"""``mjctl play --room ROOM``: play one seat in a terminal against three bots, over the public API.

The person gets a token (minted with ``MAHJONG_JWT_SECRET`` for ``--player``, or ``--token``),
queues in the room through MatchmakingService next to three bots (``mjctl bots`` players in this
process; ``--bots 0`` waits for other people instead), and plays the table on their seat's
``WatchView`` feed, acting with ``Act``: it knows exactly what the seat may know. Both go through
`mjctl.client` (the feed resumed from the last event after a restart, a key retried with the same
idempotency key).

The screen shows the hand sorted by suit and numbered, the melds, flowers and discards of every
seat, the wildcard and its indicator (Formula), the wall, whose turn it is and the deadline, the
last events in words, the waits with their multipliers (``ScoringService.ListWaits``) as hints,
and the legal actions as keys::

    1..14     discard that tile of your hand        w   win
    p         pong                                  k   kong (k2: the second kong offered)
    c         chow (c2, c3: the other runs)         s   pass (let the tile go)
    x         exchange the suggested three tiles (or x 1 2 3: those tiles of your hand)
    m / p / s declare that suit missing (in the missing-suit phase)
    Enter     the suggested move (what a bot would do)   leave   leave the table (an escape)

At the end it shows every hand and the game's settlement (``GetGameSettlement``), line by line,
and exits 0. When no key comes before the room's turn timeout the server acts for the seat.
"""

from __future__ import annotations

import argparse
import queue
import select
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from mahjong_rules.seats import seat_wind as rules_seat_wind
from mahjong_rules.tiles import tile_code

from mjctl.bots import tiles_of

if TYPE_CHECKING:
    import grpc
    from mahjong.v1 import envelope_pb2, rooms_pb2, scoring_service_pb2, table_service_pb2
    from rich.console import Console
    from rich.text import Text

SUIT_ORDER: Final = "mpszf"
SUIT_NAMES: Final = {"m": "characters", "p": "dots", "s": "bamboo", "z": "honors", "f": "flowers"}
SUIT_STYLES: Final = {"m": "red", "p": "blue", "s": "green", "z": "yellow", "f": "magenta"}
EVENT_LINES: Final = 8
SETTLEMENT_WAIT_SECONDS: Final = 60.0
CALL_TIMEOUT_SECONDS: Final = 30.0
KEYS_HELP: Final = (
    "keys: 1..14 discard · w win · p pong · k kong · c chow · s pass · x exchange · "
    "m/p/s missing suit · Enter suggested · leave · ? help"
)


def register(subparsers: Any) -> None:
    """Add ``play`` to the ``mjctl`` command."""
    parser = subparsers.add_parser(
        "play",
        help="play one seat in the terminal against three bots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--room", default="sichuan-novice", help="room id (see ListRooms; default: sichuan-novice)"
    )
    parser.add_argument(
        "--player", help="your player id (default: a new one, you-XXXXXX); the token is minted for it"
    )
    parser.add_argument(
        "--token", metavar="JWT", help="your token instead of one minted with MAHJONG_JWT_SECRET"
    )
    parser.add_argument(
        "--bots",
        type=int,
        default=3,
        choices=range(4),
        help="bots to play with (default 3; 0: wait for people)",
    )
    parser.set_defaults(handler=run)


# ------------------------------------------------------------------------------------ the hand


def tile_order(tile: str) -> tuple[int, str]:
    """Sort key: by suit (characters, dots, bamboo, honors, flowers), then rank."""
    return (SUIT_ORDER.index(tile[1]) if tile[1] in SUIT_ORDER else len(SUIT_ORDER), tile[0])


def sorted_hand(hand: str) -> list[str]:
    """The hand's tiles sorted by suit, then rank: what the keys 1..14 number."""
    return sorted(tiles_of(hand), key=tile_order)


def seat_wind(seat: int, dealer_seat: int) -> str:
    """The seat's wind as a tile code: the dealer is East ("1z"), then turn order (RULES.md 2.2)."""
    return tile_code(rules_seat_wind(seat, dealer_seat))


# ------------------------------------------------------------------------------------ the keys


class KeyError_(ValueError):
    """A key that means nothing now; the text says why and what would."""


def _request(view: table_service_pb2.TableView) -> table_service_pb2.ActRequest:
    from mahjong.v1 import table_service_pb2

    return table_service_pb2.ActRequest(table_id=view.table_id, idempotency_key=str(uuid.uuid4()))


def _option(key: str, options: Sequence[str], what: str) -> str:
    """`k` → the first option, `k2` → the second."""
    number = key[1:].strip() or "1"
    if not number.isdigit() or not 1 <= int(number) <= len(options):
        raise KeyError_(f"{what}: choose {key[0]}1..{key[0]}{len(options)}")
    return options[int(number) - 1]


def command_for_key(line: str, view: table_service_pb2.TableView) -> table_service_pb2.ActRequest:
    """The command a key line means for this view; KeyError_ when it means nothing now. It asks the
    table to refuse it if the table moved on from this view, but for the simultaneous picks
    (exchange, missing suit), which another seat's pick does not change (`bots.with_expected_sequence`)."""
    from mjctl.bots import choose_command, choose_exchange, with_expected_sequence

    key = line.strip().lower()
    actions = {action.kind: action for action in view.legal_actions}
    if not actions:
        raise KeyError_("nothing to do now: wait for your turn")
    request = _request(view)
    if key == "":
        suggested = choose_command(view)
        if suggested is None:
            raise KeyError_("nothing to suggest now")
        with_expected_sequence(suggested, view)
        return suggested
    if "declare_missing_suit" in actions and key in ("m", "p", "s"):
        if key not in actions["declare_missing_suit"].suits:
            raise KeyError_(f"choose one of {', '.join(actions['declare_missing_suit'].suits)}")
        request.declare_missing_suit.suit = key
    elif key.isdigit():
        hand = sorted_hand(view.hand)
        if "discard" not in actions:
            raise KeyError_("you cannot discard now")
        if not 1 <= int(key) <= len(hand):
            raise KeyError_(f"choose a tile 1..{len(hand)}")
        tile = hand[int(key) - 1]
        if tile not in actions["discard"].tiles:
            raise KeyError_(
                f"{tile} may not be discarded now (allowed: {' '.join(actions['discard'].tiles)})"
            )
        request.discard.tile = tile
    elif key == "w" and "win" in actions:
        request.win.SetInParent()
    elif key == "p" and "pong" in actions:
        request.pong.SetInParent()
    elif key.startswith("k") and "kong" in actions:
        tiles = list(actions["kong"].tiles)
        request.kong.tile = _option(key, tiles, "kong") if tiles and view.phase == "turn" else ""
    elif key.startswith("c") and "chow" in actions:
        request.chow.tile = _option(key, list(actions["chow"].tiles), "chow")
    elif key == "s" and "pass" in actions:
        getattr(request, "pass").SetInParent()
    elif key.startswith("x") and "exchange_three" in actions:
        request.exchange_three.tiles = _exchange_tiles(key[1:].split(), view) or choose_exchange(view.hand)
    elif key == "leave" and "leave" in actions:
        request.leave.SetInParent()
    else:
        raise KeyError_(f"{line.strip()!r} is not a key for now; {legal_keys(view)}")
    with_expected_sequence(request, view)
    return request


def _exchange_tiles(numbers: list[str], view: table_service_pb2.TableView) -> str:
    if not numbers:
        return ""
    hand = sorted_hand(view.hand)
    if len(numbers) != 3 or not all(n.isdigit() and 1 <= int(n) <= len(hand) for n in numbers):
        raise KeyError_(f"exchange: x and three tile numbers 1..{len(hand)}, e.g. x 1 2 3")
    if len(set(numbers)) != 3:
        raise KeyError_("exchange: three different tiles")
    return "".join(hand[int(n) - 1] for n in numbers)


def legal_keys(view: table_service_pb2.TableView) -> str:
    """The keys that mean something now, in words."""
    hand = sorted_hand(view.hand)
    parts: list[str] = []
    for action in view.legal_actions:
        if action.kind == "discard":
            numbers = [str(index) for index, tile in enumerate(hand, start=1) if tile in action.tiles]
            parts.append(f"[{_ranges(numbers)}] discard")
        elif action.kind == "win":
            parts.append("[w] win")
        elif action.kind == "pong":
            parts.append(f"[p] pong {view.claimable_tile}")
        elif action.kind == "kong":
            tiles = list(action.tiles) or [view.claimable_tile]
            parts.append(" ".join(f"[k{index}] kong {tile}" for index, tile in enumerate(tiles, start=1)))
        elif action.kind == "chow":
            parts.append(
                " ".join(f"[c{index}] chow from {tile}" for index, tile in enumerate(action.tiles, start=1))
            )
        elif action.kind == "pass":
            parts.append("[s] pass")
        elif action.kind == "exchange_three":
            parts.append("[x] exchange the suggested three (or x 1 2 3)")
        elif action.kind == "declare_missing_suit":
            parts.append(" ".join(f"[{suit}] {SUIT_NAMES[suit]} missing" for suit in action.suits))
    if parts:
        parts.append("[Enter] suggested · [leave]")
    return "  ".join(parts) if parts else "wait…"


def _ranges(numbers: list[str]) -> str:
    """ "1 2 3 5" → "1-3 5"."""
    runs: list[list[int]] = []
    for value in map(int, numbers):
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return " ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


# ------------------------------------------------------------------------------------ the screen


@dataclass
class Game:
    """What the client knows: the room, the latest view, the events so far in words, hints."""

    room: rooms_pb2.Room | None = None
    view: table_service_pb2.TableView | None = None
    events: list[str] = field(default_factory=list)
    waits_hint: str = ""
    message: str = ""
    player_id: str = ""

    def learn(self, envelopes: Sequence[envelope_pb2.Envelope], describe: Callable[[Any], str]) -> None:
        for envelope in envelopes:
            if envelope.WhichOneof("payload") in ("table_opened", "hands_dealt"):
                continue
            self.events.append(describe(envelope))


def screen_lines(game: Game) -> list[str]:
    """The whole screen, top to bottom, as plain lines (colour comes later)."""
    view = game.view
    room = game.room
    if view is None:
        return [f"Happy Mahjong · room {room.room_id if room else '?'} · waiting for a table…", game.message]
    lines = [
        f"Happy Mahjong · room {view.room_id} · table {view.table_id[:8]} · you are seat {view.your_seat}"
        + (" (dealer)" if view.dealer_seat == view.your_seat else ""),
        _status_line(view),
        "",
    ]
    for seat in view.seats:
        lines.extend(_seat_lines(view, seat))
    lines.append("")
    hand = sorted_hand(view.hand)
    lines.append("Your hand: " + "  ".join(f"{index}:{tile}" for index, tile in enumerate(hand, start=1)))
    lines.append("           " + _by_suit(hand) + (f"   drawn {view.drawn_tile}" if view.drawn_tile else ""))
    if game.waits_hint:
        lines.append(f"Waits: {game.waits_hint}")
    if view.phase == "claim" and view.claimable_tile:
        lines.append(f"On the table: {view.claimable_tile} from seat {view.claim_from_seat}")
    lines.append("")
    lines.append("Last events:")
    lines.extend("  " + event for event in game.events[-EVENT_LINES:])
    lines.append("")
    if view.phase == "ended":
        lines.append(f"Game over: {view.end_reason}")
    else:
        lines.append("Keys: " + legal_keys(view))
    if game.message:
        lines.append(game.message)
    return lines


def _status_line(view: table_service_pb2.TableView) -> str:
    parts = [f"wall {view.wall_remaining} left", f"phase {view.phase}"]
    if view.phase == "turn":
        parts.append("your turn" if view.turn_seat == view.your_seat else f"seat {view.turn_seat}'s turn")
    if view.wildcard:
        parts.append(f"wildcard {view.wildcard} (indicator {view.wildcard_indicator})")
    if view.exchange_direction:
        parts.append(f"exchange {view.exchange_direction}")
    if view.bird_tile:
        parts.append(f"bird {view.bird_tile} on seat {view.bird_seat}")
    if view.HasField("deadline") and view.legal_actions:
        seconds = max(0.0, view.deadline.ToNanoseconds() / 1e9 - time.time())
        parts.append(f"{seconds:.0f} s to act")
    return " · ".join(parts)


def _seat_lines(view: table_service_pb2.TableView, seat: Any) -> list[str]:
    from mahjong_platform.events import melds

    marks = "".join(
        [
            " dealer" if seat.seat == view.dealer_seat else "",
            " ◀ turn" if view.phase == "turn" and seat.seat == view.turn_seat else "",
            " WON" if seat.won else "",
            " LEFT" if seat.left else "",
        ]
    )
    who = "you" if seat.seat == view.your_seat else seat.player_id
    header = f"seat {seat.seat} {who}{marks}: {seat.concealed_count} tiles"
    if seat.missing_suit:
        header += f", missing {SUIT_NAMES.get(seat.missing_suit, seat.missing_suit)}"
    if seat.melds:
        header += f", melds {melds(seat.melds)}"
    if seat.flowers:
        header += f", flowers {' '.join(tiles_of(seat.flowers))}"
    return [header, "    discards: " + (" ".join(seat.discards) or "-")]


def _by_suit(hand: list[str]) -> str:
    groups = []
    for suit in SUIT_ORDER:
        ranks = "".join(tile[0] for tile in hand if tile[1] == suit)
        if ranks:
            groups.append(f"{ranks}{suit}")
    return " ".join(groups)


def styled(line: str) -> Text:
    """A screen line with each tile code coloured by suit."""
    from rich.text import Text

    text = Text(line)
    for suit, style in SUIT_STYLES.items():
        text.highlight_regex(rf"\b[1-9]{suit}\b", style)
    text.highlight_regex(r"\[[^\]]+\]", "bold")
    return text


def draw(console: Console, game: Game, prompt: bool = True) -> None:
    """Clear the terminal and show the screen, with the key prompt at the bottom."""
    console.clear()
    for line in screen_lines(game):
        console.print(styled(line), soft_wrap=True)
    if prompt:
        console.print("> ", end="")
    console.file.flush()


# ------------------------------------------------------------------------------------ the game


def run(arguments: argparse.Namespace) -> int:
    """The ``play`` subcommand."""
    import grpc
    from mahjong.v1 import matchmaking_service_pb2, matchmaking_service_pb2_grpc
    from mahjong_platform.auth import mint_token
    from mahjong_platform.config import load_settings
    from mahjong_platform.grpc_client import open_channel
    from rich.console import Console

    settings = load_settings()
    console = Console(highlight=False)
    player_id = arguments.player or f"you-{uuid.uuid4().hex[:6]}"
    # A development token; a member, so the members-only Formula rooms let the player in too.
    token = arguments.token or mint_token(settings.jwt_secret, player_id, ttl_seconds=24 * 3600, member=True)
    matchmaking = open_channel(settings.grpc_target("matchmaking"), token)
    table = open_channel(settings.grpc_target("table"), token)
    scoring = open_channel(settings.grpc_target("scoring"), token)
    try:
        rooms = matchmaking_service_pb2_grpc.MatchmakingServiceStub(matchmaking).ListRooms(
            matchmaking_service_pb2.ListRoomsRequest(), timeout=CALL_TIMEOUT_SECONDS
        )
        room = next((room for room in rooms.rooms if room.room_id == arguments.room), None)
        if room is None:
            names = ", ".join(room.room_id for room in rooms.rooms)
            print(f"mjctl play: no room {arguments.room!r}; rooms: {names}", file=sys.stderr)
            return 1
        game = Game(room=room, player_id=player_id)
        bots = _start_bots(arguments, settings)
        draw(console, game)
        return _play(console, game, matchmaking, table, scoring, bots)
    except grpc.RpcError as error:
        print(f"mjctl play: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    finally:
        for channel in (matchmaking, table, scoring):
            channel.close()


def _start_bots(arguments: argparse.Namespace, settings: Any) -> threading.Thread | None:
    """`--bots` bot players queueing in the same room, in a thread of this process."""
    if arguments.bots == 0:
        return None
    from mahjong_platform.auth import mint_token
    from mahjong_platform.grpc_client import open_channel

    from mjctl.bots import run_bots

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        token = mint_token(settings.jwt_secret, player_id, ttl_seconds=24 * 3600, member=True)
        return open_channel(settings.grpc_target(service), token)

    def play() -> None:
        run_bots(arguments.room, arguments.bots, 1, channel_for, log=lambda _line: None, rounds=1)

    thread = threading.Thread(target=play, name="bots", daemon=True)
    thread.start()
    return thread


def _play(
    console: Console,
    game: Game,
    matchmaking: grpc.Channel,
    table: grpc.Channel,
    scoring: grpc.Channel,
    bots: threading.Thread | None,
) -> int:
    from mahjong.v1 import table_service_pb2_grpc
    from mahjong_platform.events import Story, describe_event

    from mjctl.bots import BotPlayer

    assert game.room is not None
    person = BotPlayer(game.player_id, matchmaking, table, log=lambda _line: None)
    game.message = "queued; waiting for three more players…"
    draw(console, game)
    table_id, _seat = person.find_table(game.room.room_id)
    person.wait_until_open(table_id)
    stub = table_service_pb2_grpc.TableServiceStub(table)
    updates: queue.Queue[table_service_pb2.TableUpdate | BaseException | None] = queue.Queue()
    threading.Thread(target=_follow, args=(stub, table_id, updates), name="feed", daemon=True).start()
    story = Story()
    hints = _WaitHints(scoring, game.room)
    input_open = True
    game.message = ""
    while True:
        changed = False
        while not updates.empty():
            update = updates.get()
            if update is None and game.view is not None and game.view.phase == "ended":
                break  # the feed's normal end, after the final view
            if update is None or isinstance(update, BaseException):
                raise RuntimeError(f"the table's feed ended: {update!r}")
            if not story.players:
                story.players = {seat.seat: seat.player_id for seat in update.view.seats}
                story.variant = game.room.rules.variant
            game.learn(update.events, lambda envelope: describe_event(envelope, story))
            game.view = update.view
            game.waits_hint = hints.for_view(update.view)
            game.message = ""  # said about an older view
            changed = True
        view = game.view
        if view is not None and view.phase == "ended":
            break
        if changed:
            draw(console, game)
        if not input_open:
            time.sleep(0.1)
            continue
        readable, _, _ = select.select([sys.stdin], [], [], 0.1)
        if not readable:
            continue
        line = sys.stdin.readline()
        if line == "":
            input_open = False  # no more keys: the server acts for the seat at each deadline
            continue
        game.message = _act(stub, line, view)
        draw(console, game)
    draw(console, game, prompt=False)
    for line in settlement_lines(scoring, table_id, story):
        console.print(styled(line), soft_wrap=True)
    if bots is not None:
        bots.join(timeout=CALL_TIMEOUT_SECONDS)
    return 0


def _act(stub: Any, line: str, view: table_service_pb2.TableView | None) -> str:
    """Send the key's command; the message to show (empty when it was taken)."""
    import grpc

    from mjctl.client import Backoff, call

    if line.strip() == "?":
        return __doc__.split("::", 1)[1].split("At the end", 1)[0].rstrip() if __doc__ else KEYS_HELP
    if view is None:
        return "no table yet"
    try:
        request = command_for_key(line, view)
    except KeyError_ as error:
        return str(error)
    try:
        # Retried with the same request (same idempotency key) while the table service restarts.
        call(stub.Act, request, Backoff(give_up_after_seconds=CALL_TIMEOUT_SECONDS), what="Act")
    except grpc.RpcError as error:
        if error.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED):
            return f"not taken: {error.details()}"
        raise
    return ""


def _follow(stub: Any, table_id: str, updates: queue.Queue[Any]) -> None:
    """The seat's WatchView feed into `updates`, resumed from the last event seen after a broken
    stream or a service restart (`mjctl.client.watch_view`); None after the last update."""
    from mjctl.client import Backoff, watch_view

    try:
        for update in watch_view(stub, table_id, Backoff()):
            updates.put(update)
    except BaseException as error:  # shown by the main loop
        updates.put(error)
        return
    updates.put(None)


class _WaitHints:
    """The seat's waits with their multipliers (Sichuan) or fans (Formula), from ListWaits, once
    per hand."""

    def __init__(self, scoring: grpc.Channel, room: rooms_pb2.Room) -> None:
        from mahjong.v1 import scoring_service_pb2_grpc

        self._stub = scoring_service_pb2_grpc.ScoringServiceStub(scoring)
        self._room = room
        self._cache: dict[tuple[str, ...], str] = {}

    def for_view(self, view: table_service_pb2.TableView) -> str:
        if not view.waits:
            return ""
        me = view.seats[view.your_seat]
        key = (view.hand, view.waits, str(list(me.melds)), me.flowers, view.wildcard)
        if key not in self._cache:
            self._cache[key] = self._ask(view, me)
        return self._cache[key]

    def _ask(self, view: table_service_pb2.TableView, me: Any) -> str:
        import grpc
        from mahjong.v1 import common_pb2, scoring_service_pb2

        request = scoring_service_pb2.ListWaitsRequest(
            variant=self._room.rules.variant, concealed=view.hand, melds=list(me.melds)
        )
        if self._room.rules.variant == common_pb2.VARIANT_FORMULA:
            request.wildcard = view.wildcard
            request.flowers = len(tiles_of(me.flowers))
            request.seat_wind = seat_wind(view.your_seat, view.dealer_seat)
            request.round_wind = "1z"
            request.min_fan = self._room.rules.min_fan
        else:
            request.missing_suit = me.missing_suit
        try:
            answer = self._stub.ListWaits(request, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError:
            return " ".join(tiles_of(view.waits))
        return waits_text(answer, formula=self._room.rules.variant == common_pb2.VARIANT_FORMULA) or " ".join(
            tiles_of(view.waits)
        )


def waits_text(answer: scoring_service_pb2.ListWaitsResponse, formula: bool) -> str:
    """ "3p ×2 · 6p ×4" (Sichuan) or "3p 9 fan · 6p 12 fan" (Formula)."""
    if formula:
        return " · ".join(f"{wait.tile} {wait.fan} fan" for wait in answer.waits if wait.meets_min)
    return " · ".join(f"{wait.tile} ×{wait.multiplier}" for wait in answer.waits)


def settlement_lines(scoring: grpc.Channel, table_id: str, story: Any) -> Iterator[str]:
    """The game's settlement in words, once scoring has settled it (waits up to a minute)."""
    import grpc
    from mahjong.v1 import envelope_pb2, scoring_service_pb2, scoring_service_pb2_grpc, settlement_events_pb2
    from mahjong_platform.events import describe_event

    stub = scoring_service_pb2_grpc.ScoringServiceStub(scoring)
    request = scoring_service_pb2.GetGameSettlementRequest(table_id=table_id)
    deadline = time.monotonic() + SETTLEMENT_WAIT_SECONDS
    yield ""
    yield "Settlement:"
    while True:
        try:
            answer = stub.GetGameSettlement(request, timeout=CALL_TIMEOUT_SECONDS)
            if answer.settled:
                break
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                yield f"  (not available: {error.details()})"
                return
        if time.monotonic() > deadline:
            yield "  (scoring has not settled the game yet; see mjctl replay later)"
            return
        time.sleep(0.3)
    for line in answer.lines:
        yield "  " + describe_event(envelope_pb2.Envelope(settlement_instructed=line), story)
    settled = settlement_events_pb2.GameSettled(
        table_id=table_id, players=answer.totals, instruction_count=len(answer.lines)
    )
    for line in describe_event(envelope_pb2.Envelope(game_settled=settled), story).splitlines():
        yield "  " + line
