"""Which job a billing row belongs to, from the job labels `queries/jobs.sql` returns.

`jobs.sql` gives each row its job labels as one string, ``"k=v,k=v"`` sorted by key (label keys and
values cannot contain ``,`` or ``=``: Resource Manager label rules, and Kubernetes label values
allow only alphanumerics, ``-``, ``_`` and ``.``). The job is the value of the first configured key
present (`JobsConfig.label_keys` order); see `monitor.jobs.config` for why first-present and not
the tuple of every key.

>>> job_of(parse_labels("k8s-label/jobset.sigs.k8s.io/jobset-name=llm,run=r7"), ("job", "run"))
'r7'
>>> job_of(parse_labels("job=llm,run=r7"), ("job", "run"))
'llm'
>>> job_of({}, ("job",)) is None
True
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

__all__ = ["job_of", "parse_labels"]


@functools.lru_cache(maxsize=65536)
def _parse(raw: str) -> tuple[tuple[str, str], ...]:
    return tuple(tuple(part.split("=", 1)) for part in raw.split(",") if "=" in part)  # type: ignore[misc]


def parse_labels(raw: str | None) -> dict[str, str]:
    """``"k=v,k=v"`` as a dict (None or empty: no labels): `jobs.sql`'s job labels and the stored
    aggregates' `user_labels` (`hourly.sql`) alike. Parsed once per distinct string (label sets
    repeat across rows)."""
    return dict(_parse(raw)) if raw else {}


def job_of(labels: Mapping[str, str], keys: Sequence[str]) -> str | None:
    """The value of the first key of `keys` present with a non-empty value, else None."""
    for key in keys:
        if value := labels.get(key):
            return value
    return None
