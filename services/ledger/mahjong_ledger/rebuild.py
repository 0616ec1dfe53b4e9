"""``python -m mahjong_ledger rebuild``: the ledger rebuilt from its topics into an empty database
and compared with the live one (`mahjong_platform.rebuild`; ``mjctl rebuild ledger`` runs this
command).

Replayed: ``mahjong.settlement.v1`` through the ledger's projection, plus the deposits (ops
deposits and starting grants, which arrive over gRPC, not from a topic) from their
``TransferPosted`` events on ``mahjong.ledger.v1``, posted again through the repository at their
original time (`LedgerReplay`).

Order: the ledger's balances depend on the order in which one account's transfers were posted,
which live was arrival order: the occurrence-time merge reproduces it as long as a deposit and a
settlement of the same account are not closer in time than the live consumer's lag.

Compared columns: everything except ``ledger_postings.posting_id`` (a global autoincrement whose
values follow the interleaving of unrelated accounts; postings are keyed by transfer and account
instead), and ``ledger_postings.balance_after_beans`` of the ``house:*`` and ``world`` postings:
those accounts are fed by every partition at once, so their running balance after one posting
follows the order in which the live consumer happened to read the partitions (a crash or a
rebalance changes it), which no event records. Their balances in ``ledger_accounts`` (a sum, the
same in any order) and every posting's beans are compared, and ``mjctl reconcile`` checks their
running balances on the live database. A player's postings come from one table at a time, so
their running balances are compared. An account's ``opened_at`` is the earliest event time that
touched it, whatever the order of arrival; every time is an event's occurrence time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mahjong_platform.event_store import EventStore
from mahjong_platform.rebuild import ComparedTable, RebuildTarget, command
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import BatchHandler

from mahjong_ledger.app import CONSUMER_GROUP, migrate
from mahjong_ledger.models import ledger_accounts, ledger_games, ledger_postings, ledger_transfers
from mahjong_ledger.projection import IDEMPOTENT_HANDLER, LedgerReplay
from mahjong_ledger.repository import LedgerRepository


def _handler(topics: Topics) -> BatchHandler:
    return LedgerReplay(LedgerRepository(EventStore(topics)), topics.ledger).handle_batch


def _is_player_posting(row: dict[str, Any]) -> bool:
    return str(row["account"]).startswith("player:")


def rebuild_target() -> RebuildTarget:
    """Ledger: the settlement topic through the ledger's projection, and deposits from its own topic."""
    return RebuildTarget(
        service="ledger",
        consumer_group=CONSUMER_GROUP,
        migrate=migrate,
        input_topics=lambda topics: [topics.settlement, topics.ledger],
        consumed_topics=lambda topics: [topics.settlement],  # the deposits come over gRPC
        handler=_handler,
        idempotent_handler=IDEMPOTENT_HANDLER,
        tables=(
            ComparedTable(ledger_accounts, ("account",)),
            ComparedTable(ledger_transfers, ("transfer_id",)),
            ComparedTable(
                ledger_postings,
                ("transfer_id", "account"),
                frozenset({"posting_id"}),
                compared_only_when=("balance_after_beans", _is_player_posting),
            ),
            ComparedTable(ledger_games, ("table_id",)),
        ),
    )


def main(argv: Sequence[str]) -> int:
    """``python -m mahjong_ledger rebuild [--database URL] [--keep] [--live-database URL] [--live-group G]``
    (`mahjong_platform.rebuild.command`)."""
    return command(rebuild_target(), argv, prog="python -m mahjong_ledger rebuild")
