"""Alembic environment of the matchmaking service (its own migration history)."""

from mahjong_matchmaking.models import metadata
from mahjong_platform.migrations import run_alembic_environment
from mahjong_platform.schema import platform_metadata

run_alembic_environment(target_metadata=[platform_metadata, metadata])
