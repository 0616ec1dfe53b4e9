"""Bot players that find tables and play them through the public gRPC API only (``mjctl bots``, whose
command line is `mjctl.bots_command`; `mjctl.load` spreads a run over processes).

Each bot holds its own token, enqueues through MatchmakingService, follows its ticket, then plays
its table with TableService: it follows its seat's WatchView feed (the new events and its view
after each change) and acts on the legal actions of each view (Act). No back door: a bot knows
only what its seat sees.

Policy (issues 4 and 6): exchange the weakest suit, declare the shortest suit missing (and so
discard it first), keep pairs and runs, always win when it can, else kong/pong, else chow (formula
rooms: the lowest run offered), else discard. Flowers never reach a bot's hand (the server sets
them aside), so formula views need nothing more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import itertools
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Final

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp
from mahjong.v1 import (
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    matchmaking_service_pb2_grpc,
    table_service_pb2_grpc,
)
from mahjong.v1 import matchmaking_service_pb2 as matchmaking_messages
from mahjong.v1 import table_service_pb2 as table_messages
from mahjong_platform.grpc_client import bearer_metadata

from mjctl import client
from mjctl.bot_options import PLAY_HOLD_IDLE_UPDATES_MS as PLAY_HOLD_IDLE_UPDATES_MS

GAME_MAX_SECONDS = 600.0
PLAY_WAIT_FOR_TABLE_MS = 10_000
"""How long the table service waits for a table matchmaking just formed to open before a bot's
Play stream is NOT_FOUND (then asked again, `client.PlaySession`): one call, not one per pause."""
PLAY_ANSWERS_WITH_UPDATES = False
"""The bots do not ask for `PlayOptions.answers_with_updates`: a discard's answer would then come
only with the update after a claim window the discarder is not asked in (the rule that keeps
that window hidden), so the Act latency the benchmark reports would include the other seats'
thinking; and riding saved no CPU measurable in `bench-system` (one message in five fewer, about
2-5 ms of the table process per game)."""
CALL_TIMEOUT_SECONDS = 30.0
TABLE_OPEN_MAX_SECONDS = 120.0  # a table opens in well under a second; longer only while a consumer recovers


# ------------------------------------------------------------------------------------ policy


def tiles_of(hand: str) -> list[str]:
    """Compact notation to tile codes: "123m55p" → ["1m", "2m", "3m", "5p", "5p"]."""
    tiles: list[str] = []
    ranks: list[str] = []
    for character in hand:
        if character.isdigit():
            ranks.append(character)
        else:
            tiles.extend(rank + character for rank in ranks)
            ranks = []
    return tiles


def choose_exchange(hand: str) -> str:
    """Three tiles of the weakest suit holding at least three: fewest tiles, lowest ranks first."""
    tiles = tiles_of(hand)
    by_suit = {suit: sorted(t for t in tiles if t[1] == suit) for suit in "mps"}
    candidates = [suit for suit in "mps" if len(by_suit[suit]) >= 3]
    suit = min(candidates, key=lambda s: (len(by_suit[s]), s))
    return "".join(tile[0] for tile in by_suit[suit][:3]) + suit


def choose_missing_suit(hand: str) -> str:
    """The suit with the fewest tiles."""
    counts = Counter(tile[1] for tile in tiles_of(hand))
    return min("mps", key=lambda suit: (counts.get(suit, 0), suit))


def choose_discard(hand: str, allowed: list[str]) -> str:
    """The allowed tile that helps least: no pair, fewest neighbours (keeps pairs and runs)."""
    counts = _rank_counts(hand)
    best: tuple[int, int, str] | None = None
    for tile in allowed:
        rank = int(tile[0])
        row = counts.get(tile[1], _NO_RANKS)
        # Rank r at index r + 2: the neighbours r-2..r+2 of ranks 1..9 are in range, 0 outside 1..9.
        neighbours = row[rank] + row[rank + 1] + row[rank + 3] + row[rank + 4]
        usefulness = (min(row[rank + 2], 3) * 4 + neighbours, 0 if rank in (1, 9) else 1, tile)
        if best is None or usefulness < best:
            best = usefulness
    if best is None:
        raise ValueError("choose_discard: no tile allowed")
    return best[2]


_NO_RANKS: Final = (0,) * 14


def _rank_counts(hand: str) -> dict[str, list[int]]:
    """Compact notation to each suit's copies per rank (rank r at index r + 2, `choose_discard`)."""
    counts: dict[str, list[int]] = {}
    ranks: list[int] = []
    for character in hand:
        if character.isdigit():
            ranks.append(int(character))
        else:
            row = counts.get(character)
            if row is None:
                row = counts[character] = [0] * 14
            for rank in ranks:
                row[rank + 2] += 1
            ranks = []
    return counts


