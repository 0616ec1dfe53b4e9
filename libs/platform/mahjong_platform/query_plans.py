"""Reading the databases' own plans of the statements a process runs (tests and audits; no
service imports it).

`StatementRecorder` records every distinct statement with the driver parameters it ran with;
`plans_for(connection, bounded)` explains them on the database they ran on and names each step
that reads a table whose size grows with history (every table of the database but `bounded`)
from end to end:

* SQLite: ``EXPLAIN QUERY PLAN``. A ``SCAN`` of a growing table (``SCAN t USING INDEX i`` walks
  the whole index: it counts too, unless `i` is a partial index, whose predicate bounds it), an
  ``AUTOMATIC`` index (SQLite builds it by scanning the table, per statement) and a skip-scan
  (``ANY(column)``).
* PostgreSQL: ``EXPLAIN (FORMAT JSON)`` with ``enable_seqscan = off``, so the planner takes any
  index that can answer the statement however few rows a test left: a ``Seq Scan`` that remains
  means no index can. An index scan counts as a scan unless its ``Index Cond`` bounds the index's
  leading column (or the index is partial): without it the scan walks the whole index, which is
  what the planner does instead of a Seq Scan for a filter no index answers, or for a condition
  on a later column of the index (PostgreSQL 15 has no skip scan).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Collection, Iterator
from typing import Any

import sqlalchemy


@dataclasses.dataclass
class Recorded:
    label: str  # the database's name in `StatementRecorder.labels`
    statement: str
    parameters: list[Any]  # the first and the last parameters it ran with (one when the same)


class StatementRecorder:
    """Every distinct statement run on the databases named in `labels` (URL -> a name for the
    report), by URL, from `start` (a ``before_cursor_execute`` hook on every engine of the
    process, existing or new) to `stop`. Never raises into the code it watches: a failure to
    record is kept in `failures`, for the caller to assert on."""

    def __init__(self) -> None:
        self.by_url: dict[str, dict[str, Recorded]] = {}
        self.labels: dict[str, str] = {}
        self.failures: list[str] = []
        self.unlabelled: set[str] = set()  # databases that ran statements nobody asked to record
        self._lock = threading.Lock()

    def label(self, url: str, name: str) -> None:
        """Record the statements run on the database at `url`, under `name`."""
        self.labels[sqlalchemy.make_url(url).render_as_string(hide_password=False)] = name

    def start(self) -> None:
        sqlalchemy.event.listen(sqlalchemy.Engine, "before_cursor_execute", self)

    def stop(self) -> dict[str, dict[str, Recorded]]:
        """Stop recording (again: nothing); what was recorded, by URL."""
        if sqlalchemy.event.contains(sqlalchemy.Engine, "before_cursor_execute", self):
            sqlalchemy.event.remove(sqlalchemy.Engine, "before_cursor_execute", self)
        with self._lock:
            return {url: dict(statements) for url, statements in self.by_url.items()}

    def __call__(
        self, connection: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool
    ) -> None:
        try:  # never let the audit change what a service does: its failure is reported at the end
            self._record(connection, statement, parameters, many)
        except Exception as error:
            self.failures.append(f"{error!r} recording {statement[:200]!r}")

    def _record(self, connection: Any, statement: str, parameters: Any, many: bool) -> None:
        url = connection.engine.url.render_as_string(hide_password=False)
        label = self.labels.get(url)
        if label is None:
            self.unlabelled.add(url)
            return
        if not _explainable(statement):
            return
        rows = many and isinstance(parameters, (list, tuple)) and parameters
        if rows and isinstance(parameters[0], (tuple, list, dict)):
            parameters = parameters[0]  # an executemany: its first row (insertmanyvalues is flat)
        with self._lock:
            statements = self.by_url.setdefault(url, {})
            seen = statements.get(statement)
            if seen is None:
                statements[statement] = Recorded(label, statement, [parameters])
            elif parameters != seen.parameters[0]:
                seen.parameters[1:] = [parameters]


def _explainable(statement: str) -> bool:
    """A statement with a plan to read (not DDL, a PRAGMA, SET or transaction control)."""
    return statement.lstrip().split(None, 1)[0].upper() in {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}


_TABLE_REFERENCE = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO)\s+\"?(\w+)\"?(?:\s+(?:AS\s+)?\"?(\w+)\"?)?", re.IGNORECASE
)
_NOT_ALIASES = {
    "where",
    "set",
    "on",
    "join",
    "left",
    "inner",
    "outer",
    "cross",
    "group",
    "order",
    "limit",
    "values",
    "using",
    "returning",
    "select",
    "as",
    "natural",
    "union",
    "default",
}


def _aliases(statement: str) -> dict[str, str]:
    """Every name a table goes by in `statement` (itself and its alias) → the table."""
    names: dict[str, str] = {}
    for table, alias in _TABLE_REFERENCE.findall(statement):
        names[table] = table
        if alias and alias.lower() not in _NOT_ALIASES:
            names[alias] = table
    return names


def _driver_execute(connection: sqlalchemy.Connection, statement: str, parameters: Any) -> list[Any]:
    """`statement` run by the driver with the parameters exactly as the service's driver got them."""
    cursor = connection.connection.cursor()
    try:
        cursor.execute(statement, parameters)
        return list(cursor.fetchall())
    finally:
        cursor.close()


