"""What an audit of the finished-job message at run time found (helper 74), each pinned on the
daemon's own path (`announce_jobs` over `DetectorInputs`, a real SQLite state store, the real jobs
engine; hand-made hours as in tests/test_job_finished.py).

The audit ran the daemon's jobs (`Service`, the demo feeder) over 8 simulated days of seed 7 with
six jobs stopped mid-fleet and one restarted, and compared each message with `gpucost jobs` over the
same window, on the export as loaded then and once every late row had landed:

- every message was told 6 h after its job went quiet, while the export was still loading its
  hours (rows land 1 to 30 h after usage, some days later): each total was short of the job's,
  llm-pretrain $16,008.29 told of $17,211.17 (2,408 of 2,560 GPU-hours), finetune-mistral $3,221.52
  of $3,681.79, detector-train $671.01 of $729.34; a message cannot be taken back;
- detector-train, run again under the same label two days after it was told, was never told:
  a told run still in the read window (about six weeks) hid every later run of the name.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from alerts.job_message import announce_jobs, job_message_key
from alerts.outbox import ensure_schema
from monitor.billing_poll import provisional_since
from monitor.config import parse_config
from monitor.detectors.inputs import CostHour, DetectorInputs, HeldSpend
from monitor.state.store import first_start, open_store

D = Decimal
T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
CFG = parse_config({})  # [jobs] running_within_hours = 6, [billing] provisional_days = 3


def _cost(hour: int, usd: str, job: str | None, sub: str = "compute.gpu", **kw: object) -> CostHour:
    labels = {"job": job} if job else {}
    kw = {"instance": f"{job}-vm", "zone": "us-central1-a"} | kw
    return CostHour(hour=T0 + hour * H, project="ml", subcategory=sub, cost=D(usd), labels=labels, **kw)  # type: ignore[arg-type]


def _train(
    first: int, last: int, job: str = "llm", skip: tuple[int, ...] = (), **kw: object
) -> list[CostHour]:
    """$100/h of GPU and $5/h of inter-zone traffic per hour of [first, last] but `skip`."""
    out = []
    for h in range(first, last + 1):
        if h not in skip:
            out += [_cost(h, "100", job, **kw), _cost(h, "5", job, "network.inter_zone", **kw)]
    return out


def _rest(last: int) -> list[CostHour]:
    """The rest of the export billing on to hour `last` (no job), as it does."""
    return [_cost(h, "1", None, "storage.persistent_disk", instance=None) for h in range(-24, last + 1)]


def _bucket(last: int, job: str = "llm") -> list[CostHour]:
    """The job's checkpoints bucket: $0.50 every hour, whether the job runs or not."""
    return [_cost(h, "0.5", job, "storage.gcs", instance=None) for h in range(0, last + 1)]


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    ensure_schema(s)
    first_start(s, T0 - 24 * H)  # gpucost ran before the jobs: none of them is history
    yield s
    s.close()


def _tell(store, rows: list[CostHour], now_hour: int, **inputs: object) -> list[str]:
    """A detection run's announcement at hour `now_hour`, on the rows billed before it."""
    now = T0 + now_hour * H
    kw = {
        "window_start": T0 - 24 * H,
        "provisional_from": provisional_since(now, CFG.billing.provisional_days),
    }
    inp = DetectorInputs(window_end=now, hourly=[r for r in rows if r.hour < now], **(kw | inputs))  # type: ignore[arg-type]
    deps = SimpleNamespace(cfg=CFG, store=store, alert_deps=SimpleNamespace(default_channel="#ml"))
    return announce_jobs(deps, inp, now)


def _told(store) -> list[dict]:
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT text, blocks FROM alerts_outbox WHERE reason = 'job_finished' ORDER BY id"
        )
        return [{"text": r[0], "blocks": json.loads(r[1])} for r in rows]


def test_a_job_is_not_told_while_its_billing_is_provisional(store) -> None:
    """Hour 5 of the job lands late, as rows do (1 to 30 h after usage in the simulator, "usually
    within a day, 1.6 days observed": /work/shared/reference/gcp.md section 2). Quiet for 31 h
    against an export billed to hour 40, the job was told $945.00 of its $1,050.00."""
    billed = _train(0, 9, skip=(5,)) + _rest(40)
    assert _tell(store, billed, 41) == []  # its hours are still provisional: rows may come
    assert _tell(store, billed + _train(5, 5), 47) == []
    # provisional_days = 3: today and the two days before; hour 9 is settled from day 3 on
    (key,) = _tell(store, billed + _train(5, 5) + _rest(72), 73)
    assert key == job_message_key("llm", "#ml", T0 + 9 * H)
    (msg,) = _told(store)
    assert msg["text"] == "Job finished: llm: $1,050.00 over 10 h; one zone would save $50.00"
    assert _tell(store, billed + _train(5, 5) + _rest(90), 91) == [] and len(_told(store)) == 1


