"""Example alembic environment: all a service's env.py needs to run its own migration history."""

from mahjong_platform.migrations import run_alembic_environment
from mahjong_platform.schema import platform_metadata

# A real service passes [platform_metadata, its own MetaData] so autogenerate sees every table.
run_alembic_environment(target_metadata=platform_metadata)
