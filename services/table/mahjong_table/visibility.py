"""Claim windows reveal nothing the server can hide (ARCHITECTURE.md "Information hiding", issue 17).

After a discard (or an added kong) the table opens a claim window only when some seat can win,
kong, pong or chow the tile; otherwise the next seat draws at once, in the same command. A seat
that is not asked in the window must therefore not be able to tell the two cases apart: what it
receives (phase, deadline, legal actions, events, error texts, answers) is the same whether or
not another seat can claim. Only the pause while a claimant decides remains (inherent to the game;
windows are not padded with a fixed wait, which would slow every discard). The rule, for a seat
that the open window does not ask (`window_hidden_from`):

- its calls (GetView, Act) wait until the window has closed and answer on the table after it, as
  they would have answered had the next seat drawn at once; its WatchView (and its Watch) sends nothing
  while the window is open, so the discard arrives together with what followed it, as without a window;
- an Act answer stops at the command's window-opening event (`answer_envelopes`): the discarder's
  answer is its discard, never the next seat's draw that follows only when nobody can claim;
- seats asked in the window see it whole: the claimable tile, their options, the deadline.

- the deadline of an open window is the one it opened with: an event hidden from every seat the
  window still asks (another asked seat's pass or claim timeout) does not move it
  (`unseen_by_the_asked`), since a deadline that moved would tell the asked seats that another
  seat had been asked and had answered;
- sequence numbers are the seat's own: an event hidden from a seat (another seat's claim pass or
  claim timeout) takes none of its numbers (`TableState.hidden_counts`, `servicer.seat_envelopes`),
  so no gap in what it receives tells it that another seat could claim.

A seat asked in a window knows it could claim, so the rule is about the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mahjong.v1 import envelope_pb2
from mahjong_platform.events import payloads

from mahjong_table.variants import AnyTableState

WINDOW_OPENING_PAYLOADS: Final = payloads(opens_claim_window=True)
"""Events after which a claim window may open (a discard; an added kong may be robbed): the event
registry's `opens_claim_window`."""
CLAIM_WAIT_CAP_SECONDS: Final = 120.0
"""How long a call of a seat not asked in a window waits for it to close (it closes by itself at
its deadline, `turn_timeout_ms`, when the deadline worker acts for the claimants)."""


def window_hidden_from(state: AnyTableState, seat: int) -> bool:
    """True while a claim window is open in which ``seat`` is not asked (it waits on other seats)."""
    window = state.window
    return window is not None and not state.is_over and bool(window.pending) and seat not in window.pending


def unseen_by_the_asked(base: AnyTableState | None, state: AnyTableState) -> bool:
    """True when `state` (after `base`) still has a claim window open and every event since `base`
    is hidden from each seat that window asks: to them the table has not moved, so neither may its
    deadline (a pass by another asked seat in a Sichuan win stage, RULES.md 1.4)."""
    window = state.window
    if base is None or window is None or state.is_over or not window.pending:
        return False
    added = state.version - base.version
    return added > 0 and all(
        state.hidden_counts[seat] - base.hidden_counts[seat] == added for seat in window.pending
    )


def answer_envelopes(envelopes: Sequence[envelope_pb2.Envelope]) -> list[envelope_pb2.Envelope]:
    """A command's events up to and including its first window-opening event: what its Act answer
    carries, the same whether or not a window opened after it (the rest arrives on the streams)."""
    for index, envelope in enumerate(envelopes):
        if envelope.WhichOneof("payload") in WINDOW_OPENING_PAYLOADS:
            return list(envelopes[: index + 1])
    return list(envelopes)
