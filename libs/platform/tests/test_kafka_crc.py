"""kafka-python checks each fetched record batch's CRC-32C with the `crc32c` C module (a platform
dependency), not its pure-Python fallback, which cost about a tenth of a consumer's CPU."""

from __future__ import annotations

import crc32c
from kafka.record import _crc32c, util


def test_kafka_python_uses_the_c_crc32c() -> None:
    assert util.calc_crc32c.__defaults__ == (crc32c.crc32c,)


def test_the_c_crc32c_agrees_with_kafka_pythons_own() -> None:
    data = bytes(range(256)) * 17
    assert crc32c.crc32c(data) == _crc32c.crc(data) == util.calc_crc32c(memoryview(data))
