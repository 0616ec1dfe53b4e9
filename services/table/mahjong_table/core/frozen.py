"""`fast_init`: a faster `__init__` for the engine's frozen slotted dataclasses (events, commands,
claim windows, legal actions), which the hot path builds on every command.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__(self,
name, value)` (its own `__setattr__` refuses), a generic call that looks the name up each time;
`fast_init` builds the same `__init__` (same parameters, same defaults, same order) setting each
slot through its own descriptor, about twice as fast. Equality, hashing, `repr`, `replace` and
pickling are the dataclass's, unchanged.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

_Class = TypeVar("_Class", bound=type)


def fast_init(cls: _Class) -> _Class:
    """Give the frozen slotted dataclass `cls` the descriptor-setting `__init__` (apply it above
    `@dataclass(frozen=True, slots=True)`). Refuses a class it cannot rebuild exactly: not a
    frozen slotted dataclass, `__post_init__`, keyword-only fields, or a default factory on a
    field `__init__` takes."""
    params = getattr(cls, "__dataclass_params__", None)
    if not is_dataclass(cls) or params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__: keep the dataclass __init__")
    namespace: dict[str, Any] = {}
    parameters: list[str] = []
    body: list[str] = []
    for index, item in enumerate(fields(cls)):
        if item.kw_only:
            raise TypeError(f"{cls.__name__}.{item.name} is keyword-only: keep the dataclass __init__")
        namespace[f"_set_{index}"] = getattr(cls, item.name).__set__
        if not item.init:
            if item.default_factory is not MISSING:
                namespace[f"_factory_{index}"] = item.default_factory
                body.append(f"    _set_{index}(self, _factory_{index}())")
            elif item.default is not MISSING:
                namespace[f"_default_{index}"] = item.default
                body.append(f"    _set_{index}(self, _default_{index})")
            continue
        if item.default_factory is not MISSING:
            raise TypeError(f"{cls.__name__}.{item.name} has a default factory: keep the dataclass __init__")
        if item.default is not MISSING:
            namespace[f"_default_{index}"] = item.default
            parameters.append(f"{item.name}=_default_{index}")
        else:
            parameters.append(item.name)
        body.append(f"    _set_{index}(self, {item.name})")
    source = f"def __init__(self, {', '.join(parameters)}):\n" + ("\n".join(body) or "    pass")
    exec(source, namespace)  # built above from the class's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    type.__setattr__(cls, "__init__", init)
    return cls


__all__ = ["fast_init"]