def choose_command(
    view: table_messages.TableView, idempotency_key: str | None = None
) -> table_messages.ActRequest | None:
    """The bot's command for its current view, or None when it is not asked to act; its key is
    `idempotency_key` (a new UUID when None)."""
    if not view.legal_actions:
        return None
    actions = {action.kind: action for action in view.legal_actions}
    request = table_messages.ActRequest(
        table_id=view.table_id, idempotency_key=idempotency_key or str(uuid.uuid4())
    )
    if "win" in actions:
        request.win.SetInParent()
    elif "exchange_three" in actions:
        request.exchange_three.tiles = choose_exchange(view.hand)
    elif "declare_missing_suit" in actions:
        request.declare_missing_suit.suit = choose_missing_suit(view.hand)
    elif "kong" in actions:
        request.kong.tile = actions["kong"].tiles[0] if view.phase == "turn" else ""
    elif "pong" in actions:
        request.pong.SetInParent()
    elif "chow" in actions:
        request.chow.tile = actions["chow"].tiles[0]
    elif "discard" in actions:
        request.discard.tile = choose_discard(view.hand, list(actions["discard"].tiles))
    elif "pass" in actions:
        request.__getattribute__("pass").SetInParent()
    else:
        return None
    return request


SIMULTANEOUS_COMMANDS: Final = frozenset({"exchange_three", "declare_missing_suit"})
"""The picks all four seats make at once (RULES.md 1.2, 1.3): another seat's pick changes nothing
of this one's, so they go without the optimistic `expected_sequence` check. With it, every pick
but the first of a round was refused (the others' picks had moved the table on) and decided
again: six refused picks per game for each of the two phases, a fifth of a game's commands."""


def with_expected_sequence(request: table_messages.ActRequest, view: table_messages.TableView) -> None:
    """Ask the table to refuse `request` (ABORTED) if the table moved on from `view`, the view it
    was decided on; not for the simultaneous picks."""
    if request.WhichOneof("command") not in SIMULTANEOUS_COMMANDS:
        request.expected_sequence = view.sequence


# ------------------------------------------------------------------------------------ player


class BelowEntryFloorError(RuntimeError):
    """Matchmaking refused the bot: its balance is below the room's entry floor (RULES.md 1.9)."""


class BotStoppedError(RuntimeError):
    """The run was stopped (another bot cannot play) before this bot was seated."""


