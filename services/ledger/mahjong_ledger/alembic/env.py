"""The ledger's alembic environment: the platform tables and the ledger tables, one history."""

from mahjong_ledger.models import all_metadata
from mahjong_platform.migrations import run_alembic_environment

run_alembic_environment(target_metadata=all_metadata())