def test_no_provisional_days_tells_it_once_quiet(store) -> None:
    """`billing.provisional_days = 0`: nothing is provisional, quiet alone decides (as before)."""
    now = T0 + 17 * H
    (key,) = _tell(store, _train(0, 9) + _rest(16), 17, provisional_from=provisional_since(now, 0))
    assert key == job_message_key("llm", "#ml", T0 + 9 * H)


def test_a_run_after_a_told_run_is_told_with_its_own_figures(store, tmp_path: Path) -> None:
    """detector-train ran again two days after it was told: never told while the told run was in
    the read window. The later run is told once settled, with what it cost since the told message
    counted to (its checkpoints bucket billed on in between): the two add up to the job's spend.
    Each counts to the first provisional hour (the bucket's later hours may still grow)."""
    bucket = _bucket(200)
    first = _train(0, 9) + bucket + _rest(200)
    (a,) = _tell(store, first, 73)  # counted to hour 24: 2026-11-04 01:00 less 3 provisional days
    second = first + _train(100, 109, instance="llm-vm2")
    assert _tell(store, second, 120) == []  # quiet, not settled
    (b,) = _tell(store, second, 170)  # counted from hour 24 to hour 120
    assert a != b == job_message_key("llm", "#ml", T0 + 109 * H)
    told_a, told_b = _told(store)
    assert told_a["text"].startswith("Job finished: llm: $1,062.00 over 10 h;")  # $1,050 + 24 h of bucket
    assert told_b["text"].startswith("Job finished: llm: $1,098.00 over 10 h;")  # $1,050 + 96 h of bucket
    blocks = json.dumps(told_b["blocks"], ensure_ascii=False)
    assert "over 2026-11-05 04:00–2026-11-05 14:00 UTC (10 h)" in blocks and "started before" not in blocks
    # together: the job's spend before hour 120, each hour once (2 x $1,050 + 120 h x $0.50)
    assert sum(D(m["text"].split("$")[1].split(" ")[0].replace(",", "")) for m in (told_a, told_b)) == D(
        "2160.00"
    )
    assert _tell(store, second, 171) == []
    store.close()
    again = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")  # a restart: neither told again
    assert _tell(again, second, 172) == [] and len(_told(again)) == 2
    again.close()


def test_a_late_row_of_a_told_run_is_not_a_new_run(store) -> None:
    """A compute row of the told run's hours that lands days late (hour 12, after its last hour
    but before what its message counted to) is not a run of its own."""
    billed = _train(0, 9) + _bucket(200) + _rest(200)
    (_a,) = _tell(store, billed, 73)
    assert _tell(store, [*billed, _cost(12, "100", "llm")], 150) == [] and len(_told(store)) == 1


def test_a_job_billed_from_the_first_hour_held_may_have_started_before(store) -> None:
    """The read window starts before what the store holds (a store first filled this month; the
    baselines read further back): a job billed from the first hour held may have begun before it,
    and its total is only what was held."""
    (_key,) = _tell(store, _train(0, 9) + _rest(72), 73, held_spend=lambda: HeldSpend(T0))
    (msg,) = _told(store)
    assert "_(from 2026-11-01: it may have started before the billing held)_" in json.dumps(
        msg["blocks"], ensure_ascii=False
    )


def told_by_the_previous_release(store: Any, announced_at: str) -> None:
    """`llm`'s run of hours 0-9 told by the previous release (version 1 of `jobs_finished`, without
    what the message counted to) at `announced_at`."""
    from alerts.job_message import _MIGRATIONS

    store.migrate("jobs_finished", _MIGRATIONS[:1])
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO jobs_finished (job, receiver, first_hour, last_hour, idempotency_key, announced_at)"
            " VALUES ('llm', '#ml', '2026-11-01T00:00:00.000000Z', '2026-11-01T09:00:00.000000Z', 'k', ?)",
            (announced_at,),
        )


def test_a_run_told_by_the_previous_release_is_counted_to_when_it_was_told(store) -> None:
    """A store written by the previous release (version 1 of `jobs_finished`, without what the
    message counted to): the next run is counted from when the told one was announced."""
    told_by_the_previous_release(store, "2026-11-01T17:00:00.000000Z")
    billed = _train(0, 9) + _train(100, 109, instance="llm-vm2") + _bucket(200) + _rest(200)
    (_key,) = _tell(store, billed, 170)
    (msg,) = _told(store)  # $1,050 + the bucket's hours 17 to 119
    assert msg["text"] == "Job finished: llm: $1,101.50 over 10 h; one zone would save $50.00"
