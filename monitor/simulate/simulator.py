"""`FleetSimulator`: the fleet's billing rows, export deliveries, utilization and ground truth over
one window; `write_fleet` puts them on disk.

Every entity-hour is rendered independently (keyed randomness), so the demo daemon can ask for
just the rows exported in the last few minutes of a fast clock and get exactly the rows a full
run would have written with those export times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.errors import UserError
from monitor.simulate.compute import Ctx
from monitor.simulate.delivery import MAX_LATENESS, Delivery
from monitor.simulate.export import ExportWriter, open_gzip
from monitor.simulate.jobs import jobs_truth
from monitor.simulate.layout import build_fleet
from monitor.simulate.truth import Tally, fleet_inventory, hidden_costs, row_usd_micros
from monitor.simulate.utilization import utilization_series, write_page
from monitor.timeutil import to_iso

if TYPE_CHECKING:
    from monitor.progress import Progress

__all__ = ["BILLING_FILES", "BILLING_FORMATS", "DEFAULT_START", "FleetSimulator", "write_fleet"]

DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)
#: The billing export's files under `billing/`: the same rows in the two formats users export to.
BILLING_FILES = {"ndjson": "export.ndjson.gz", "parquet": "export.parquet"}
BILLING_FORMATS = tuple(BILLING_FILES)
HOUR = timedelta(hours=1)


class FleetSimulator:
    """A deterministic GPU fleet on Google Cloud over `days` days from `start` (UTC, hour-aligned)."""

    def __init__(self, seed: int, start: datetime, days: int, scale: int = 1, inject: bool = True):
        if start.tzinfo is None:
            raise UserError(f"simulate: start {start.isoformat()} has no time zone; give it in UTC (…Z)")
        if days < 1 or scale < 1:
            raise UserError(f"simulate: days ({days}) and scale ({scale}) must be at least 1")
        start = start.astimezone(UTC)
        if start != start.replace(minute=0, second=0, microsecond=0):
            raise UserError(f"simulate: start {to_iso(start)} must be on the hour (usage windows are hourly)")
        self.seed, self.start, self.days, self.scale, self.inject = seed, start, days, scale, inject
        self.hours = days * 24
        self.end = start + timedelta(days=days)
        self.fleet = build_fleet(seed, self.hours, scale, inject)
        self.ctx = Ctx(seed, start, Delivery(seed, start))
        #: Each usage hour's entity export times, kept while `rows_exported_between` may visit the
        #: hour again: a feed moving forward step by step (the demo, the soak) visits every hour of
        #: the lateness span at each step, and three keyed hashes per entity-hour were a third of it.
        self._export_times: dict[int, list[datetime]] = {}

    def hour_rows(self, h: int) -> Iterator[dict]:
        """Every row of usage hour h, export_time set."""
        return self._hour_rows(h, None)

    def _hour_rows(
        self, h: int, exported: tuple[datetime, datetime] | None, whens: Sequence[datetime] | None = None
    ) -> Iterator[dict]:
        """Rows of hour h; with `exported` = (t0, t1], only those loaded then. An entity-hour's
        export time is known before its rows are rendered, so skipped ones cost one hash.
        `whens`: the entities' export times of the hour, when already known."""
        if whens is None:
            whens = self._hour_export_times(h)
        for entity, when in zip(self.fleet.entities, whens, strict=True):
            corrected = getattr(entity, "correction_hour", None) == h
            if exported is not None and not corrected and not exported[0] < when <= exported[1]:
                continue
            for row in entity.rows(self.ctx, h):
                if row["export_time"] is None:
                    row["export_time"] = when
                if exported is None or exported[0] < row["export_time"] <= exported[1]:
                    yield row

    def billing_rows(self) -> Iterator[dict]:
        for h in range(self.hours):
            yield from self._hour_rows(h, None)

    def _hour_export_times(self, h: int) -> list[datetime]:
        usage_end = self.ctx.hour_start(h + 1)
        return [self.ctx.delivery.export_time(e.key, h, usage_end) for e in self.fleet.entities]

    def rows_exported_between(self, t0: datetime, t1: datetime) -> Iterator[dict]:
        """Rows with t0 < export_time <= t1 (only usage hours that can land then are visited).
        Export times of the hours visited are kept for the next call; those of hours before this
        call's first are dropped (a feed moves forward; one moving back computes them again)."""
        lo = max(0, math.floor((t0 - MAX_LATENESS - self.start) / HOUR))
        hi = min(self.hours, math.ceil((t1 - self.start) / HOUR))
        cache = self._export_times
        for old in [k for k in cache if k < lo]:
            del cache[old]
        for h in range(lo, hi):
            whens = cache.get(h)
            if whens is None:
                whens = cache[h] = self._hour_export_times(h)
            yield from self._hour_rows(h, (t0, t1), whens)

    def last_export_time(self) -> datetime:
        """An upper bound of every export_time of the window (late rows included)."""
        return self.end + MAX_LATENESS + HOUR * 4

    def utilization_series(self, t0: datetime, t1: datetime) -> list[dict]:
        return utilization_series(self.ctx, self.fleet.vms, self.hours, t0, t1)

    def _row_sum(self, entities: Iterable[Any], hours: range, keep) -> int:
        return sum(
            row_usd_micros(row) for e in entities for h in hours for row in e.rows(self.ctx, h) if keep(row)
        )

    def ground_truth(self, tally: Tally | None = None) -> dict:
        """Hidden costs with exact impacts, totals over every row, the window, per-job truth. Pass the `Tally` of a
        pass already made over `billing_rows()` to avoid rendering the rows twice."""
        if tally is None:
            tally = Tally()
            for row in self.billing_rows():
                tally.add(row)
        return {
            "seed": self.seed,
            "scale": self.scale,
            "injected": self.inject,
            "window": {"start": to_iso(self.start), "end": to_iso(self.end)},
            "totals": tally.totals(),
            "hidden_costs": hidden_costs(self.fleet, self.start, tally, self._row_sum),
            "fleet": fleet_inventory(self.fleet),
            "jobs": jobs_truth(self.fleet, self.seed, lambda e, h: e.rows(self.ctx, h)),
        }


