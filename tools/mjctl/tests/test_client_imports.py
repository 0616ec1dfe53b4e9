"""A client process (the bots, `mjctl`'s calls) does not import SQLAlchemy: `mahjong_platform.errors`
looks at SQLAlchemy's errors only once a database is in the process, so the bot processes and
every `mjctl` command skip its import (about 0.3 s of CPU, half of what `mahjong_platform.auth` cost)."""

from __future__ import annotations

import subprocess
import sys

_CLIENT = """
import sys
import mjctl.__main__, mjctl.bots, mjctl.load, mahjong_platform.auth, mahjong_platform.grpc_client
from mahjong_platform.errors import NotFoundError, client_status, is_database_unavailable
assert not is_database_unavailable(OSError("connection refused"))
print(client_status(NotFoundError("no such table")))
print("sqlalchemy" in sys.modules)
"""


def test_the_bots_and_the_client_modules_import_no_sqlalchemy() -> None:
    result = subprocess.run([sys.executable, "-c", _CLIENT], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == [
        "(<StatusCode.NOT_FOUND: (5, 'not found')>, 'no such table')",
        "False",
    ]


_DATABASE_AFTER_ERRORS = """
import sqlite3
from mahjong_platform.errors import client_status, is_database_unavailable
import sqlalchemy.exc  # loaded after the errors module, as in a service that opens its database later
lost = sqlalchemy.exc.OperationalError(
    "SELECT 1", {}, sqlite3.OperationalError("gone"), connection_invalidated=True
)
assert is_database_unavailable(lost)
print(client_status(lost)[0])
"""


def test_a_database_error_is_recognised_when_sqlalchemy_is_loaded_after_the_errors_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _DATABASE_AFTER_ERRORS], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "StatusCode.UNAVAILABLE"
