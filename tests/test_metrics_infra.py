"""The Prometheus and Grafana files in infra/ stay in step with the services (unit: reads files).

Checked: docker-compose runs prometheus and grafana with the files of infra/ mounted; each service
listens for metrics (MAHJONG_<SERVICE>_METRICS_ADDRESS) on the port that is published and that
Prometheus scrapes; Grafana's data source is that Prometheus; every metric the dashboard queries is
one the services export, so a renamed metric cannot leave a dashboard panel silently empty.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from mahjong_ledger.metrics import instrument as instrument_ledger
from mahjong_platform.config import (
    SERVICE_NAMES,
    grpc_address_variable,
    load_settings,
    metrics_address_variable,
)
from mahjong_platform.metrics import ServiceMetrics, outbox_gauges
from mahjong_table.metrics import OPEN_TABLES

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = ROOT / "infra/prometheus/prometheus.yml"
DASHBOARD = ROOT / "infra/grafana/dashboards/mahjong.json"
DATASOURCES = ROOT / "infra/grafana/provisioning/datasources/prometheus.yml"
DASHBOARD_PROVIDERS = ROOT / "infra/grafana/provisioning/dashboards/mahjong.yml"


def load_yaml(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def exported_metric_names() -> set[str]:
    """Every sample name the services can export (families without samples yet included)."""
    metrics = ServiceMetrics("every-service")
    instrument_ledger(metrics, engine=None)  # type: ignore[arg-type]  # registers families only
    names = {gauge.name for gauge in [*outbox_gauges(), OPEN_TABLES]}
    for family in metrics.registry.collect():
        kind = family.type
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(kind, [""])
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_compose_runs_prometheus_and_grafana_with_the_files_of_infra(compose: dict[str, Any]) -> None:
    services = compose["services"]
    prometheus_mounts = services["prometheus"]["volumes"]
    assert "./infra/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus_mounts
    grafana_mounts = services["grafana"]["volumes"]
    assert "./infra/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana_mounts
    assert "./infra/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana_mounts
    for mount in [*prometheus_mounts, *grafana_mounts]:
        source = mount.split(":", 1)[0]
        if source.startswith("./"):
            assert (ROOT / source).exists(), mount
    for name in ("prometheus", "grafana"):
        assert services[name]["healthcheck"]["test"]


def test_prometheus_scrapes_each_service_on_the_port_it_listens_on_and_publishes(
    compose: dict[str, Any],
) -> None:
    jobs = {job["job_name"]: job for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]}
    assert set(jobs) == set(SERVICE_NAMES)
    for service in SERVICE_NAMES:
        environment = {key: str(value) for key, value in compose["services"][service]["environment"].items()}
        variables = (metrics_address_variable(service), grpc_address_variable(service))
        address = load_settings({name: environment[name] for name in variables}).metrics_address(service)
        host, _, port = address.rpartition(":")
        assert host == "0.0.0.0", f"{service} must listen for Prometheus on every interface"
        assert jobs[service]["static_configs"] == [{"targets": [f"{service}:{port}"]}]
        assert f"127.0.0.1:{port}:{port}" in compose["services"][service]["ports"]


def test_grafana_reads_the_compose_prometheus_and_loads_the_dashboard_folder(compose: dict[str, Any]) -> None:
    (datasource,) = load_yaml(DATASOURCES)["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in compose["services"]["prometheus"]["ports"]
    (provider,) = load_yaml(DASHBOARD_PROVIDERS)["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_every_dashboard_query_uses_metrics_the_services_export() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    datasource_uid = load_yaml(DATASOURCES)["datasources"][0]["uid"]
    expressions = [
        target["expr"]
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]
    assert len(expressions) >= 10
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == datasource_uid, panel["title"]
    used = {name for expression in expressions for name in re.findall(r"\bmahjong_[a-z_]+\b", expression)}
    assert used - exported_metric_names() == set()
    # The list: RPC latency and counts, events, outbox, lag, dead letters, settlement, money.
    for wanted in (
        "mahjong_grpc_server_handling_seconds_bucket",
        "mahjong_grpc_server_handled_total",
        "mahjong_events_appended_total",
        "mahjong_outbox_unsent_messages",
        "mahjong_outbox_oldest_unsent_age_seconds",
        "mahjong_consumer_lag_messages",
        "mahjong_consumer_events_total",
        "mahjong_consumer_dead_letters_total",
        "mahjong_settlement_lag_seconds_bucket",
        "mahjong_ledger_postings_total",
        "mahjong_ledger_beans_moved_total",
        "mahjong_table_open_tables",
        "mahjong_grpc_server_open_streams",
    ):
        assert wanted in used, wanted
