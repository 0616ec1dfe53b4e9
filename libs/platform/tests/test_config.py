"""Settings from environment variables: defaults that run a fresh checkout, clear errors otherwise."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from mahjong_platform.config import (
    DEVELOPMENT_JWT_SECRET,
    KNOWN_VARIABLES,
    SERVICE_NAMES,
    ConfigurationError,
    Settings,
    check_secret_for_serving,
    database_url_variable,
    grpc_address_variable,
    grpc_target_variable,
    integer_setting,
    load_settings,
)

SECRET = "a-production-like-secret-of-at-least-32-bytes"


class RecordingEnvironment(dict[str, str]):
    """An environment that remembers every variable name looked up."""

    def __init__(self) -> None:
        super().__init__()
        self.looked_up: set[str] = set()

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        self.looked_up.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.looked_up.add(key)
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("load_settings must look variables up by name, not scan the environment")


def test_defaults_need_nothing_but_a_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings({})
    assert settings.data_directory == tmp_path / "data"
    assert settings.database_url("ledger") == f"sqlite:///{tmp_path}/data/ledger.sqlite3"
    assert settings.kafka_bootstrap_servers == ("127.0.0.1:9092",)
    assert settings.topic_prefix == ""
    assert settings.topic_partitions == 6
    assert settings.jwt_secret == DEVELOPMENT_JWT_SECRET
    assert settings.jwt_secret_is_development_default
    assert dict(settings.grpc_addresses) == {
        "matchmaking": "127.0.0.1:50051",
        "table": "127.0.0.1:50052",
        "scoring": "127.0.0.1:50053",
        "ledger": "127.0.0.1:50054",
    }
    assert settings.grpc_targets == settings.grpc_addresses
    assert (settings.log_level, settings.log_format) == ("INFO", "text")
    assert settings.retention_hours == 168


def test_every_variable_can_be_set(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "MAHJONG_DATA_DIR": str(tmp_path),
            "MAHJONG_TABLE_DATABASE_URL": "postgresql+psycopg://mahjong@db:5432/mahjong_table",
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9092, kafka-2:9092",
            "MAHJONG_TOPIC_PREFIX": "test-42.",
            "MAHJONG_TOPIC_PARTITIONS": "12",
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_LEDGER_GRPC_ADDRESS": "0.0.0.0:6000",
            "MAHJONG_SCORING_GRPC_TARGET": "scoring:50053",
            "MAHJONG_GRPC_MAX_WORKERS": "8",
            "MAHJONG_GRPC_SHUTDOWN_GRACE_SECONDS": "2.5",
            "MAHJONG_LOG_LEVEL": "debug",
            "MAHJONG_LOG_FORMAT": "JSON",
            "MAHJONG_RETENTION_HOURS": "0",
        }
    )
    assert settings.database_url("matchmaking") == f"sqlite:///{tmp_path}/matchmaking.sqlite3"
    assert settings.database_url("table") == "postgresql+psycopg://mahjong@db:5432/mahjong_table"
    assert settings.kafka_bootstrap_servers == ("kafka-1:9092", "kafka-2:9092")
    assert settings.topic_prefix == "test-42."
    assert settings.topic_partitions == 12
    assert settings.jwt_secret == SECRET
    assert not settings.jwt_secret_is_development_default
    assert settings.grpc_address("ledger") == "0.0.0.0:6000"
    assert settings.grpc_target("ledger") == "127.0.0.1:6000"
    assert settings.grpc_target("scoring") == "scoring:50053"
    assert (settings.grpc_max_workers, settings.grpc_shutdown_grace_seconds) == (8, 2.5)
    assert (settings.log_level, settings.log_format) == ("DEBUG", "json")
    assert settings.retention_hours == 0  # keep forever


def test_a_bare_postgresql_url_uses_the_installed_psycopg_driver() -> None:
    settings = load_settings({"MAHJONG_LEDGER_DATABASE_URL": "postgresql://mahjong:pw@db/mahjong_ledger"})
    assert settings.database_url("ledger") == "postgresql+psycopg://mahjong:pw@db/mahjong_ledger"


def test_an_empty_value_means_the_default() -> None:
    assert load_settings({"MAHJONG_TOPIC_PARTITIONS": " "}).topic_partitions == 6


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MAHJONG_TOPIC_PARTITIONS", "six"),
        ("MAHJONG_TOPIC_PARTITIONS", "0"),
        ("MAHJONG_TOPIC_PARTITIONS", "100000"),
        ("MAHJONG_TOPIC_PREFIX", "bad prefix/"),
        ("MAHJONG_KAFKA_BOOTSTRAP_SERVERS", "localhost"),
        ("MAHJONG_KAFKA_BOOTSTRAP_SERVERS", ","),
        ("MAHJONG_JWT_SECRET", "short"),
        ("MAHJONG_LEDGER_GRPC_ADDRESS", "127.0.0.1"),
        ("MAHJONG_TABLE_GRPC_ADDRESS", "127.0.0.1:70000"),
        ("MAHJONG_MATCHMAKING_GRPC_TARGET", "ledger"),
        ("MAHJONG_SCORING_DATABASE_URL", "mysql://db/scoring"),
        ("MAHJONG_GRPC_MAX_WORKERS", "-1"),
        ("MAHJONG_GRPC_SHUTDOWN_GRACE_SECONDS", "nan"),
        ("MAHJONG_LOG_LEVEL", "LOUD"),
        ("MAHJONG_LOG_FORMAT", "xml"),
        ("MAHJONG_RETENTION_HOURS", "-1"),
        ("MAHJONG_RETENTION_HOURS", "a week"),
        ("MAHJONG_RETENTION_HOURS", "100000"),
    ],
)
def test_an_invalid_value_is_an_error_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        load_settings({variable: value})


def test_a_bounded_integer_is_its_default_when_unset_or_blank_and_its_bounds_are_inclusive() -> None:
    def read(environ: dict[str, str]) -> int:
        return integer_setting(environ, "MAHJONG_SOME_COUNT", default=3, minimum=0, maximum=8)

    assert read({}) == 3
    assert read({"MAHJONG_SOME_COUNT": "  "}) == 3
    assert read({"MAHJONG_SOME_COUNT": "0"}) == 0
    assert read({"MAHJONG_SOME_COUNT": " 8 "}) == 8


@pytest.mark.parametrize("value", ["-1", "9", "three", "2.5", "0x3"])
def test_a_bounded_integer_out_of_its_range_names_the_variable_and_the_range(value: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        integer_setting({"MAHJONG_SOME_COUNT": value}, "MAHJONG_SOME_COUNT", default=3, minimum=0, maximum=8)
    assert str(raised.value) == f"MAHJONG_SOME_COUNT must be an integer from 0 to 8, got {value!r}"


def test_known_variables_are_exactly_the_variables_read() -> None:
    environment = RecordingEnvironment()
    load_settings(environment)
    assert environment.looked_up == KNOWN_VARIABLES
    for service in SERVICE_NAMES:
        assert {
            database_url_variable(service),
            grpc_address_variable(service),
            grpc_target_variable(service),
        } <= KNOWN_VARIABLES


def test_the_development_secret_is_announced_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        load_settings({})
    assert any("MAHJONG_JWT_SECRET is not set" in record.getMessage() for record in caplog.records)


def test_a_configured_secret_is_not_announced(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        load_settings({"MAHJONG_JWT_SECRET": SECRET})
    assert caplog.records == []


def test_secrets_never_appear_in_the_settings_representation() -> None:
    settings = load_settings(
        {
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_LEDGER_DATABASE_URL": "postgresql+psycopg://mahjong:hunter2-password@db/mahjong_ledger",
        }
    )
    representation = repr(settings)
    assert SECRET not in representation
    assert "hunter2" not in representation
    assert "postgresql+psycopg://mahjong:<redacted>@db/mahjong_ledger" in representation
    assert "topic_partitions=6" in representation


@pytest.mark.parametrize(
    "environment",
    [{}, {"MAHJONG_JWT_SECRET": ""}, {"MAHJONG_JWT_SECRET": DEVELOPMENT_JWT_SECRET}],
    ids=["unset", "empty", "the public default"],
)
def test_a_service_refuses_to_serve_on_a_missing_or_public_secret_outside_development(
    environment: dict[str, str],
) -> None:
    with pytest.raises(ConfigurationError, match="MAHJONG_JWT_SECRET"):
        check_secret_for_serving(load_settings(environment))
    with pytest.raises(ConfigurationError, match="MAHJONG_JWT_SECRET"):
        check_secret_for_serving(load_settings({**environment, "MAHJONG_ENV": "production"}))
    check_secret_for_serving(load_settings({**environment, "MAHJONG_ENV": "development"}))


def test_a_real_secret_serves_in_every_environment() -> None:
    for environment in ("production", "development"):
        check_secret_for_serving(load_settings({"MAHJONG_JWT_SECRET": SECRET, "MAHJONG_ENV": environment}))


def test_a_short_secret_is_refused_even_in_development() -> None:
    with pytest.raises(ConfigurationError, match="at least 32 bytes"):
        load_settings({"MAHJONG_JWT_SECRET": "too-short", "MAHJONG_ENV": "development"})


def test_an_unknown_environment_name_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="MAHJONG_ENV"):
        load_settings({"MAHJONG_ENV": "staging"})


def test_a_service_process_refuses_to_start_on_the_public_secret_before_touching_anything(
    tmp_path: Path,
) -> None:
    from mahjong_platform.grpc_server import ServiceRegistration
    from mahjong_platform.service_runtime import ServiceDefinition, start_service
    from mahjong_platform.topics import Topics
    from sqlalchemy import Engine

    def registrations(engine: Engine, settings: Settings, topics: Topics) -> list[ServiceRegistration]:
        raise AssertionError("nothing may start before the secret is checked")

    definition = ServiceDefinition(
        name="ledger", migrations="no-such-package:alembic", registrations=registrations
    )
    with pytest.raises(ConfigurationError, match="MAHJONG_ENV=development"):
        start_service(definition, load_settings({"MAHJONG_DATA_DIR": str(tmp_path)}))
    assert not any(tmp_path.iterdir()), "no database was created"