def _drop_stale_days(out_dir: Path, days: set[date]) -> None:
    """Remove the utilization day files the last `simulate` into `out_dir` wrote (its
    ground_truth.json's window) that this run does not write: re-simulated with fewer days, the
    old files stayed, and analyses read them with the new export. Nothing else is touched (a
    day file of another run or tool, without the last run's window, stays)."""
    try:
        window = json.loads((out_dir / "ground_truth.json").read_text(encoding="utf-8"))["window"]
        first, end = (datetime.fromisoformat(window[k]).date() for k in ("start", "end"))
    except (OSError, ValueError, KeyError, TypeError):
        return
    for n in range((end - first).days):
        day = first + timedelta(days=n)
        if day not in days:
            (out_dir / "utilization" / f"{day.isoformat()}.json.gz").unlink(missing_ok=True)


def write_fleet(
    out_dir: Path,
    seed: int,
    days: int,
    scale: int = 1,
    start: datetime | None = None,
    inject: bool = True,
    *,
    formats: Collection[str] = BILLING_FORMATS,
    progress: Progress | None = None,
) -> dict:
    """Write billing (NDJSON.gz and Parquet, or the one of `formats`), daily utilization files and
    ground_truth.json under `out_dir`; return a summary (rows, files, totals, hidden costs).

    `progress` hears the rows written after each usage hour (the total estimated from the hours
    done: rows per hour vary), then the utilization days written."""
    sim = FleetSimulator(seed, start or DEFAULT_START, days, scale, inject)
    out_dir = Path(out_dir)
    (out_dir / "billing").mkdir(parents=True, exist_ok=True)
    (out_dir / "utilization").mkdir(parents=True, exist_ok=True)
    unknown = set(formats) - set(BILLING_FORMATS)
    if unknown or not formats:
        raise ValueError(f"billing formats {sorted(formats)}: choose from {', '.join(BILLING_FORMATS)}")
    paths = {f: out_dir / "billing" / BILLING_FILES[f] for f in BILLING_FORMATS if f in formats}
    for f in set(BILLING_FORMATS) - set(formats):  # a file of an earlier run would be read as this one's
        (out_dir / "billing" / BILLING_FILES[f]).unlink(missing_ok=True)
    files = list(paths.values())
    tally = Tally()
    with ExportWriter(paths.get("ndjson"), paths.get("parquet")) as writer:
        for h in range(sim.hours):
            for row in sim.hour_rows(h):
                writer.write(row)
                tally.add(row)
            if progress is not None:
                estimate = tally.rows * sim.hours // (h + 1)
                progress.update(tally.rows, total=estimate, unit="rows", approximate=h + 1 < sim.hours)
    if progress is not None:
        progress.describe("utilization")
    _drop_stale_days(out_dir, {sim.start.date() + timedelta(days=d) for d in range(days)})
    for d in range(days):
        if progress is not None:
            progress.update(d, total=days, unit="days")
        t0 = sim.start + timedelta(days=d)
        path = out_dir / "utilization" / f"{t0.date().isoformat()}.json.gz"
        with open_gzip(path) as gz:
            write_page(gz, sim.ctx, sim.fleet.vms, sim.hours, t0, t0 + timedelta(days=1))
        files.append(path)
    if progress is not None:
        progress.update(days, total=days, unit="days")
    truth = sim.ground_truth(tally)
    files.append(out_dir / "ground_truth.json")
    files[-1].write_text(json.dumps(truth, indent=2) + "\n")
    return {
        "out": str(out_dir),
        "rows": tally.rows,
        "files": [str(f.relative_to(out_dir)) for f in files],
        "totals": truth["totals"],
        "hidden_costs": [
            {"kind": h["kind"], "variant": h["variant"], "impact_usd": h["impact_usd"]}
            for h in truth["hidden_costs"]
        ],
    }