class BotPlayer:
    """One bot: its own channels (carrying its own token), its Act latencies, its finished games.

    Every call goes through `mjctl.client`: retried with backoff while a service restarts (the same
    request, so the same idempotency key), the feeds resumed from the last event seen, one decision
    per view sequence, so a bot never plays a decision twice."""

    def __init__(
        self,
        player_id: str,
        matchmaking: grpc.Channel,
        table: grpc.Channel,
        log: Callable[[str], None],
        think_seconds: float = 0.0,
    ) -> None:
        self.player_id = player_id
        self.think_seconds = think_seconds
        # Event occurred (table engine's clock, just before its commit) -> this bot read it.
        self.delivery_latencies_seconds: list[float] = []
        self._matchmaking = matchmaking_service_pb2_grpc.MatchmakingServiceStub(matchmaking)
        self._table = table_service_pb2_grpc.TableServiceStub(table)
        self.act_latencies_seconds: list[float] = []
        self.retries = 0
        self._log = log
        self._backoff = client.Backoff(on_retry=self._count_retry)
        self._ticket_id: str | None = None
        self._stopped = threading.Event()
        self.enqueue_refusals = 0
        # When the last table's GameEnded event occurred (the table engine's clock), for lag figures.
        self.game_ended_at: datetime.datetime | None = None

    def _count_retry(self, _line: str) -> None:
        self.retries += 1

    def find_table(self, room_id: str) -> tuple[str, int]:
        request = matchmaking_messages.EnqueueRequest(room_id=room_id, idempotency_key=str(uuid.uuid4()))
        freeing: client.Backoff | None = None
        while True:
            if self._stopped.is_set():
                raise BotStoppedError(f"{self.player_id}: stopped before being seated")
            try:
                ticket = client.call(self._matchmaking.Enqueue, request, self._backoff, CALL_TIMEOUT_SECONDS)
                break
            except grpc.RpcError as error:
                freeing = _seat_not_freed_yet(self, error, freeing)
                freeing.sleep(_pause_while_seat_not_freed(freeing, error))
        self._ticket_id = ticket.ticket_id
        try:
            if self._stopped.is_set():
                self.cancel_ticket()
            for update in client.watch_ticket(
                self._matchmaking, ticket.ticket_id, self._backoff, GAME_MAX_SECONDS
            ):
                if update.state == "seated":
                    return update.table_id, update.seat
                if update.state == "cancelled":
                    if self._stopped.is_set():
                        raise BotStoppedError(f"{self.player_id}: stopped before being seated")
                    raise RuntimeError(f"{self.player_id}: ticket {ticket.ticket_id} was cancelled")
        finally:
            self._ticket_id = None
        raise RuntimeError(f"{self.player_id}: ticket stream ended before a seat was assigned")

    def stop(self) -> None:
        """Stop looking for tables: cancel the ticket this bot waits on, enqueue no more."""
        self._stopped.set()
        self.cancel_ticket()

    def cancel_ticket(self) -> None:
        ticket_id = self._ticket_id
        if ticket_id is None:
            return
        request = matchmaking_messages.CancelRequest(ticket_id=ticket_id, idempotency_key=str(uuid.uuid4()))
        try:
            client.call(self._matchmaking.Cancel, request, client.Backoff(give_up_after_seconds=30))
        except grpc.RpcError as error:  # seated meanwhile: the bot plays that game out
            self._log(f"{self.player_id}: could not cancel ticket {ticket_id[:8]}: {error.details()}")

    def wait_until_open(self, table_id: str) -> None:
        """The seat is assigned by matchmaking before the table engine has read the assignment
        from Kafka and opened the table: until then the table is NOT_FOUND (``client.wait_for_table``)."""
        client.wait_for_table(
            self._table, table_id, self._backoff, TABLE_OPEN_MAX_SECONDS, CALL_TIMEOUT_SECONDS
        )

    def play(self, table_id: str) -> table_messages.TableView:
        """Play the table to its end on its WatchView feed (resumed after any reconnect); return
        the final view."""
        self.wait_until_open(table_id)
        decisions = client.Decisions()
        for update in client.watch_view(
            self._table, table_id, self._backoff, timeout_seconds=GAME_MAX_SECONDS
        ):
            received = time.time()
            for envelope in update.events:
                self.delivery_latencies_seconds.append(received - envelope.occurred_at.ToNanoseconds() / 1e9)
                if envelope.WhichOneof("payload") == "game_ended":
                    self.game_ended_at = envelope.occurred_at.ToDatetime(datetime.UTC)
            view: table_messages.TableView = update.view
            if view.phase == "ended":
                return view
            # The view seen again after a reconnect gets the same request (the same key).
            request = decisions.for_view(view.sequence, functools.partial(choose_command, view))
            if request is not None:
                if self.think_seconds:
                    time.sleep(self.think_seconds)  # a human-paced player (--think-ms)
                # A view already overtaken by a queued update is refused (ABORTED) and skipped.
                with_expected_sequence(request, view)
                self._act(request)
        raise RuntimeError(f"{self.player_id}: the feed of table {table_id} ended before the game")

    def _act(self, request: table_messages.ActRequest) -> None:
        before = time.perf_counter()
        try:
            client.call(self._table.Act, request, self._backoff, CALL_TIMEOUT_SECONDS, "Act")
        except grpc.RpcError as error:
            # The table moved on (a timeout acted for us, another claim won): look again.
            if error.code() not in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED):
                raise
        finally:
            self.act_latencies_seconds.append(time.perf_counter() - before)


def _seat_not_freed_yet(
    bot: BotPlayer | AsyncBotPlayer, error: grpc.RpcError, freeing: client.Backoff | None
) -> client.Backoff:
    """After a refused Enqueue: the pauses to wait while matchmaking has not freed the bot's seat
    of its last game (it does when it reads GameEnded from Kafka, a moment after the game ended
    for the bot); any other refusal is raised (below the room's entry floor as
    `BelowEntryFloorError`)."""
    details = error.details() or ""
    if "entry floor" in details:
        raise BelowEntryFloorError(f"{bot.player_id}: {details}") from None
    if "already seated" not in details:
        raise error
    bot.enqueue_refusals += 1
    return freeing or client.catching_up(bot._backoff, TABLE_OPEN_MAX_SECONDS)


