"""Alembic environment of the table service (its own migration history)."""

from mahjong_platform.migrations import run_alembic_environment
from mahjong_platform.schema import platform_metadata
from mahjong_table.models import metadata

run_alembic_environment(target_metadata=[platform_metadata, metadata])