class SqlitePlans:
    """SQLite's ``EXPLAIN QUERY PLAN`` of statements, on one connection."""

    def __init__(self, connection: sqlalchemy.Connection, bounded: Collection[str]) -> None:
        self._connection = connection
        tables = connection.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).scalars()
        self.growing = set(tables) - set(bounded)
        self.partial = set(
            connection.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'"
            ).scalars()
        )

    def scans(self, statement: str, parameters: Any) -> list[str]:
        plan = [
            row[3] for row in _driver_execute(self._connection, "EXPLAIN QUERY PLAN " + statement, parameters)
        ]
        names = _aliases(statement)
        subqueries = {m for line in plan for m in re.findall(r"^(?:MATERIALIZE|CO-ROUTINE) (\S+)", line)}
        found = []
        for line in plan:
            scan = re.match(r"SCAN (\S+)(?: USING (?:COVERING )?INDEX (\S+))?", line)
            if scan is not None:
                name, index = scan.groups()
                if name in subqueries or name.startswith("(") or re.match(r"SCAN (\d+ )?CONSTANT ROW", line):
                    continue
                table = names.get(name)
                if table is None:
                    found.append(f"{line} (a name this audit cannot resolve to a table)")
                elif table in self.growing and index not in self.partial:
                    found.append(line)
            automatic = re.match(r"SEARCH (\S+) USING AUTOMATIC|SEARCH (\S+) .*\(ANY\(", line)
            name = automatic and (automatic.group(1) or automatic.group(2))  # a temporary index, a skip-scan
            if name and names.get(name, name) in self.growing:
                found.append(line)
        return found


class PostgresPlans:
    """PostgreSQL's ``EXPLAIN (FORMAT JSON)`` of statements with seq scans off, on one connection
    (the setting stays on it: use a connection of its own)."""

    def __init__(self, connection: sqlalchemy.Connection, bounded: Collection[str]) -> None:
        self._connection = connection
        tables = connection.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).scalars()
        self.growing = set(tables) - set(bounded)
        rows = connection.exec_driver_sql(
            "SELECT index.relname, tab.relname, a.attname, i.indpred IS NOT NULL FROM pg_index i"
            " JOIN pg_class index ON index.oid = i.indexrelid JOIN pg_class tab ON tab.oid = i.indrelid"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
            " WHERE tab.relnamespace = current_schema()::regnamespace"
        ).all()
        self.indexes = {name: (table, leading, partial) for name, table, leading, partial in rows}
        connection.exec_driver_sql("SET enable_seqscan = off")

    def scans(self, statement: str, parameters: Any) -> list[str]:
        """What in `statement`'s plan (with these driver parameters) reads a growing table whole."""
        ((plans,),) = _driver_execute(self._connection, "EXPLAIN (FORMAT JSON) " + statement, parameters)
        (plan,) = json.loads(plans) if isinstance(plans, str) else plans
        return list(self._scans_in(plan["Plan"]))

    def _scans_in(self, node: dict[str, Any]) -> Iterator[str]:
        kind = node["Node Type"]
        if kind in ("Seq Scan", "Sample Scan", "Tid Range Scan") and node["Relation Name"] in self.growing:
            yield f"{kind} on {node['Relation Name']}"
        elif kind in ("Index Scan", "Index Only Scan", "Bitmap Index Scan"):
            # Not in the service's schema (a catalog index): not a table of the service.
            table, leading, partial = self.indexes.get(node["Index Name"], ("", "", False))
            condition = node.get("Index Cond", "")
            # A btree walks its whole length unless the condition bounds its leading column
            # (PostgreSQL 15 has no skip scan); the planner prints the indexed column on the left.
            bounded = re.search(rf"\(\(?{re.escape(leading)}\)?(::[\w ]+)?\s*(=|<|>|IS\b)", condition)
            if table in self.growing and not partial and bounded is None:
                yield (
                    f"{kind} using {node['Index Name']} on {table} whose condition does not bound its "
                    f"leading column {leading}: {condition or 'none'}"
                )
        for child in node.get("Plans", ()):
            yield from self._scans_in(child)


def plans_for(connection: sqlalchemy.Connection, bounded: Collection[str]) -> SqlitePlans | PostgresPlans:
    """The plan reader of `connection`'s database; `bounded`: the tables a statement may scan."""
    if connection.dialect.name == "sqlite":
        return SqlitePlans(connection, bounded)
    return PostgresPlans(connection, bounded)
