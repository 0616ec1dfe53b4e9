"""A serving process collects cycles less often (`service_runtime.tune_garbage_collector`): what
it allocated to start is frozen out of later collections and the youngest generation waits for
`GC_YOUNG_THRESHOLD` allocations; cycles made afterwards are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from mahjong_platform.service_runtime import GC_YOUNG_THRESHOLD, tune_garbage_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_start_is_frozen_and_the_young_generation_waits_longer(restored_collector: None) -> None:
    older = gc.get_threshold()[1:]
    tune_garbage_collector()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *older)
    assert gc.get_freeze_count() > 0


def test_cycles_made_after_are_still_collected(restored_collector: None) -> None:
    tune_garbage_collector()
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    gc.collect()
    assert gone() is None
