"""The scoring alembic environment: the platform tables and the scoring tables, one history."""

from mahjong_platform.migrations import run_alembic_environment
from mahjong_scoring.models import all_metadata

run_alembic_environment(target_metadata=all_metadata())
