"""Frozen dataclass instances built by the hundred thousand: through a mutable draft.

A frozen dataclass's `__init__` sets each field through `object.__setattr__`, most of its
construction time (3.6 us for `GpuHour`'s 24 fields, against 0.56 us for a draft). A draft is a
mutable twin with the same slots in the same order: it sets its slots directly, then becomes the
frozen class (identical layouts, so CPython allows the `__class__` change). The result is
indistinguishable: same type, equality, hash, repr, pickling and immutability.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, is_dataclass, make_dataclass
from typing import Any, TypeVar

__all__ = ["draft_class", "freeze"]

T = TypeVar("T")


def draft_class(cls: type, names: Sequence[str] | None = None) -> type:
    """The mutable twin of `cls`: its fields, in order, without defaults (pass every one,
    positionally: keywords cost as much as the frozen constructor).

    `cls` must be a frozen, slotted dataclass without `__post_init__` (a draft skips it). `names`:
    the field order the caller passes values in, checked here, so a field added to or moved in `cls`
    fails at import instead of shifting every value after it."""
    params = getattr(cls, "__dataclass_params__", None)
    if not is_dataclass(cls) or params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: drafts are for frozen dataclasses with slots=True")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: a draft would skip its __post_init__")
    if names is not None and tuple(names) != tuple(f.name for f in fields(cls)):
        raise TypeError(f"{cls.__name__}: fields are {[f.name for f in fields(cls)]}, the draft's caller passes {list(names)}")
    return make_dataclass(f"{cls.__name__}Draft", [(f.name, f.type) for f in fields(cls)], slots=True)


def freeze(drafts: list[Any], cls: type[T]) -> list[T]:
    """Turn drafts of `cls` (`draft_class(cls)` instances) into `cls` instances, in place."""
    for d in drafts:
        d.__class__ = cls
    return drafts
