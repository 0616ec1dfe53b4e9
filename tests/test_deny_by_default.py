"""Deny by default (ARCHITECTURE.md "Information hiding"): every method of every public service is
listed in its service's role table, and what each process serves with is that table (and the
`DeadLetterService` table every process serves for its own consumer groups)."""

from __future__ import annotations

import importlib
import pkgutil

import mahjong.v1
import pytest
from mahjong_ledger.app import definition as ledger_definition
from mahjong_ledger.servicer import METHOD_ROLES as LEDGER_ROLES
from mahjong_ledger.settings import LedgerSettings
from mahjong_matchmaking.__main__ import DEFINITION as MATCHMAKING_DEFINITION
from mahjong_matchmaking.servicer import METHOD_ROLES as MATCHMAKING_ROLES
from mahjong_platform.auth import ANY_CALLER, OPERATIONS_ROLES, OPS_ONLY, RoleTable
from mahjong_platform.config import load_settings
from mahjong_platform.dead_letter_service import METHOD_ROLES as DEAD_LETTER_ROLES
from mahjong_platform.service_runtime import ServiceDefinition, served_method_roles
from mahjong_scoring.__main__ import DEFINITION as SCORING_DEFINITION
from mahjong_scoring.servicer import METHOD_ROLES as SCORING_ROLES
from mahjong_table.__main__ import definition as table_definition
from mahjong_table.servicer import METHOD_ROLES as TABLE_ROLES

ROLE_TABLES: dict[str, RoleTable] = {
    "mahjong.v1.MatchmakingService": MATCHMAKING_ROLES,
    "mahjong.v1.TableService": TABLE_ROLES,
    "mahjong.v1.ScoringService": SCORING_ROLES,
    "mahjong.v1.LedgerService": LEDGER_ROLES,
    "mahjong.v1.DeadLetterService": DEAD_LETTER_ROLES,
}
SERVICE_ROLE_TABLES = [MATCHMAKING_ROLES, TABLE_ROLES, SCORING_ROLES, LEDGER_ROLES]


def every_service_descriptor() -> list[object]:
    """Every service declared in the generated `mahjong.v1` package, found by walking it."""
    services = []
    for module_info in pkgutil.iter_modules(mahjong.v1.__path__):
        if module_info.name.endswith("_pb2"):
            module = importlib.import_module(f"mahjong.v1.{module_info.name}")
            services.extend(module.DESCRIPTOR.services_by_name.values())
    return services


def test_every_public_service_has_a_role_table() -> None:
    assert {service.full_name for service in every_service_descriptor()} == set(ROLE_TABLES)  # type: ignore[attr-defined]


@pytest.mark.parametrize("service", every_service_descriptor(), ids=lambda s: s.full_name)  # type: ignore[attr-defined]
def test_every_method_of_the_service_is_in_its_role_table_and_nothing_else(service: object) -> None:
    table = ROLE_TABLES[service.full_name]  # type: ignore[attr-defined]
    methods = {f"/{service.full_name}/{method.name}" for method in service.methods}  # type: ignore[attr-defined]
    assert set(table) == methods
    assert all(table[method] for method in methods), "an empty role set is no decision"


def test_the_processes_serve_with_their_role_tables() -> None:
    settings = load_settings({"MAHJONG_JWT_SECRET": "deny-by-default-test-secret-0123456789"})
    definitions: list[ServiceDefinition] = [
        MATCHMAKING_DEFINITION,
        table_definition(settings),
        SCORING_DEFINITION,
        ledger_definition(LedgerSettings()),
    ]
    assert [dict(d.method_roles) for d in definitions] == [dict(table) for table in SERVICE_ROLE_TABLES]
    assert [served_method_roles(d) for d in definitions] == [
        {**table, **DEAD_LETTER_ROLES} for table in SERVICE_ROLE_TABLES
    ]


def test_money_operations_need_ops_or_finance_and_nothing_else_needs_a_role() -> None:
    """Deposits, the ledger's reconcile and scoring's list of every instruction (what reconcile
    compares the postings with: every game's money) are ops/finance only; re-driving dead letters
    (and listing the re-drives) ops only."""
    needing_roles = {
        method: roles
        for table in ROLE_TABLES.values()
        for method, roles in table.items()
        if ANY_CALLER not in roles
    }
    assert needing_roles == {
        "/mahjong.v1.LedgerService/Deposit": OPERATIONS_ROLES,
        "/mahjong.v1.LedgerService/Reconcile": OPERATIONS_ROLES,
        "/mahjong.v1.ScoringService/ListSettlementInstructions": OPERATIONS_ROLES,
        "/mahjong.v1.DeadLetterService/RedriveDeadLetter": OPS_ONLY,
        "/mahjong.v1.DeadLetterService/ListRedrives": OPS_ONLY,
    }
    assert frozenset({"ops"}) == OPS_ONLY
