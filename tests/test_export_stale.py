"""An export that stops arriving is told once, through the outbox, and its age is on /metrics.

Seed 23's daemon, run on 2026-12-05 over an export whose last load was 2026-11-20, polled without a
word: every poll succeeded (early in a month the poll also reads the previous month's partitions, so
"no export rows in scope" never fired) and the digest said "no hours billed yet".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts.export_stale import is_stale, tell_stale_export
from alerts.outbox import ensure_schema
from monitor.billing_poll import latest_export
from monitor.state.store import open_store

T = datetime(2026, 11, 20, 5, tzinfo=UTC)
H = timedelta(hours=1)


def _outbox(store) -> list[tuple]:
    ensure_schema(store)
    with store.transaction() as conn:
        return conn.execute("SELECT idempotency_key, reason, channel, text FROM alerts_outbox").fetchall()


def test_stale_only_past_the_threshold_and_never_when_off() -> None:
    assert not is_stale(T, T + 48 * H, 48 * H) and is_stale(T, T + 49 * H, 48 * H)
    assert not is_stale(T, T + 1000 * H, timedelta(0)) and not is_stale(None, T, 48 * H)


def test_one_message_per_stale_episode(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    told = dict(stale_after=48 * H, receiver="#gpucost", table="p.d.gcp_billing_export_v1_X")
    assert tell_stale_export(store, latest_export=T, now=T + 47 * H, **told) is None
    key = tell_stale_export(store, latest_export=T, now=T + 49 * H, **told)
    assert key is not None and tell_stale_export(store, latest_export=T, now=T + 60 * H, **told) is None
    ((k, reason, channel, text),) = _outbox(store)
    assert (k, reason, channel) == (key, "export_stale", "#gpucost")
    assert "has loaded nothing since 2026-11-20 05:00 UTC (49 h ago)" in text and "p.d.gcp_billing" in text
    # it resumed, then stopped again: a new episode
    assert tell_stale_export(store, latest_export=T + 100 * H, now=T + 150 * H, **told) is not None
    assert len(_outbox(store)) == 2
    store.close()


def _as_bigquery(deps):
    """A daemon on a DuckDB copy of the export, configured as BigQuery (the same engine answers)."""
    billing = deps.cfg.billing.model_copy(
        update={"source": "bigquery", "table": "p.d.gcp_billing_export_v1_X"}
    )
    deps.cfg = deps.cfg.model_copy(update={"billing": billing})
    return deps


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.shared_fleets import shared_fleet

    return shared_fleet(tmp_path_factory, 7, 2)[0]


@pytest.mark.parametrize("hours", [0, 48])
def test_the_daemons_poll_tells_a_stale_export_once(tmp_path: Path, fleet: Path, hours: int) -> None:
    import duckdb

    from monitor.cycle import run_billing_poll
    from tests.test_digest_jobs import daemon_on_fleet

    export = fleet / "billing" / "export.parquet"
    ((last,),) = (
        duckdb.connect().execute("SELECT max(export_time) FROM read_parquet(?)", [str(export)]).fetchall()
    )
    last = last.astimezone(UTC)
    deps = daemon_on_fleet(tmp_path, fleet, billing={"stale_after_hours": hours})
    run_billing_poll(deps, last + H)
    assert latest_export(deps.aggregates) == last and not _outbox(deps.store)  # fresh: nothing
    run_billing_poll(deps, last + 3 * 24 * H)  # a local DuckDB copy is a snapshot: never alerted on
    assert not _outbox(deps.store)
    # as BigQuery (the same engine answers): the stopped export is told once
    billing = deps.cfg.billing.model_copy(
        update={"source": "bigquery", "table": "p.d.gcp_billing_export_v1_X"}
    )
    deps.cfg = deps.cfg.model_copy(update={"billing": billing})
    later = last + 3 * 24 * H
    run_billing_poll(deps, later)
    run_billing_poll(deps, later + H)  # the same episode: not told again
    rows = _outbox(deps.store)
    assert [r[1] for r in rows] == (["export_stale"] if hours else [])
    # computed at the scrape, from the clock: it grows while polls fail
    deps.clock.advance(later + 5 * H - deps.clock.now())
    age = deps.metrics.registry.get_sample_value("gpucost_billing_export_age_seconds")
    assert age == (77 * H).total_seconds()
    deps.store.close()


def test_the_age_is_unknown_before_a_poll_saw_a_load() -> None:
    import math

    from monitor.metrics import Metrics

    metrics = Metrics.create()
    assert math.isnan(metrics.registry.get_sample_value("gpucost_billing_export_age_seconds"))


def test_an_export_that_never_loaded_is_told_once_from_the_first_start(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    told = dict(stale_after=48 * H, receiver="#gpucost", table="p.d.gcp_billing_export_v1_X")
    assert tell_stale_export(store, latest_export=None, now=T + 49 * H, **told) is None  # since when?
    assert tell_stale_export(store, latest_export=None, watched_since=T, now=T + 47 * H, **told) is None
    key = tell_stale_export(store, latest_export=None, watched_since=T, now=T + 49 * H, **told)
    assert key is not None
    assert tell_stale_export(store, latest_export=None, watched_since=T, now=T + 60 * H, **told) is None
    ((_, reason, _, text),) = _outbox(store)
    assert reason == "export_stale"
    assert (
        "has loaded no rows at all since gpucost started watching it on 2026-11-20 05:00 UTC (49 h ago)"
        in text
    )
    # a first load, then silence: a stale episode of its own
    assert tell_stale_export(store, latest_export=T + 50 * H, watched_since=T, now=T + 99 * H, **told)
    assert len(_outbox(store)) == 2
    store.close()


def test_the_daemons_poll_of_a_bigquery_export_without_a_load_tells_it_once(
    tmp_path: Path, fleet: Path
) -> None:
    """A table the export never wrote to in the poll's scope (turned on for another table, or an
    old copy): every poll succeeds on it, and before this nothing was said, ever (`latest_export`
    is None). Seed 7's rows end in November 2026; polled from June 2027 none is in scope. It is
    measured from the daemon's first start; a poll records none (a `gpucost digest` or a one-shot
    run before the daemon would have moved the first start's history cut)."""
    from monitor.cycle import run_billing_poll
    from monitor.state.store import first_start, recorded_first_start
    from tests.test_digest_jobs import daemon_on_fleet

    deps = _as_bigquery(daemon_on_fleet(tmp_path, fleet, billing={"stale_after_hours": 48}))
    start = datetime(2027, 6, 1, 5, tzinfo=UTC)
    run_billing_poll(deps, start + 100 * H)  # no first start recorded: nothing to measure from
    assert recorded_first_start(deps.store) is None and not _outbox(deps.store)
    first_start(deps.store, start)  # the daemon records it when it starts
    for hours in (0, 47, 49, 50):
        run_billing_poll(deps, start + hours * H)
        assert latest_export(deps.aggregates) is None
        assert len(_outbox(deps.store)) == (hours >= 49)
    ((_, _, channel, text),) = _outbox(deps.store)
    assert channel == deps.alert_deps.default_channel
    assert "since gpucost started watching it on 2027-06-01 05:00 UTC (49 h ago)" in text
    deps.store.close()


