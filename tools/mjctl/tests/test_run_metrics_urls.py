"""`mjctl run` prints where each service's Prometheus metrics are (issue 13)."""

from mahjong_platform.config import load_settings
from mjctl.run import metrics_urls


def test_run_prints_each_services_metrics_url_from_the_configuration() -> None:
    settings = load_settings({"MAHJONG_TABLE_METRICS_ADDRESS": "0.0.0.0:19152"})
    assert metrics_urls(settings, ["ledger", "table"]) == [
        "ledger http://127.0.0.1:9154/metrics",
        "table http://127.0.0.1:19152/metrics",
    ]
