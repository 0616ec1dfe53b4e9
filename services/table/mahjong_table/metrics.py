"""The table service's own metrics: how many tables are open (read from `table_status` per scrape)."""

from __future__ import annotations

import sqlalchemy
from mahjong_platform.metrics import DatabaseGauge, GaugeQuery, ServiceMetrics
from sqlalchemy import Engine

from mahjong_table.models import table_status

OPEN_TABLES = GaugeQuery(
    "mahjong_table_open_tables",
    "Tables opened and not yet ended.",
    sqlalchemy.select(sqlalchemy.func.count())
    .select_from(table_status)
    .where(table_status.c.ended.is_(False)),
)


def instrument(metrics: ServiceMetrics, engine: Engine) -> None:
    """Add the table service's gauges to its metrics (the `ServiceDefinition.instrument` hook)."""
    metrics.add_collector(DatabaseGauge(engine, [OPEN_TABLES]))