def test_an_export_stopped_past_retention_is_not_told_it_never_loaded(tmp_path: Path, fleet: Path) -> None:
    """Retention prunes the partitions the latest load is read from: an export stopped for longer
    than `state.retention_days` read as never loaded, and the channel was told so a second time.
    The newest load a poll saw is kept in the state store."""
    import duckdb

    from monitor.billing_poll import prune
    from monitor.cycle import run_billing_poll
    from monitor.state.store import export_seen, first_start
    from tests.test_digest_jobs import daemon_on_fleet

    export = fleet / "billing" / "export.parquet"
    ((last,),) = (
        duckdb.connect().execute("SELECT max(export_time) FROM read_parquet(?)", [str(export)]).fetchall()
    )
    last = last.astimezone(UTC)
    deps = _as_bigquery(daemon_on_fleet(tmp_path, fleet, billing={"stale_after_hours": 48}))
    first_start(deps.store, last)
    run_billing_poll(deps, last + H)
    assert export_seen(deps.store, None) == last
    run_billing_poll(deps, last + 3 * 24 * H)  # stale: told once
    later = datetime(2027, 6, 1, tzinfo=UTC)
    prune(deps.aggregates, later - timedelta(days=90))  # retention, months later
    assert latest_export(deps.aggregates) is None
    run_billing_poll(deps, later)
    ((_, reason, _, text),) = _outbox(deps.store)
    assert reason == "export_stale" and "loaded no rows at all" not in text
    deps.store.close()
