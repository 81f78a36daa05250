"""`monitor.frozen`: drafts become frozen dataclass instances indistinguishable from built ones."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, dataclass, fields, replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from monitor.detectors.inputs import GpuHour
from monitor.frozen import draft_class, freeze

T0 = datetime(2026, 11, 2, tzinfo=UTC)


def test_a_drafted_gpu_hour_is_a_gpu_hour_in_every_respect() -> None:
    values = {f.name: getattr(GpuHour(T0, "p", "vm", "H100", 8, Decimal(8), Decimal(88), 3.5), f.name)
              for f in fields(GpuHour)}  # fmt: skip
    values |= {"labels": {"team": "llm"}, "namespaces": {"a": Decimal(1)}, "signal": "sm_active"}
    built = GpuHour(**values)
    drafts = [draft_class(GpuHour)(*values.values())]
    (made,) = freeze(drafts, GpuHour)
    assert type(made) is GpuHour and made is drafts[0]
    assert made == built and repr(made) == repr(built) and pickle.loads(pickle.dumps(made)) == built
    assert replace(made, project="q").project == "q" and made.idle_cost_gross == built.idle_cost_gross
    with pytest.raises(FrozenInstanceError):
        made.project = "q"  # type: ignore[misc]


def test_a_caller_passing_fields_in_another_order_fails_at_once() -> None:
    names = [f.name for f in fields(GpuHour)]
    draft_class(GpuHour, names)
    with pytest.raises(TypeError, match="the draft's caller passes"):
        draft_class(GpuHour, [names[1], names[0], *names[2:]])


def test_drafts_are_only_for_frozen_slotted_dataclasses_without_post_init() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    for cls in (Mutable, NoSlots, Checked, int):
        with pytest.raises(TypeError):
            draft_class(cls)