def _pause_while_seat_not_freed(freeing: client.Backoff, error: grpc.RpcError) -> float:
    """The next pause (doubling, `client.catching_up`); the error again once the wait is spent."""
    return freeing.pause_for(error, "seat not freed yet", frozenset({error.code()}))


def _asks(view: table_messages.TableView) -> bool:
    """Whether `view` asks its seat to decide: a legal action other than leaving (always legal)."""
    return any(action.kind != "leave" for action in view.legal_actions)


def _epoch_seconds(timestamp: Timestamp) -> float:
    """A Timestamp as epoch seconds (its fields read directly: `Timestamp.ToNanoseconds` is Python
    code that checks the value first, twice as slow, for every event a bot reads)."""
    return timestamp.seconds + timestamp.nanos * 1e-9


def describe_game(view: table_messages.TableView) -> str:
    """One line for a finished game: who won (seat order) and how the game ended."""
    winners = [f"seat {seat.seat} ({seat.player_id})" for seat in view.seats if seat.won]
    left = [f"seat {seat.seat}" for seat in view.seats if seat.left]
    parts = [
        f"table {view.table_id[:8]} ended ({view.end_reason})",
        "winners: " + (", ".join(winners) or "none"),
    ]
    if left:
        parts.append("escaped: " + ", ".join(left))
    return "; ".join(parts)


# ------------------------------------------------------------------------------------ command


@dataclasses.dataclass(frozen=True)
class ActSample:
    """One answered command of a ``Play`` stream: its kind (the ``ActRequest`` command, with
    " refused" when the answer refused it), the seconds from sending it to its answer arriving at
    the bot's loop, and to the bot having read that answer (the same but for the bot's own work:
    a thinking bot goes on reading its stream, `AsyncBotPlayer.play`)."""

    kind: str
    arrived_seconds: float
    read_seconds: float


@dataclasses.dataclass
class BotRunReport:
    games: list[str]
    table_ids: list[str]
    seconds: float
    act_latencies_seconds: list[float]
    delivery_latencies_seconds: list[float] = dataclasses.field(default_factory=list)
    retries: int = 0
    act_samples: list[ActSample] = dataclasses.field(default_factory=list)
    enqueue_refusals: int = 0
    """Enqueues refused because matchmaking had not freed the bot's seat of its last game yet."""
    play_opens: int = 0
    """Play streams opened (`client.PlaySession.opens`), reopened ones and NOT_FOUND ones included."""
    play_responses: int = 0
    """Play responses received (`client.PlaySession.received`): the messages the table sent."""
    play_riding_answers: int = 0
    """Answers that came riding on updates (`client.PlaySession.riding`), no message of their own."""
    decision_delivery_latencies_seconds: list[float] = dataclasses.field(default_factory=list)
    """For each update whose view gave the bot a decision (more than leaving): the delivery latency
    of its last event (the one that asked the bot; earlier ones may have been held)."""

    def summary_lines(self) -> list[str]:
        latencies = sorted(self.act_latencies_seconds) or [0.0]
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        return [
            f"{len(self.games)} games in {self.seconds:.1f} s = {len(self.games) / self.seconds:.2f} games/s",
            f"Act latency over {len(self.act_latencies_seconds)} calls: p50 {p50:.1f} ms, p99 {p99:.1f} ms",
            f"calls retried after a failure to get through (service restarting): {self.retries}",
        ]


