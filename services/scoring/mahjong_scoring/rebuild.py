"""``python -m mahjong_scoring rebuild``: the settlement projection rebuilt from ``mahjong.table.v1``
into an empty database and compared with the live one (`mahjong_platform.rebuild`; ``mjctl
rebuild scoring`` runs this command).

Replayed: ``mahjong.table.v1`` through `SettlementProjection.apply_batch`, the live consumer's own
batch handler. Scoring folds each table on its own, so the merge of partitions by occurrence time
cannot matter. Compared: every column of every projection table (`PROJECTION_TABLES`); they hold
no wall-clock time.
"""

from __future__ import annotations

from collections.abc import Sequence

from mahjong_platform.event_store import EventStore
from mahjong_platform.rebuild import ComparedTable, RebuildTarget, command
from mahjong_platform.service_runtime import migrate
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import BatchHandler

from mahjong_scoring.app import DEFINITION
from mahjong_scoring.models import PROJECTION_TABLES
from mahjong_scoring.projection import CONSUMER_GROUP, IDEMPOTENT_HANDLER, SettlementProjection


def _migrate(url: str) -> None:
    migrate(DEFINITION, url)


def _handler(topics: Topics) -> BatchHandler:
    return SettlementProjection(EventStore(topics)).apply_batch


def rebuild_target() -> RebuildTarget:
    """Scoring: the table topic through the settlement projection."""
    return RebuildTarget(
        service="scoring",
        consumer_group=CONSUMER_GROUP,
        migrate=_migrate,
        input_topics=lambda topics: [topics.table],
        handler=_handler,
        idempotent_handler=IDEMPOTENT_HANDLER,
        tables=tuple(
            ComparedTable(table, tuple(column.name for column in table.primary_key.columns))
            for table in PROJECTION_TABLES
        ),
    )


def main(argv: Sequence[str]) -> int:
    """``python -m mahjong_scoring rebuild [--database URL] [--keep] [--live-database URL] [--live-group G]``
    (`mahjong_platform.rebuild.command`)."""
    return command(rebuild_target(), argv, prog="python -m mahjong_scoring rebuild")
