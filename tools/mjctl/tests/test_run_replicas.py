"""``mjctl run --replicas N``: which processes start, and the ports each replica listens on (a table
engine replica advertises that address in the owner directory)."""

from mahjong_platform.config import load_settings
from mjctl.run import replica_environment, replica_names, service_of


def test_replicas_multiply_every_service() -> None:
    names = replica_names(["ledger", "scoring", "table", "matchmaking"], 3)
    assert names == [
        "ledger",
        "scoring",
        "table",
        "matchmaking",
        "ledger-2",
        "scoring-2",
        "table-2",
        "matchmaking-2",
        "ledger-3",
        "scoring-3",
        "table-3",
        "matchmaking-3",
    ]
    assert [service_of(name) for name in names[4:8]] == ["ledger", "scoring", "table", "matchmaking"]
    assert replica_names(["ledger", "table"], 1) == ["ledger", "table"]


def test_each_replica_listens_on_the_services_ports_shifted_by_a_hundred_per_replica() -> None:
    settings = load_settings(
        {
            "MAHJONG_SCORING_GRPC_ADDRESS": "127.0.0.1:51053",
            "MAHJONG_SCORING_METRICS_ADDRESS": "0.0.0.0:9153",
        }
    )
    assert replica_environment(settings, "scoring") == {}
    assert replica_environment(settings, "scoring-3") == {
        "MAHJONG_SCORING_GRPC_ADDRESS": "127.0.0.1:51253",
        "MAHJONG_SCORING_METRICS_ADDRESS": "0.0.0.0:9353",
    }
