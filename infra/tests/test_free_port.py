"""`free_port` never hands the same port out twice in one process (a test fixture once gave one
replica the same port for its gRPC and its metrics address, and the replica refused to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mahjong_infra import kafka


class _Probe:
    """A socket whose bind to port 0 gets the next port of a fixed list, as the OS might offer."""

    offers: Iterator[int]

    def __init__(self, *_arguments: object) -> None:
        self._port = 0

    def __enter__(self) -> _Probe:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def bind(self, _address: tuple[str, int]) -> None:
        self._port = next(self.offers)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)


def test_a_port_the_os_offers_again_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    _Probe.offers = iter([61001, 61001, 61001, 61002])
    monkeypatch.setattr(kafka.socket, "socket", _Probe)
    monkeypatch.setattr(kafka, "_HANDED_OUT", set())

    assert [kafka.free_port(), kafka.free_port()] == [61001, 61002]


def test_a_real_port_is_free_to_bind() -> None:
    port = kafka.free_port()
    with kafka.socket.socket(kafka.socket.AF_INET, kafka.socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", port))
    assert port != kafka.free_port()
