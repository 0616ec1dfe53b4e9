"""A service process's health (what a load balancer and `mjctl run` read): a service that cannot
serve yet (`ServiceDefinition.serving_when`: a table engine before its first partition assignment)
says NOT_SERVING until it can, on the whole server and on each of its services."""

from __future__ import annotations

import pathlib
import threading
import time

from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.config import load_settings
from mahjong_platform.grpc_client import check_health
from mahjong_platform.grpc_server import ServiceRegistration, register_service
from mahjong_platform.service_runtime import ServiceDefinition, start_service

SECRET = "service-health-test-secret-long-enough-for-hs256"
LEDGER = "mahjong.v1.LedgerService"
SERVING_DEADLINE_SECONDS = 60.0


def _registrations(*_: object) -> list[ServiceRegistration]:
    return [
        register_service(
            ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
            ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
            ledger_service_pb2_grpc.LedgerServiceServicer(),  # type: ignore[abstract]  # only health is asked
        )
    ]


def test_a_service_that_cannot_serve_yet_says_not_serving_until_it_can(
    tmp_path: pathlib.Path,
    alembic_example_directory: pathlib.Path,
    kafka_bootstrap_servers: str,
    unique_prefix: str,
) -> None:
    can_serve = threading.Event()
    definition = ServiceDefinition(
        name="ledger",
        migrations=str(alembic_example_directory),
        registrations=_registrations,
        relays_outbox=False,
        asyncio_server=True,
        serving_when=lambda: can_serve,
    )
    settings = load_settings(
        {
            "MAHJONG_DATA_DIR": str(tmp_path),
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
            "MAHJONG_TOPIC_PREFIX": unique_prefix,
        }
    )
    running = start_service(definition, settings, address="127.0.0.1:0")
    try:
        target = f"127.0.0.1:{running.port}"
        assert not check_health(target) and not check_health(target, LEDGER)
        can_serve.set()
        deadline = time.monotonic() + SERVING_DEADLINE_SECONDS  # a bound on waiting, not a figure
        while not check_health(target):
            assert time.monotonic() < deadline, "never reported SERVING"
            time.sleep(0.05)
        assert check_health(target, LEDGER)
    finally:
        running.stop(0)