def run_bots(
    room_id: str,
    players: int,
    games: int,
    channel_for: Callable[[str, str], grpc.Channel],
    log: Callable[[str], None] = print,
    player_prefix: str = "bot",
    on_game_ended: Callable[[str, datetime.datetime], None] | None = None,
    think_seconds: float = 0.0,
    rounds: int | None = None,
    fund: Callable[[str, str], None] | None = None,
) -> BotRunReport:
    """Run `players` bots for at least `games` games (whole rounds of players/4 tables);
    `channel_for(service, player)` opens a channel to "matchmaking" or "table" carrying that
    player's token. `think_seconds`: each bot waits that long before each decision. `rounds`
    (games per bot) is given by `mjctl.load` when the bots of one run are spread over processes
    (then `players` is this process's share and need not fill whole tables). `fund(player_id,
    occasion)`, when given, runs before each of a bot's games (`starting_balance_funder`)."""
    if rounds is None and (players < 4 or players % 4):
        raise ValueError("--players must be a positive multiple of 4 (a table seats four)")
    run_id = uuid.uuid4().hex[:6]
    bots = [
        BotPlayer(
            f"{player_prefix}-{run_id}-{index}",
            channel_for("matchmaking", f"{player_prefix}-{run_id}-{index}"),
            channel_for("table", f"{player_prefix}-{run_id}-{index}"),
            log,
            think_seconds,
        )
        for index in range(players)
    ]
    # Every bot plays the same number of games, so the queue always fills whole tables.
    if rounds is None:
        rounds = -(-games // (players // 4))
    finished: list[str] = []
    table_ids: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    below_floor: list[BelowEntryFloorError] = []

    def stop_everyone() -> None:
        for other in bots:
            other.stop()

    def bot_loop(bot: BotPlayer) -> None:
        try:
            for game_round in range(rounds):
                table_id, seat = _funded_table(bot, room_id, fund, game_round)
                view = bot.play(table_id)
                if seat == 0:  # one line per game, from the bot in seat 0
                    if on_game_ended is not None and bot.game_ended_at is not None:
                        on_game_ended(table_id, bot.game_ended_at)
                    line = describe_game(view)
                    with lock:
                        finished.append(line)
                        table_ids.append(table_id)
                    log(line)
        except BelowEntryFloorError as error:
            # The others would wait forever for a fourth player: stop them all.
            log(str(error))
            below_floor.append(error)
            stop_everyone()
        except BotStoppedError:
            pass
        except BaseException as error:  # reported by the caller; other bots go on
            errors.append(error)
            log(f"{bot.player_id} failed: {error!r}")  # at once: its table-mates may wait for it

    started = time.monotonic()
    threads = [threading.Thread(target=bot_loop, args=(bot,), daemon=True) for bot in bots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} bots failed; first: {errors[0]!r}") from errors[0]
    if below_floor:
        raise BelowEntryFloorError(
            f"{len(below_floor)} of {players} bots are below room {room_id!r}'s entry floor and cannot "
            f"be seated, so the run stopped after {len(finished)} games (first: {below_floor[0]}); "
            "deposit beans for them or choose a room with a lower floor"
        )
    seconds = time.monotonic() - started
    latencies = [latency for bot in bots for latency in bot.act_latencies_seconds]
    deliveries = [latency for bot in bots for latency in bot.delivery_latencies_seconds]
    retries = sum(bot.retries for bot in bots)
    return BotRunReport(finished, table_ids, seconds, latencies, deliveries, retries)


# ------------------------------------------------------------------------------ grpc.aio

REFUSED_CODES: Final = frozenset(
    {grpc.StatusCode.FAILED_PRECONDITION.value[0], grpc.StatusCode.ABORTED.value[0]}
)
"""Answers that mean the table moved on (a timeout acted, another claim won): look again."""


class AsyncBotPlayer:
    """`BotPlayer` on ``grpc.aio``: many bots share one event loop and one channel per service
    (each call carries the bot's token), and a bot plays its table on one ``Play`` stream
    (`client.PlaySession`): its updates come in and its commands go out on the same stream, so a
    decision costs a message, not a call. Its Act latency is a command's time to its answer."""

    def __init__(
        self,
        player_id: str,
        matchmaking: grpc.aio.Channel,
        table: grpc.aio.Channel,
        token: str,
        log: Callable[[str], None],
        think_seconds: float = 0.0,
        hold_idle_updates_ms: int = PLAY_HOLD_IDLE_UPDATES_MS,
    ) -> None:
        self.player_id = player_id
        self.think_seconds = think_seconds
        self.hold_idle_updates_ms = hold_idle_updates_ms
        self.delivery_latencies_seconds: list[float] = []
        self.decision_delivery_latencies_seconds: list[float] = []
        self.act_samples: list[ActSample] = []
        self.retries = 0
        self.game_ended_at: datetime.datetime | None = None
        self._matchmaking = matchmaking_service_pb2_grpc.MatchmakingServiceStub(matchmaking)
        self._table = table_service_pb2_grpc.TableServiceStub(table)
        self._metadata = bearer_metadata(token)
        self._log = log
        self._backoff = client.Backoff(on_retry=self._count_retry)
        self._ticket_id: str | None = None
        self._stopped = False
        self._key_prefix = f"{uuid.uuid4().hex}-"
        self.enqueue_refusals = 0
        self.play_opens = 0
        self.play_responses = 0
        self.play_riding_answers = 0
        self._key_counter = itertools.count()

    @property
    def act_latencies_seconds(self) -> list[float]:
        """Each answered command's seconds from sending it to the bot reading its answer."""
        return [sample.read_seconds for sample in self.act_samples]

    def _count_retry(self, _line: str) -> None:
        self.retries += 1

    async def find_table(self, room_id: str) -> tuple[str, int]:
        """`BotPlayer.find_table`."""
        request = matchmaking_messages.EnqueueRequest(room_id=room_id, idempotency_key=str(uuid.uuid4()))
        freeing: client.Backoff | None = None
        while True:
            if self._stopped:
                raise BotStoppedError(f"{self.player_id}: stopped before being seated")
            try:
                ticket = await client.call_async(
                    self._matchmaking.Enqueue,
                    request,
                    self._backoff,
                    CALL_TIMEOUT_SECONDS,
                    metadata=self._metadata,
                )
                break
            except grpc.RpcError as error:
                freeing = _seat_not_freed_yet(self, error, freeing)
                await asyncio.sleep(_pause_while_seat_not_freed(freeing, error))
        self._ticket_id = ticket.ticket_id
        try:
            if self._stopped:
                await self.cancel_ticket()
            async for update in client.watch_ticket_async(
                self._matchmaking, ticket.ticket_id, self._backoff, GAME_MAX_SECONDS, self._metadata
            ):
                if update.state == "seated":
                    return update.table_id, update.seat
                if update.state == "cancelled":
                    if self._stopped:
                        raise BotStoppedError(f"{self.player_id}: stopped before being seated")
                    raise RuntimeError(f"{self.player_id}: ticket {ticket.ticket_id} was cancelled")
        finally:
            self._ticket_id = None
        raise RuntimeError(f"{self.player_id}: ticket stream ended before a seat was assigned")

    async def stop(self) -> None:
        """Stop looking for tables: cancel the ticket this bot waits on, enqueue no more."""
        self._stopped = True
        await self.cancel_ticket()

    async def cancel_ticket(self) -> None:
        ticket_id = self._ticket_id
        if ticket_id is None:
            return
        request = matchmaking_messages.CancelRequest(ticket_id=ticket_id, idempotency_key=str(uuid.uuid4()))
        try:
            await client.call_async(
                self._matchmaking.Cancel,
                request,
                client.Backoff(give_up_after_seconds=30),
                metadata=self._metadata,
            )
        except grpc.RpcError as error:  # seated meanwhile: the bot plays that game out
            self._log(f"{self.player_id}: could not cancel ticket {ticket_id[:8]}: {error.details()}")

    async def play(self, table_id: str) -> table_messages.TableView:
        """Play the table to its end on its Play stream (resumed after any reconnect); return
        the final view."""
        session = client.PlaySession(
            self._table,
            table_id,
            self._backoff,
            timeout_seconds=GAME_MAX_SECONDS,
            metadata=self._metadata,
            answers_with_updates=PLAY_ANSWERS_WITH_UPDATES,
            wait_for_table_ms=PLAY_WAIT_FOR_TABLE_MS,
            hold_idle_updates_ms=self.hold_idle_updates_ms,
        )
        decisions = client.Decisions()
        sent: dict[str, tuple[float, str]] = {}
        final: table_messages.TableView | None = None
        # One command at a time: a view that arrives while a command waits for its answer (or
        # while the bot thinks over it) was built before that command counted (another seat's
        # pick, say), so deciding on it would send a second, refused command; it is kept and
        # decided on once the answer is in, unless the accepted command took the table past it.
        waiting: table_messages.TableView | None = None
        acted_through = 0
        # The think time (--think-ms) is a timer, not a sleep: the bot goes on reading its stream
        # meanwhile, so what arrives is timed when it arrives.
        thinking: asyncio.TimerHandle | None = None

        def send(request: table_messages.ActRequest) -> None:
            nonlocal thinking
            thinking = None
            sent[request.idempotency_key] = (time.perf_counter(), request.WhichOneof("command") or "")
            session.send(request)

        try:
            async for response in session.responses():
                answers = client.answers_of(response)
                if answers:
                    arrived = time.perf_counter()
                for answer in answers:
                    command = sent.pop(answer.idempotency_key, None)
                    if command is not None:
                        started, kind = command
                        self.act_samples.append(
                            ActSample(
                                kind + " refused" if answer.code else kind,
                                arrived - started,
                                time.perf_counter() - started,
                            )
                        )
                    if answer.code and answer.code not in REFUSED_CODES:
                        raise RuntimeError(
                            f"{self.player_id}: command refused ({answer.code}): {answer.message}"
                        )
                    if not answer.code:
                        acted_through = max(acted_through, answer.result.sequence)
                if response.WhichOneof("response") == "answer":
                    if sent or waiting is None:
                        continue
                    view, waiting = waiting, None
                else:
                    # Answers riding on this update came before it: a view kept while they were
                    # owed is older than this one.
                    waiting = None
                    update = response.update
                    view = update.view
                    if update.events:
                        received = time.time()
                        latencies = [received - _epoch_seconds(e.occurred_at) for e in update.events]
                        self.delivery_latencies_seconds.extend(latencies)
                        if _asks(view):
                            self.decision_delivery_latencies_seconds.append(latencies[-1])
                        for envelope in update.events if view.phase == "ended" else ():
                            if envelope.WhichOneof("payload") == "game_ended":
                                self.game_ended_at = envelope.occurred_at.ToDatetime(datetime.UTC)
                    if view.phase == "ended":
                        final = view  # the stream ends after the answers still owed
                        continue
                    if sent or thinking is not None:
                        waiting = view
                        continue
                if view.sequence < acted_through or not _asks(view):
                    continue  # (most views only watched: no key, request or decision made for them)
                # The view seen again after a reconnect gets the same request (the same key).
                request = decisions.for_view(
                    view.sequence, functools.partial(choose_command, view, self._new_key())
                )
                if request is None:  # nothing is in flight here: `sent` is empty
                    continue
                with_expected_sequence(request, view)
                if self.think_seconds:
                    thinking = asyncio.get_running_loop().call_later(self.think_seconds, send, request)
                else:
                    send(request)
        finally:
            if thinking is not None:
                thinking.cancel()
            self.play_opens += session.opens
            self.play_responses += session.received
            self.play_riding_answers += session.riding
        if final is None:
            raise RuntimeError(f"{self.player_id}: the feed of table {table_id} ended before the game")
        return final

    def _new_key(self) -> str:
        """A new idempotency key: this bot's random prefix and a counter (a UUID per command cost
        a system call and a formatting each)."""
        return f"{self._key_prefix}{next(self._key_counter)}"


async def run_bots_async(
    room_id: str,
    players: int,
    rounds: int,
    matchmaking: grpc.aio.Channel,
    table: grpc.aio.Channel,
    token_for: Callable[[str], str],
    log: Callable[[str], None] = print,
    player_prefix: str = "bot",
    on_game_ended: Callable[[str, datetime.datetime], None] | None = None,
    think_seconds: float = 0.0,
    fund: Callable[[str, str], None] | None = None,
    hold_idle_updates_ms: int = PLAY_HOLD_IDLE_UPDATES_MS,
) -> BotRunReport:
    """`run_bots` on one event loop: `players` `AsyncBotPlayer`s, `rounds` games each, on the
    given ``grpc.aio`` channels (`token_for(player)`: the bot's token). `fund` (blocking) runs in
    a worker thread before each of a bot's games; `hold_idle_updates_ms`: their Play streams'
    `PlayOptions.hold_idle_updates_ms`."""
    run_id = uuid.uuid4().hex[:6]
    bots = [
        AsyncBotPlayer(name, matchmaking, table, token_for(name), log, think_seconds, hold_idle_updates_ms)
        for name in (f"{player_prefix}-{run_id}-{index}" for index in range(players))
    ]
    finished: list[str] = []
    table_ids: list[str] = []
    errors: list[BaseException] = []
    below_floor: list[BelowEntryFloorError] = []

    async def funded_table(bot: AsyncBotPlayer, game_round: int) -> tuple[str, int]:
        if fund is None:
            return await bot.find_table(room_id)
        for attempt in range(FUNDED_ENQUEUE_ATTEMPTS):
            await asyncio.to_thread(fund, bot.player_id, f"{game_round}.{attempt}")
            try:
                return await bot.find_table(room_id)
            except BelowEntryFloorError:
                if attempt == FUNDED_ENQUEUE_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(FUNDED_ENQUEUE_PAUSE_SECONDS)
        raise AssertionError("unreachable")

    async def bot_loop(bot: AsyncBotPlayer) -> None:
        try:
            for game_round in range(rounds):
                table_id, seat = await funded_table(bot, game_round)
                view = await bot.play(table_id)
                if seat == 0:  # one line per game, from the bot in seat 0
                    if on_game_ended is not None and bot.game_ended_at is not None:
                        on_game_ended(table_id, bot.game_ended_at)
                    line = describe_game(view)
                    finished.append(line)
                    table_ids.append(table_id)
                    log(line)
        except BelowEntryFloorError as error:
            log(str(error))
            below_floor.append(error)
            await asyncio.gather(*(other.stop() for other in bots))
        except BotStoppedError:
            pass
        except Exception as error:  # reported by the caller; other bots go on
            errors.append(error)
            log(f"{bot.player_id} failed: {error!r}")

    started = time.monotonic()
    await asyncio.gather(*(bot_loop(bot) for bot in bots))
    if errors:
        raise RuntimeError(f"{len(errors)} bots failed; first: {errors[0]!r}") from errors[0]
    if below_floor:
        raise BelowEntryFloorError(
            f"{len(below_floor)} of {players} bots are below room {room_id!r}'s entry floor and cannot "
            f"be seated, so the run stopped after {len(finished)} games (first: {below_floor[0]})"
        )
    return BotRunReport(
        finished,
        table_ids,
        time.monotonic() - started,
        [latency for bot in bots for latency in bot.act_latencies_seconds],
        [latency for bot in bots for latency in bot.delivery_latencies_seconds],
        sum(bot.retries for bot in bots),
        [sample for bot in bots for sample in bot.act_samples],
        sum(bot.enqueue_refusals for bot in bots),
        sum(bot.play_opens for bot in bots),
        sum(bot.play_responses for bot in bots),
        sum(bot.play_riding_answers for bot in bots),
        [latency for bot in bots for latency in bot.decision_delivery_latencies_seconds],
    )


FIRST_OCCASION = "0.0"
FUNDED_ENQUEUE_ATTEMPTS = 20
FUNDED_ENQUEUE_PAUSE_SECONDS = 0.5


def _funded_table(
    bot: BotPlayer, room_id: str, fund: Callable[[str, str], None] | None, game_round: int
) -> tuple[str, int]:
    """`bot.find_table`, topped up by `fund` first. The previous game's losses may still be on their
    way to the ledger when the top-up reads the balance, so a refusal below the entry floor tops
    up again (a little later) before it counts."""
    if fund is None:
        return bot.find_table(room_id)
    for attempt in range(FUNDED_ENQUEUE_ATTEMPTS):
        fund(bot.player_id, f"{game_round}.{attempt}")
        try:
            return bot.find_table(room_id)
        except BelowEntryFloorError:
            if attempt == FUNDED_ENQUEUE_ATTEMPTS - 1:
                raise
            time.sleep(FUNDED_ENQUEUE_PAUSE_SECONDS)
    raise AssertionError("unreachable")


def starting_balance_funder(ledger: grpc.Channel, beans: int) -> Callable[[str, str], None]:
    """Start every game of a bot with at least `beans` (RULES.md 1.9 shortfalls on demand).

    Before a new bot's first game: a deposit of exactly `beans` from `world` (the ledger grants its
    starting grant only to an account it has never seen, so this deposit replaces the grant).
    Before each later game: a deposit topping the balance up to `beans` when it holds less, so a
    bot that lost everything can sit again and a long load run keeps producing short payers.
    One idempotency key per bot and `occasion` ("0.0" is the first game's first try). `ledger`
    carries a finance token."""
    if beans < 1:
        raise ValueError("--starting-balance must be at least 1 bean")
    stub = ledger_service_pb2_grpc.LedgerServiceStub(ledger)

    def fund(player_id: str, occasion: str) -> None:
        account = f"player:{player_id}"
        missing = beans
        if occasion != FIRST_OCCASION:  # never before the first deposit: GetBalance would post the grant
            balance = stub.GetBalance(
                ledger_service_pb2.GetBalanceRequest(account=account), timeout=CALL_TIMEOUT_SECONDS
            )
            missing = beans - balance.balance_beans
        if missing <= 0:
            return
        stub.Deposit(
            ledger_service_pb2.DepositRequest(
                account=account,
                beans=missing,
                idempotency_key=f"bots-starting-balance:{player_id}:{occasion}",
                memo="mjctl bots --starting-balance",
            ),
            timeout=CALL_TIMEOUT_SECONDS,
        )

    return fund
