"""GPU utilization from Cloud Monitoring (`MetricServiceClient.list_time_series`).

One request series per (project, metric) covers the whole fleet: the server aligns every series to
`alignment_seconds` with ALIGN_MEAN and reduces them with REDUCE_MEAN grouped by host and GPU (the
group-by list names every label we read, since the reducer drops the others). Pages are followed one
by one, each retried on its own with bounded exponential backoff on UNAVAILABLE, DEADLINE_EXCEEDED
and RESOURCE_EXHAUSTED; the library's own retry is switched off so the budget (and the sleep, which
tests inject) is ours. When retries run out, `RetryableSourceError` propagates and `poll` leaves that
window's watermark where it was, so the next poll asks for the same window again: nothing is lost,
and because a window's stored samples are replaced (never appended) nothing is doubled either.

First start and downtime: the live window reaches back at most `initial_lookback` (6 h); what the
detection window needs beyond it is backfilled by the same requests (server-side aggregation, pages,
retries), newest hours first, in chunks of `utilization.backfill_chunk_hours`, at most
`utilization.backfill_chunks_per_run` per call of `backfill`. The daemon runs it as its own job
(every `utilization.backfill_interval_seconds`), never inside a live poll, so history never delays
the present: the live windows and the detection that follows them come first. Each range read is
recorded (`monitor.utilization.coverage`); detectors judge only hours inside it. Cloud Monitoring keeps metric points for weeks (retention per metric type:
https://cloud.google.com/monitoring/api/v3/latency-n-retention, "Data retention" in
https://cloud.google.com/monitoring/quotas), so the billing window can be read back.

Fresh points take up to ~4 minutes to appear, so every poll re-reads the last `reread` (5 minutes,
rounded up to whole alignment windows) before the watermark.

Units come from the API: the first page of a metric that has series triggers one
`ListMetricDescriptors` request (filter `metric.type = "..."`), cached with the source per
(project, metric type). A descriptor that does not exist is not an error (the metric is simply not
in that project); a descriptor without a unit (Managed Prometheus has no units) falls back to the
documented table in `monitor.sources.units`; a TimeSeries that carries its own `unit` is more
specific still and wins. A unit that table does not know is never guessed: the metric is skipped,
counted (`unknown_unit`), kept in `unknown_units`, and logged once.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.config import GoogleConfig, UtilizationConfig
from monitor.errors import ConfigError, PermanentSourceError, RetryableSourceError, SourceError
from monitor.sources._google import credentials_failure
from monitor.sources.presets import PRESETS, MetricSpec
from monitor.sources.units import NO_UNIT, UnknownUnit, UnknownUnitWarnings, declared, factor, resolve_unit
from monitor.state.store import StateStore
from monitor.utilization import (
    FetchResult,
    ParsedSeries,
    assemble,
    migrate,
    parse_series,
    read_watermark,
    replace_window,
    select_signals,
    to_rest_json,
)
from monitor.utilization.coverage import gaps, newest_chunk, read_coverage

__all__ = ["CloudMonitoringSource", "PollReport", "WindowReport", "build_client", "window_for"]

log = logging.getLogger(__name__)
#: How failures of this source are named in logs (`monitor.daemon.failing_source`).
SOURCE = "cloud_monitoring"


@dataclass(frozen=True)
class WindowReport:
    scope: str
    preset: str
    start: datetime
    end: datetime
    samples: int
    skipped: dict[str, int]
    requests: int
    unknown_units: dict[str, str] = field(default_factory=dict)  # metric type -> unit, skipped
    backfill: bool = False  # an older range read for coverage (the watermark did not move)


@dataclass
class PollReport:
    """What one poll read, live windows first, then backfill chunks; `failed` maps "project/preset"
    to the error that kept its live window in place, `backfill_failed` to the one that stopped its
    backfill (not a failure of the poll: the chunk is asked for again next time)."""

    windows: list[WindowReport] = field(default_factory=list)
    failed: dict[str, SourceError] = field(default_factory=dict)
    backfill_failed: dict[str, SourceError] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def requests(self) -> int:
        return sum(w.requests for w in self.windows)

    @property
    def skipped(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for w in self.windows:
            total.update(w.skipped)
        return dict(total)

    @property
    def unknown_units(self) -> dict[str, str]:
        """Metric type -> unit of every metric skipped for its unit in this poll."""
        out: dict[str, str] = {}
        for w in self.windows:
            for metric_type, unit in w.unknown_units.items():
                out.setdefault(metric_type, unit)
        return out

    def raise_for_failures(self) -> None:
        """Re-raise the first failure (retryable unless one was permanent), for callers that want it."""
        if not self.failed:
            return
        errors = list(self.failed.values())
        first = next((e for e in errors if isinstance(e, PermanentSourceError)), errors[0])
        err = type(first)("; ".join(f"{k}: {v}" for k, v in self.failed.items()))
        err.source = SOURCE  # type: ignore[attr-defined]  # named in the daemon's failure log
        raise err from first


def _grpc_target(endpoint: str | None) -> str | None:
    if endpoint is None:
        return None
    for scheme in ("https://", "http://"):
        endpoint = endpoint.removeprefix(scheme)
    return endpoint.rstrip("/")


def build_client(cfg: UtilizationConfig, google: GoogleConfig) -> Any:
    """A `MetricServiceClient`: plaintext gRPC to `api_endpoint` when `insecure`, else TLS + credentials."""
    import grpc
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.auth.exceptions import DefaultCredentialsError
    from google.cloud import monitoring_v3
    from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcTransport

    target = _grpc_target(cfg.api_endpoint)
    if cfg.insecure:
        if target is None:
            raise ConfigError('utilization.insecure: needs utilization.api_endpoint = "host:port"')
        # the options the generated transport gives its own channels: without them gRPC's 4 MiB
        # receive limit stays, and a page of many series failed ("Received message larger than
        # max (5300508 vs. 4194304)"), retried as if RESOURCE_EXHAUSTED were a quota
        unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        transport = MetricServiceGrpcTransport(channel=grpc.insecure_channel(target, options=unlimited))
        return monitoring_v3.MetricServiceClient(transport=transport)
    credentials = AnonymousCredentials() if google.credentials == "anonymous" else None
    options = ClientOptions(api_endpoint=target) if target else None
    try:
        return monitoring_v3.MetricServiceClient(credentials=credentials, client_options=options)
    except (DefaultCredentialsError, OSError) as e:
        raise credentials_failure(
            e,
            lambda reason: ConfigError(f'google.credentials = "default": {reason}'),
            ConfigError(
                "google.credentials: no Application Default Credentials found; run "
                '"gcloud auth application-default login" or use a service account'
            ),
        ) from None


def _retryable() -> tuple[type[BaseException], ...]:
    from google.api_core import exceptions as gexc

    return (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.ResourceExhausted, gexc.TooManyRequests)


def window_for(
    watermark: datetime | None,
    now: datetime,
    alignment_seconds: int,
    *,
    reread: timedelta,
    initial: timedelta,
) -> tuple[datetime, datetime]:
    """The next window to read: the watermark minus the late-point margin (whole windows), to `now`
    floored to the alignment; before the first poll, the last `initial` instead."""
    align = alignment_seconds
    end = datetime.fromtimestamp((int(now.timestamp()) // align) * align, UTC)
    if watermark is None:
        return end - initial, end
    margin = math.ceil(reread.total_seconds() / align) * align
    return datetime.fromtimestamp((int(watermark.timestamp()) // align) * align - margin, UTC), end


def _status(e: BaseException) -> str:
    """The gRPC status name (RESOURCE_EXHAUSTED), not api_core's HTTP-flavoured one (TOO_MANY_REQUESTS)."""
    code = getattr(e, "grpc_status_code", None) or getattr(e, "code", None)
    return getattr(code, "name", type(e).__name__)


