"""`mjctl run` starts its broker's KRaft controller on a free port, not Kafka's fixed 9093."""

import socket
from pathlib import Path

from mjctl.run import kafka_controller_port


def test_the_controller_port_is_not_one_another_process_already_listens_on(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        (tmp_path / "server.properties").write_text(
            f"controller.quorum.bootstrap.servers=127.0.0.1:{taken_port}\n"
        )
        port = kafka_controller_port(tmp_path, "127.0.0.1", 19092)
    assert port not in (taken_port, 19092)


def test_a_fresh_data_directory_gets_a_free_port_rather_than_kafkas_default(tmp_path: Path) -> None:
    with socket.socket() as default_holder:
        default_holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            default_holder.bind(("127.0.0.1", 9093))
            default_holder.listen()
        except OSError:
            pass  # another broker already holds 9093: the case this guards against
        port = kafka_controller_port(tmp_path, "127.0.0.1", 19092)
    assert port not in (9093, 19092)


def test_a_later_run_reuses_the_controller_port_its_storage_was_formatted_with(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        recorded = probe.getsockname()[1]
    (tmp_path / "server.properties").write_text(
        f"node.id=1\ncontroller.quorum.bootstrap.servers=127.0.0.1:{recorded}\n"
    )
    assert kafka_controller_port(tmp_path, "127.0.0.1", 19092) == recorded
