"""The layer contracts (issue 14) hold, in `make test` too (CI runs `make test`, not `make lint`).

`lint-imports` checks the contracts of pyproject.toml's ``[tool.importlinter]``: the rules library
and the table domain import no I/O, no service imports another, no library (libs/) imports a
service or an entry point, no service imports an entry point, and mjctl imports no service (it
reaches them through their APIs). The second test makes sure the check is not vacuous: the import graph
it reads does see the packages and the external libraries the contracts forbid.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONTRACTS = {
    "rules-pure",
    "table-domain-pure",
    "services-independent",
    "libraries-below-services",
    "services-below-entry-points",
    "mjctl-through-apis",
}


def configuration() -> dict[str, object]:
    with (REPOSITORY / "pyproject.toml").open("rb") as file:
        tool: dict[str, object] = tomllib.load(file)["tool"]["importlinter"]
    return tool


def test_every_layer_contract_is_kept() -> None:
    contracts = configuration()["contracts"]
    assert {contract["id"] for contract in contracts} == CONTRACTS  # type: ignore[attr-defined]
    completed = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in completed.stdout


def test_the_import_graph_sees_the_packages_and_the_libraries_the_contracts_forbid() -> None:
    packages = configuration()["root_packages"]
    graph = grimp.build_graph(*packages, include_external_packages=True)  # type: ignore[misc]
    seen = [
        ("mahjong_table.sichuan.rules_adapter", "mahjong_rules"),  # the domain uses the rules
        ("mahjong_table.codec", "mahjong"),  # the codec, outside the domain, uses the protos
        ("mahjong_ledger.repository", "sqlalchemy"),
        ("mahjong_platform.grpc_server", "grpc"),
        ("mahjong_platform.tracked_consumer", "kafka"),
    ]
    for importer, imported in seen:
        seen_chain = graph.chain_exists(importer=importer, imported=imported, as_packages=True)
        assert seen_chain, f"{importer} -> {imported} is not in the graph"


ACYCLIC_PACKAGES = (
    "mjctl",
    "mahjong_platform",
    "mahjong_rules",
    "mahjong_table",
    "mahjong_scoring",
    "mahjong_ledger",
    "mahjong_matchmaking",
)


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_two_modules_of_an_entry_point_or_a_library_import_each_other(package: str) -> None:
    """No import cycle inside the entry points, the libraries and the services (deferred imports
    inside functions count): e.g. the bots' library and the load runner that spreads them over
    processes (the command line of `mjctl bots`, which dispatches to either, is a module of its
    own, `mjctl.bots_command`), or a service's ``__main__`` and its rebuild command (the rebuild
    migrates with the service's definition, which lives in a module of its own)."""
    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(graph.find_descendants(package))
    assert len(modules) > 3, modules  # the graph sees the package
    cycles = [
        (first, second)
        for first, second in itertools.combinations(modules, 2)
        if graph.chain_exists(importer=first, imported=second)
        and graph.chain_exists(importer=second, imported=first)
    ]
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"