class CloudMonitoringSource:
    """`UtilizationSource` over Cloud Monitoring, plus `poll` for the daemon's watermarked reads."""

    def __init__(
        self,
        cfg: UtilizationConfig,
        google: GoogleConfig,
        client: Any = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 5,
        initial_backoff: float = 1.0,
        max_backoff: float = 30.0,
        timeout: float = 60.0,
        reread: timedelta = timedelta(minutes=5),
        initial_lookback: timedelta = timedelta(hours=6),
        page_size: int | None = None,
    ):
        self.cfg = cfg
        self._owns_client = client is None
        self._client = build_client(cfg, google) if client is None else client
        self._sleep = sleep
        self.max_attempts = max(1, max_attempts)
        self.initial_backoff, self.max_backoff = initial_backoff, max_backoff
        self.timeout = timeout
        self.reread, self.initial_lookback = reread, initial_lookback
        self.page_size = page_size
        #: Metric type -> unit of the metrics skipped for their unit since the last `fetch`/`poll`.
        self.unknown_units: dict[str, str] = {}
        self._units: dict[tuple[str, str], str | None] = {}  # (project, type) -> descriptor unit
        self._warnings = UnknownUnitWarnings()
        self._preset_unknown: dict[str, str] = {}  # of the last `fetch_preset`

    def close(self) -> None:
        if self._owns_client:
            self._client.transport.close()

    # ----------------------------------------------------------------------------------------- reads

    def fetch(self, start: datetime, end: datetime) -> FetchResult:
        """Every configured project and preset for ``[start, end)``; raises `SourceError` on failure."""
        samples, skipped, requests = [], Counter(), 0
        self.unknown_units = {}
        for project in self.cfg.projects:
            for preset in self.cfg.presets:
                part = self.fetch_preset(project, preset, start, end)
                samples += part.samples
                skipped.update(part.skipped)
                requests += part.requests
        return FetchResult(select_signals(samples), dict(skipped), requests)

    def fetch_preset(self, project: str, preset: str, start: datetime, end: datetime) -> FetchResult:
        """One preset of one project; metrics skipped for their unit are added to `unknown_units`."""
        skips: Counter[str] = Counter()
        parsed: list[ParsedSeries] = []
        unknown: dict[str, str] = {}
        calls = [0]
        for spec in PRESETS[preset].metrics:
            for page in self._pages(project, spec, start, end, calls):
                if not page.time_series:
                    continue
                unit = declared(self.descriptor_unit(project, spec.metric_type, calls)) or page.unit
                for ts in page.time_series:
                    rest = to_rest_json(ts)
                    ps = parse_series(rest, skips, default_project=project, unit=unit, unknown=unknown)
                    if ps is not None:
                        parsed.append(ps)
        self._note_unknown(unknown)
        self._preset_unknown = unknown
        samples = assemble(parsed, self.cfg.alignment_seconds, skips, window=(start, end))
        return FetchResult(samples, {str(k): v for k, v in skips.items() if v}, calls[0])

    def _note_unknown(self, unknown: dict[str, str]) -> None:
        """Remember and log (once per metric type and unit, for the source's life) skipped units."""
        for metric_type, unit in unknown.items():
            self.unknown_units.setdefault(metric_type, unit)
        self._warnings.warn(unknown)

    # ------------------------------------------------------------------------------------ units

    def descriptor_unit(self, project: str, metric_type: str, calls: list[int] | None = None) -> str | None:
        """The `unit` of the metric's descriptor in `project` ("" when it has none), None when the
        project has no such descriptor; read once per (project, metric type) for the source's life."""
        key = (project, metric_type)
        if key not in self._units:
            from google.cloud import monitoring_v3

            request = monitoring_v3.ListMetricDescriptorsRequest(
                name=f"projects/{project}", filter=f'metric.type = "{metric_type}"'
            )
            what = f"Cloud Monitoring {request.name} metricDescriptors {metric_type}"
            page = self._call(self._client.list_metric_descriptors, request, what, calls or [0])
            found = next((d for d in page if d.type == metric_type), None)
            self._units[key] = None if found is None else found.unit
        return self._units[key]

    def unit_problems(self, project: str, preset: str) -> list[UnknownUnit]:
        """The metrics of a preset whose unit (descriptor, else documented) cannot be converted.

        Metrics absent from the project (no descriptor, nothing documented) are not problems.
        """
        out = []
        for spec in PRESETS[preset].metrics:
            described = self.descriptor_unit(project, spec.metric_type)
            code = resolve_unit(spec.metric_type, described)
            if code is not None and factor(code, spec.role) is None:
                out.append(UnknownUnit(spec.metric_type, code))
            elif code is None and described is not None:
                out.append(UnknownUnit(spec.metric_type, NO_UNIT))
        return out

    def _request(self, project: str, spec: MetricSpec, start: datetime, end: datetime, token: str) -> Any:
        from google.cloud import monitoring_v3
        from google.protobuf.duration_pb2 import Duration

        agg = monitoring_v3.Aggregation(
            alignment_period=Duration(seconds=self.cfg.alignment_seconds),
            per_series_aligner=monitoring_v3.Aggregation.Aligner.ALIGN_MEAN,
            cross_series_reducer=monitoring_v3.Aggregation.Reducer.REDUCE_MEAN,
            group_by_fields=list(spec.labels.group_by_fields),
        )
        return monitoring_v3.ListTimeSeriesRequest(
            name=f"projects/{project}",
            filter=spec.filter,
            interval=monitoring_v3.TimeInterval(start_time=start, end_time=end),
            aggregation=agg,
            view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
            page_size=self.page_size or 0,
            page_token=token,
        )

    def _pages(
        self, project: str, spec: MetricSpec, start: datetime, end: datetime, calls: list[int]
    ) -> Iterator[Any]:
        token = ""
        while True:
            request = self._request(project, spec, start, end, token)
            what = f"Cloud Monitoring {request.name} {request.filter.split(' AND ')[0]}"
            page = self._call(self._client.list_time_series, request, what, calls)
            yield page
            token = page.next_page_token
            if not token:
                return

    def _call(self, method: Callable[..., Any], request: Any, what: str, calls: list[int]) -> Any:
        """One request, retried on transient errors; the library retry is off so the budget is ours."""
        from google.api_core import exceptions as gexc

        last: Exception | None = None
        for attempt in range(self.max_attempts):
            calls[0] += 1
            try:
                return method(request=request, retry=None, timeout=self.timeout)
            except _retryable() as e:
                last = e
                if attempt + 1 < self.max_attempts:
                    self._sleep(min(self.max_backoff, self.initial_backoff * 2**attempt))
            except gexc.GoogleAPICallError as e:
                raise PermanentSourceError(f"{what}: {_status(e)}: {e.message}") from e
        assert last is not None
        raise RetryableSourceError(
            f"{what}: {_status(last)} after {self.max_attempts} attempts; the window will be retried"
        ) from last

    # ----------------------------------------------------------------------------------------- polls

    def poll(
        self, store: StateStore, now: datetime, *, since: datetime | None = None, backfill: bool = True
    ) -> PollReport:
        """The live window of each (project, preset); then, when `backfill` (one-shot runs), one
        `backfill` call over ``[since, now)``.

        The live window runs from the watermark (minus the late margin) to `now`, but never further
        back than `initial_lookback` when `since` is given: after downtime the older part is left to
        the backfill, so a live poll is never delayed by history. Without `since` nothing is
        backfilled and the live window reaches back to the watermark however old it is.
        """
        migrate(store)
        report = PollReport()
        self.unknown_units = {}
        for project, preset in self._pairs():
            self._live(store, project, preset, now, report, capped=since is not None)
        if (
            backfill
            and since is not None
            and not any(isinstance(e, RetryableSourceError) for e in report.failed.values())
        ):
            self.backfill(store, since, now, report=report)  # quota trouble: history can wait
        return report

    def _pairs(self) -> list[tuple[str, str]]:
        return [(project, preset) for project in self.cfg.projects for preset in self.cfg.presets]

    def backfill_pending(self, store: StateStore, since: datetime, now: datetime) -> int:
        """How many (project, preset) pairs still have unread hours in ``[since, now)``: 0 means the
        whole window was read (the first-start summary need not wait any longer)."""
        migrate(store)
        lo, hi = _floor(since, self.cfg.alignment_seconds), _floor(now, self.cfg.alignment_seconds)
        return sum(
            1
            for pair in self._pairs()
            if (top := self._behind(store, pair, hi)) is None or gaps(read_coverage(store, *pair), lo, top)
        )

    @staticmethod
    def _behind(store: StateStore, pair: tuple[str, str], hi: datetime) -> datetime | None:
        """Where a pair's history ends: its watermark (None before its first live read). What lies
        after it is the live poll's, whose next read starts a margin before it for late points: a
        backfill step read that newest window seconds after it closed, and the live poll read it
        again (helper 64's audit)."""
        watermark = read_watermark(store, *pair)
        return None if watermark is None else min(hi, watermark)

    def _live(
        self, store: StateStore, project: str, preset: str, now: datetime, report: PollReport, *, capped: bool
    ) -> None:
        """One (project, preset) from its watermark; `capped`: no further back than `initial_lookback`."""
        watermark = read_watermark(store, project, preset)
        start, end = window_for(
            watermark, now, self.cfg.alignment_seconds, reread=self.reread, initial=self.initial_lookback
        )
        tail = None
        if capped and start < end - self.initial_lookback:
            if watermark is not None and start < watermark:
                # a gap longer than the cap: the backfill reads it, but never again what was read
                # already, so the window read last before the gap gets its re-read here (its late
                # points were lost, and its hour's mean kept without them: helper 64's audit)
                tail = (start, watermark)
            start = end - self.initial_lookback
        if end <= start or (watermark is not None and end < watermark):
            return
        try:
            part = self.fetch_preset(project, preset, start, end)
        except SourceError as e:
            report.failed[f"{project}/{preset}"] = e
            return
        n = replace_window(store, project, preset, start, end, part.samples, now=now)
        report.windows.append(
            WindowReport(project, preset, start, end, n, part.skipped, part.requests, self._preset_unknown)
        )
        if tail is None:
            return
        try:  # after the live window, on its own: its failure must not hold the present back
            again = self.fetch_preset(project, preset, *tail)
        except SourceError as e:  # not read again, as before; the backfill's failures say so
            report.backfill_failed[f"{project}/{preset}"] = e
            log.warning("utilization re-read of %s/%s before its gap failed: %s", project, preset, e)
            return
        n = replace_window(store, project, preset, *tail, again.samples, now=now, watermark=False)
        report.windows.append(
            WindowReport(project, preset, *tail, n, again.skipped, again.requests, self._preset_unknown, True)
        )

    def backfill(
        self,
        store: StateStore,
        since: datetime,
        now: datetime,
        *,
        report: PollReport | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> PollReport:
        """Read at most `backfill_chunks_per_run` not-yet-read ranges of ``[since, now)``, the newest
        chunk of any (project, preset) first; a failed chunk stops that pair for this run (a
        retryable one stops the run: the quota is shared), and is asked for again next run.
        Pairs whose live window failed in `report` are left alone; `cancelled()` (shutdown) is
        checked before each chunk, each of which is committed on its own."""
        migrate(store)
        report = report if report is not None else PollReport()
        align = self.cfg.alignment_seconds
        lo, hi = _floor(since, align), _floor(now, align)
        size = timedelta(hours=self.cfg.backfill_chunk_hours)
        # where each pair's history ends, read once: the backfill never moves a watermark
        tops = {
            p: top
            for p in self._pairs()
            if f"{p[0]}/{p[1]}" not in report.failed and (top := self._behind(store, p, hi)) is not None
        }
        todo = list(tops)
        for _ in range(self.cfg.backfill_chunks_per_run):
            if cancelled is not None and cancelled():
                break
            chunks = [
                (chunk, pair)
                for pair in todo
                if (chunk := newest_chunk(read_coverage(store, *pair), lo, tops[pair], size, align))
                is not None
            ]
            if not chunks:
                break
            (start, end), (project, preset) = min(chunks, key=lambda c: (-c[0][1].timestamp(), c[1]))
            try:
                part = self.fetch_preset(project, preset, start, end)
            except SourceError as e:
                report.backfill_failed[f"{project}/{preset}"] = e
                log.warning("utilization backfill stopped for %s/%s: %s", project, preset, e)
                if isinstance(e, RetryableSourceError):
                    break
                todo.remove((project, preset))
                continue
            n = replace_window(store, project, preset, start, end, part.samples, now=now, watermark=False)
            report.windows.append(
                WindowReport(
                    project, preset, start, end, n, part.skipped, part.requests, self._preset_unknown, True
                )
            )
        return report


def _floor(dt: datetime, align: int) -> datetime:
    return datetime.fromtimestamp((int(dt.timestamp()) // align) * align, UTC)
