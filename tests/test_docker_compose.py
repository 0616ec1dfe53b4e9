"""docker-compose.yml stays in step with the configuration code (unit: reads the file, runs nothing).

Checked: the file parses; Kafka, PostgreSQL and the four services are there with health checks; every
MAHJONG_* name it uses is a variable `load_settings` knows; each service gets its own PostgreSQL
database, which the init script creates; each service's environment loads into valid `Settings`
listening on the port that is published and health-checked.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from mahjong_platform.config import (
    KNOWN_VARIABLES,
    SERVICE_NAMES,
    database_url_variable,
    grpc_address_variable,
    load_settings,
)

COMPOSE_FILE = Path(__file__).resolve().parents[1] / "docker-compose.yml"
SERVICE_PORTS = {"matchmaking": 50051, "table": 50052, "scoring": 50053, "ledger": 50054}
GRPC_SERVICE_NAMES = {
    "matchmaking": "mahjong.v1.MatchmakingService",
    "table": "mahjong.v1.TableService",
    "scoring": "mahjong.v1.ScoringService",
    "ledger": "mahjong.v1.LedgerService",
}
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}; "$$" escapes a literal dollar.
INTERPOLATION = re.compile(
    r"(?<!\$)\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<operator>:?[-?])(?P<default>[^}]*))?\}"
)


@pytest.fixture(scope="module")
def compose_text() -> str:
    return COMPOSE_FILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def compose(compose_text: str) -> dict[str, Any]:
    document = yaml.safe_load(compose_text)
    assert isinstance(document, dict)
    return document


def interpolate_with_defaults(value: str) -> str:
    """What compose substitutes when the host sets none of the variables."""
    return INTERPOLATION.sub(
        lambda match: match["default"] if match["operator"] in (":-", "-") else "", value
    )


def service_environment(compose: dict[str, Any], service: str) -> dict[str, str]:
    environment = compose["services"][service]["environment"]
    assert isinstance(environment, dict), f"{service}: use the mapping form of environment"
    return {name: interpolate_with_defaults(str(value)) for name, value in environment.items()}


def test_kafka_postgres_and_the_four_services_are_defined(compose: dict[str, Any]) -> None:
    assert {"kafka", "postgres", *SERVICE_NAMES} <= set(compose["services"])
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:4.")


def test_every_container_has_a_health_check(compose: dict[str, Any]) -> None:
    for name in ("kafka", "postgres", *SERVICE_NAMES):
        healthcheck = compose["services"][name].get("healthcheck")
        assert healthcheck and healthcheck.get("test"), f"{name} has no healthcheck"


def test_every_mahjong_variable_used_is_known_to_the_configuration(compose_text: str) -> None:
    used = set(re.findall(r"\bMAHJONG_[A-Z0-9_]+\b", compose_text))
    assert used, "the compose file configures the services through MAHJONG_* variables"
    assert used - KNOWN_VARIABLES == set()


def test_services_are_built_from_the_repository_and_started_by_module(compose: dict[str, Any]) -> None:
    repository_root = COMPOSE_FILE.parent
    for service in SERVICE_NAMES:
        definition = compose["services"][service]
        build = definition["build"]
        context = build if isinstance(build, str) else build["context"]
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        assert (repository_root / context / dockerfile).is_file()
        assert definition["command"] == ["python", "-m", f"mahjong_{service}"]


def test_each_service_uses_its_own_postgresql_database(compose: dict[str, Any]) -> None:
    init_script = compose["configs"]["create-service-databases"]["content"]
    databases = set()
    for service in SERVICE_NAMES:
        url = service_environment(compose, service)[database_url_variable(service)]
        assert url.startswith("postgresql+psycopg://"), f"{service}: {url}"
        assert "@postgres:5432/" in url
        database = url.rsplit("/", 1)[1]
        assert f"CREATE DATABASE {database};" in init_script
        databases.add(database)
    assert len(databases) == len(SERVICE_NAMES)


def test_each_service_environment_loads_into_valid_settings(compose: dict[str, Any]) -> None:
    for service in SERVICE_NAMES:
        environment = service_environment(compose, service)
        settings = load_settings(environment)
        assert settings.kafka_bootstrap_servers == ("kafka:19092",)
        assert settings.log_format == "json"
        assert environment[grpc_address_variable(service)] == f"0.0.0.0:{SERVICE_PORTS[service]}"
        for other in SERVICE_NAMES:
            assert settings.grpc_target(other) == f"{other}:{SERVICE_PORTS[other]}"


def test_service_health_checks_probe_the_port_the_service_listens_on(compose: dict[str, Any]) -> None:
    for service in SERVICE_NAMES:
        definition = compose["services"][service]
        port = SERVICE_PORTS[service]
        assert definition["healthcheck"]["test"] == [
            "CMD",
            "python",
            "-m",
            "mahjong_platform.grpc_client",
            "health",
            f"127.0.0.1:{port}",
            GRPC_SERVICE_NAMES[service],
        ]
        assert f"127.0.0.1:{port}:{port}" in definition["ports"]


def docker_compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not docker_compose_available(), reason="the docker compose plugin is not installed")
def test_docker_compose_accepts_the_file() -> None:
    result = subprocess.run(
        ["docker", "compose", "--file", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_stack_requires_a_jwt_secret_from_the_host(compose_text: str, compose: dict[str, Any]) -> None:
    """Compose stops with the message unless the host sets MAHJONG_JWT_SECRET (no public default)."""
    for service in SERVICE_NAMES:
        value = compose["services"][service]["environment"]["MAHJONG_JWT_SECRET"]
        assert str(value).startswith("${MAHJONG_JWT_SECRET:?"), f"{service}: {value}"
    assert "MAHJONG_ENV" not in compose_text, "the stack runs as production"


def test_every_service_has_replicas_on_the_same_database_and_group(compose: dict[str, Any]) -> None:
    """README "Scale-out: replicas": `<service>-replica` runs `deploy.replicas` more processes of
    the service with its environment (database, consumer group), unpublished on the host; a table
    engine replica advertises its container's own address (the variable is left unset)."""
    for service in ("matchmaking", "table", "scoring", "ledger"):
        replica = compose["services"][f"{service}-replica"]
        assert replica["command"] == compose["services"][service]["command"]
        assert service_environment(compose, f"{service}-replica") == service_environment(compose, service)
        assert int(interpolate_with_defaults(str(replica["deploy"]["replicas"]))) >= 1
        assert "ports" not in replica
        assert replica["healthcheck"]["test"][-2:] == [
            f"127.0.0.1:{SERVICE_PORTS[service]}",
            GRPC_SERVICE_NAMES[service],
        ]
    assert "MAHJONG_TABLE_ADVERTISED_ADDRESS" not in service_environment(compose, "table-replica")
