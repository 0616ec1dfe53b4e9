"""The engine's fast constructors and copies of frozen values (`core.frozen.fast_init`,
`core.state.replaced`) build exactly what the dataclass machinery builds."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest
from mahjong_table.core import events
from mahjong_table.core.frozen import fast_init
from mahjong_table.core.state import MEMO, copier_setting, replaced
from mahjong_table.sichuan.state import PlayerState


@dataclass(frozen=True, slots=True)
class _Plain:
    seat: int
    tile: str
    automatic: bool = False
    tags: tuple[str, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class _Fast:
    seat: int
    tile: str
    automatic: bool = False
    tags: tuple[str, ...] = ()


def _fields(value: object) -> tuple[object, ...]:
    return tuple(getattr(value, item.name) for item in dataclasses.fields(value))  # type: ignore[arg-type]


def test_fast_init_takes_the_dataclass_parameters_and_defaults() -> None:
    assert _fields(_Fast(1, "5p")) == _fields(_Plain(1, "5p")) == (1, "5p", False, ())
    assert _fields(_Fast(2, "1m", True, ("x",))) == (2, "1m", True, ("x",))
    assert _fields(_Fast(tile="9s", seat=3, automatic=True)) == (3, "9s", True, ())
    with pytest.raises(TypeError):
        _Fast(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Fast(1, "5p", colour="red")  # type: ignore[call-arg]


def test_a_fast_init_value_is_still_frozen_equal_hashable_and_picklable() -> None:
    value = _Fast(1, "5p")
    assert value == _Fast(1, "5p") and hash(value) == hash(_Fast(1, "5p")) and value != _Fast(1, "6p")
    assert repr(value) == "_Fast(seat=1, tile='5p', automatic=False, tags=())"
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.seat = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(value)) == value
    assert dataclasses.replace(value, tile="7s") == _Fast(1, "7s")


def test_the_events_keep_their_dataclass_constructors_behaviour() -> None:
    drawn = events.TileDrawn(2, "3s", True, 17)
    assert (drawn.seat, drawn.tile, drawn.from_tail, drawn.wall_remaining) == (2, "3s", True, 17)
    passed = events.ClaimPassed(1, "4m")
    assert (passed.passed_win, passed.passed_win_multiplier, passed.automatic) == (False, 0, False)
    assert events.KongDeclared(0, "1p", "concealed").from_seat == events.NO_SEAT


def test_fast_init_refuses_what_it_cannot_rebuild_exactly() -> None:
    @dataclass(frozen=True, slots=True)
    class WithPostInit:
        seat: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class WithFactory:
        tags: list[str] = field(default_factory=list)

    @dataclass(slots=True)
    class NotFrozen:
        seat: int

    for cls in (WithPostInit, WithFactory, NotFrozen):
        with pytest.raises(TypeError):
            fast_init(cls)


def test_replaced_copies_every_field_changes_the_named_ones_and_empties_the_memo() -> None:
    player = PlayerState("p1", discards=(3, 4), missing_suit=2, draw_count=5)
    player.derived["waits"] = frozenset({7})
    copy = replaced(player, draw_count=6, won=True)
    assert type(copy) is PlayerState
    assert copy == dataclasses.replace(player, draw_count=6, won=True)
    assert copy.derived == {} and player.derived == {"waits": frozenset({7})}
    assert replaced(player) == player and replaced(player) is not player
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.won = False  # type: ignore[misc]
    with pytest.raises(AttributeError):
        replaced(player, colour="red")
    assert [item.name for item in dataclasses.fields(PlayerState) if item.metadata == MEMO] == ["derived"]


def test_a_copier_for_fixed_changes_gives_what_replaced_gives() -> None:
    player = PlayerState("p2", concealed=(1,) * 13 + (0,) * 14, draw_count=2, skip_win_multiplier=4)
    player.derived["waits"] = frozenset()
    after_draw = copier_setting(PlayerState, "draw_count", "skip_win_multiplier")
    copy = after_draw(player, draw_count=3, skip_win_multiplier=0)
    assert type(copy) is PlayerState and copy.derived == {}
    assert copy == replaced(player, draw_count=3, skip_win_multiplier=0)
    assert copier_setting(PlayerState)(player) == player
    with pytest.raises(TypeError):
        after_draw(player, draw_count=3)  # every named field is given
    with pytest.raises(AttributeError):
        copier_setting(PlayerState, "colour")
