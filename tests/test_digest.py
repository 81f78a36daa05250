"""The daily digest: Markdown shows exactly the figures passed in, the PNG is a real chart of the
expected size, and the outbox posts it and uploads the chart through files_upload_v2 against the fake
Slack."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import matplotlib.image as mpimg
import pytest
from pydantic import SecretStr

from alerts.charts import CHART_SIZE_PX, new_figure, render_chart, stack_bars
from alerts.console import ConsoleNotifier
from alerts.digest import (
    DigestData,
    DigestFinding,
    delta,
    enqueue_digest,
    render_blocks,
    render_markdown,
    write_digest,
)
from alerts.outbox import ensure_schema
from alerts.slack import SlackNotifier
from monitor import month
from tests.fakes.slack_server import FakeSlack

DAY = date(2026, 11, 1)
D = Decimal


def sample(provisional: bool = True) -> DigestData:
    days = [DAY - timedelta(days=i) for i in range(6, -1, -1)]
    daily = {
        d: {"compute": D("1000.00") + i * 10, "network": D("120.50"), "storage": D("33.333")}
        for i, d in enumerate(days)
    }
    return DigestData.from_dicts(
        day=DAY,
        timezone="Europe/Paris",
        yesterday_by_category={"compute": D("1060.00"), "network": D("120.50"), "storage": D("33.333")},
        previous_by_category={"compute": D("1050.00"), "network": D("100.50"), "storage": D("33.333")},
        yesterday_by_project={"ml-prod": D("1100.005"), "sandbox|x": D("113.828")},
        previous_by_project={"ml-prod": D("1000"), "old-proj": D("184.166")},
        mtd_by_category={"compute": D("1060.00"), "network": D("120.50"), "storage": D("33.333")},
        daily_by_category=daily,
        idle_gpu_by_day={d: D("250.25") for d in days},
        findings=[
            DigestFinding(
                "Idle GPUs on a3-node-1", "idle_gpu", "warning", D("512.344"), "ml-prod", provisional=True
            ),
            DigestFinding("Cross-zone all-reduce", "inter_zone_egress", "warning", D("99.99"), "ml-prod"),
            DigestFinding("<!channel> tiny", "other", "info", D("0.01"), "<!here>"),
        ],
        provisional_days=[DAY] if provisional else [],
        top_n=2,
    )


def empty_digest(**given: object) -> DigestData:
    """A digest of a day without spend, with `given` figures in it."""
    names = ("yesterday_by_category", "previous_by_category", "yesterday_by_project", "previous_by_project")
    empty = {n: {} for n in (*names, "mtd_by_category", "daily_by_category")}
    return DigestData.from_dicts(day=DAY, timezone="UTC", **(empty | given))  # type: ignore[arg-type]


def test_markdown_shows_the_figures_passed_in() -> None:
    md = render_markdown(sample())
    assert "# gpucost daily digest: 2026-11-01 (Europe/Paris)" in md
    assert "Yesterday (2026-11-01): **$1,213.83** *(provisional)*, +$30.00 (+2.5%) vs 2026-10-31" in md
    assert "- Month to date: **$1,213.83**" in md
    assert "| compute | $1,060.00 | $1,050.00 | +$10.00 (+1.0%) |" in md
    assert "| network | $120.50 | $100.50 | +$20.00 (+19.9%) |" in md
    assert "| ml-prod | $1,100.00 | $1,000.00 | +$100.00 (+10.0%) |" in md  # half-even cents
    assert "| sandbox\\|x | $113.83 | $0.00 | +$113.83 |" in md  # table cell escaped
    assert "| old-proj | $0.00 | $184.17 | -$184.17 (-100.0%) |" in md
    assert "1. **$512.34** Idle GPUs on a3-node-1 (ml-prod) `idle_gpu` *(provisional)*" in md
    assert "2. **$99.99** Cross-zone all-reduce" in md and "tiny" not in md  # top_n = 2
    assert "| 2026-11-01 *(provisional)* | $1,060.00 | $120.50 | $33.33 | $1,213.83 | $250.25 |" in md
    assert "| 2026-10-26 | $1,000.00 |" in md


def _table(md: str, title: str) -> dict[str, Decimal]:
    """A digest table's first money column by row name, Total included."""
    rows = md.split(f"## {title}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    cells = [[c.strip().strip("*") for c in r.strip("|").split("|")] for r in rows]
    return {c[0]: D(c[1].replace("$", "").replace(",", "")) for c in cells}


def test_the_figures_of_a_table_add_up_to_its_total_as_shown() -> None:
    # rounded each, three categories of $10.004 read $10.00 three times under a total of $30.01;
    # now the cent goes to one of them, the same one in every table and in Slack's fields
    thirds = {"gpu": D("10.004"), "cpu": D("10.004"), "disk": D("10.004")}
    d = empty_digest(
        yesterday_by_category=thirds,
        previous_by_category={"gpu": D("5.005"), "cpu": D("5.005")},
        yesterday_by_project={"a": D("15.006"), "b": D("15.006")},
        mtd_by_category=thirds,
        daily_by_category={DAY: thirds},
    )
    md = render_markdown(d)
    for title in ("Yesterday by category", "Yesterday by project", "Month to date by category"):
        table = _table(md, title)
        assert sum(v for k, v in table.items() if k != "Total") == table["Total"] == D("30.01"), title
    assert _table(md, "Yesterday by category")["cpu"] == D("10.01")
    assert "| cpu | $10.01 | $5.01 | +$5.00 (+99.8%) |" in md  # the change of the figures shown
    assert "| 2026-11-01 | $10.01 | $10.00 | $10.00 | $30.01 | $0.00 |" in md  # cpu, disk, gpu
    (fields,) = [b["fields"] for b in render_blocks(d) if "By category" in b["text"]["text"]]
    assert [f["text"].split("\n")[1].split(" (")[0] for f in fields] == ["$10.01", "$10.00", "$10.00"]


def test_a_daily_row_has_a_column_for_each_of_its_categories() -> None:
    # a category spent only on days of the month before was in no column: the row read
    # "| 2026-10-30 | $50.00 | $79.00 |" (a helper's review)
    d = empty_digest(
        mtd_by_category={"compute": D("50")},
        daily_by_category={date(2026, 10, 30): {"compute": D("50"), "support": D("29")}},
    )
    assert "| 2026-10-30 | $50.00 | $29.00 | $79.00 | $0.00 |" in render_markdown(d)


def test_a_change_and_its_percentage_carry_one_sign() -> None:
    # seed 23's digest printed "-$5.06 (+-0.0%)": a tiny fall rounds to a signed zero
    assert delta(Decimal("99994.94"), Decimal("100000")) == "-$5.06 (-0.0%)"
    assert delta(Decimal("105"), Decimal("100")) == "+$5.00 (+5.0%)"
    assert delta(Decimal("100"), Decimal("100")) == "+$0.00 (+0.0%)"
    # a day of more credits than cost: a fall is a fall, of the day before's size
    assert delta(Decimal("-150"), Decimal("-100")) == "-$50.00 (-50.0%)"
    assert delta(Decimal("-50"), Decimal("-100")) == "+$50.00 (+50.0%)"
    assert delta(Decimal("5"), Decimal("0")) == "+$5.00"
    # the change of the figures shown: $10.00 and $5.01 differ by $4.99 (not the exact 4.998), 99.6%
    # of $5.01 (not 99.8% of the exact 5.006)
    assert delta(Decimal("10.004"), Decimal("5.006")) == "+$4.99 (+99.6%)"
    assert delta(Decimal("99.996"), Decimal("100")) == "+$0.00 (+0.0%)"  # both show $100.00
    # a real export's network line (koku's AGPL sample) fell from $0.000021 to $0 and read
    # "$0.00 | $0.00 | +$0.00 (+100.0%)"; its project fell 0.24% and read "+$0.00 (+0.2%)"
    assert delta(Decimal("0"), Decimal("0.000021")) == "+$0.00"
    assert delta(Decimal("0.050438"), Decimal("0.050560")) == "+$0.00 (+0.0%)"


def test_floats_are_rejected() -> None:
    with pytest.raises(
        TypeError, match=r"DigestData.mtd_by_category\['compute'\]: expected Decimal, got float"
    ):
        empty_digest(mtd_by_category={"compute": 1.5})


def test_blocks_escape_billing_text() -> None:
    d = DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute": D(1)},
        previous_by_category={},
        yesterday_by_project={"<!channel> <http://evil|click>": D(1)},
        previous_by_project={},
        mtd_by_category={"compute": D(1)},
        daily_by_category={DAY: {"compute": D(1)}},
        findings=[DigestFinding("<!here>", "k", "warning", D(1), "p&q")],
    )
    text = str(render_blocks(d))
    assert "<!channel>" not in text and "<!here>" not in text and "<http" not in text
    assert "&lt;!channel&gt; &lt;http://evil|click&gt;" in text and "p&amp;q" in text


def test_chart_is_a_real_png_of_the_expected_size(tmp_path: Path) -> None:
    png = render_chart(sample(), tmp_path / "c.png")
    img = mpimg.imread(png)
    assert img.shape[:2] == (CHART_SIZE_PX[1], CHART_SIZE_PX[0]) == (600, 1200)
    assert img.std() > 0.05  # not a blank canvas
    # the idle-GPU hatch is drawn in red: some pixels are strongly red
    red = (img[..., 0] > 0.75) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)
    assert red.sum() > 100


def test_stacked_bars_sit_on_each_other_with_the_provisional_day_faint() -> None:
    """`stack_bars` draws each series as one collection of rectangles (not an artist per bar):
    each bar starts where the series below ended, the legend names each series, and only the
    provisional days' faces are translucent."""
    ax = new_figure().add_subplot(1, 1, 1)
    tops = stack_bars(
        ax, [0, 1], [("compute", [10.0, 4.0], "#4C72B0"), ("network", [2.0, 0.0], "#55A868")], [False, True]
    )
    assert tops == [12.0, 4.0]
    compute, network = ax.collections
    assert [[tuple(v) for v in p.vertices[:4]] for p in network.get_paths()] == [
        [(-0.4, 10.0), (-0.4, 12.0), (0.4, 12.0), (0.4, 10.0)],
        [(0.6, 4.0), (0.6, 4.0), (1.4, 4.0), (1.4, 4.0)],
    ]
    assert [round(float(c[3]), 2) for c in compute.get_facecolor()] == [1.0, 0.45]
    assert ax.get_legend_handles_labels()[1] == ["compute", "network"]
    assert ax.get_xlim()[0] < -0.4 and ax.get_xlim()[1] > 1.4  # the bars inside the axes


def test_write_digest_files(tmp_path: Path) -> None:
    md, png = write_digest(sample(), tmp_path / "out")
    assert (md.name, png.name) == ("digest-2026-11-01.md", "digest-2026-11-01.png")
    assert "![Daily spend by category](digest-2026-11-01.png)" in md.read_text()
    assert mpimg.imread(png).shape[:2] == (600, 1200)


def _deliver(notifier, d: DigestData, png: Path, store_path: Path, channel: str = "#digest", fault=None):
    """Queue the digest in the outbox of the store at `store_path` and run one delivery pass."""
    from alerts.delivery import deliver_outbox
    from alerts.pipeline import Deps
    from monitor.state.store import SQLiteStore

    store = SQLiteStore(store_path)
    deps = Deps(store, notifier, fault=fault)
    ensure_schema(store)
    now = datetime(2026, 11, 2, 9, tzinfo=UTC)
    with store.transaction() as conn:
        enqueue_digest(conn, d, png, channel, now)
    try:
        return deliver_outbox(deps, now)
    finally:
        store.close()


@pytest.mark.integration
def test_the_outbox_posts_the_digest_and_uploads_its_chart_with_files_upload_v2(tmp_path: Path) -> None:
    d = sample()
    png = render_chart(d, tmp_path / "c.png")
    with FakeSlack(token="xoxb-t") as slack:
        report = _deliver(SlackNotifier(SecretStr("xoxb-t"), slack.base_url), d, png, tmp_path / "s.sqlite")
        assert report.sent == 2
        methods = [r.method for r in slack.requests]
        assert methods == [
            "conversations.list",  # the channel name resolved to an id, posted to, persisted
            "chat.postMessage",
            "files.getUploadURLExternal",
            "upload",
            "files.completeUploadExternal",
        ]
        [post] = slack.messages
        [f] = slack.files
        assert f["data"] == png.read_bytes() and f["channel"] == "C0DIGEST" and f["thread_ts"] == post["ts"]
        assert "$1,213.83" in post["text"]
        assert post["metadata"]["event_payload"]["idempotency_key"] == "digest-2026-11-01-#digest"
        assert post["blocks"] == render_blocks(d)


def test_a_digest_already_in_the_channel_is_not_posted_again(tmp_path: Path) -> None:
    """A daemon killed after Slack took the digest but before recording it must not post it twice:
    the outbox row was marked in flight, so the next pass looks in the channel first."""

    def crash(point: str) -> None:
        if point == "after_send":
            raise SystemExit("killed")

    d = sample()
    png = render_chart(d, tmp_path / "c.png")
    db = tmp_path / "s.sqlite"
    with FakeSlack(token="xoxb-t") as slack:
        with pytest.raises(SystemExit):
            _deliver(SlackNotifier(SecretStr("xoxb-t"), slack.base_url), d, png, db, fault=crash)
        # a fresh notifier and store, as after a restart; queueing the day again adds nothing
        again = _deliver(SlackNotifier(SecretStr("xoxb-t"), slack.base_url), d, png, db)
        assert (again.recovered, again.sent) == (1, 1)  # the post found, then the chart uploaded
        assert len(slack.messages) == 1 and len(slack.files) == 1


def test_the_outbox_delivers_the_digest_to_the_console(tmp_path: Path) -> None:
    d = sample(provisional=False)
    out = io.StringIO()
    png = render_chart(d, tmp_path / "c.png")
    report = _deliver(ConsoleNotifier(tmp_path / "alerts", out), d, png, tmp_path / "s.sqlite")
    assert report.sent == 2 and (tmp_path / "alerts" / "c.png").exists()
    assert "$1,213.83" in out.getvalue()


def _stored(store, rows: list[tuple]) -> None:
    """Hourly aggregates as the billing poll stores them: (usage hour, invoice month, net USD[, VM
    (None: a sum over resources, the grain of CPU, RAM and disks)[, export rows]])."""
    from monitor.billing_poll import write_rows

    write_rows(
        store,
        [
            {
                "usage_hour": hour,
                "invoice_month": invoice_month,
                "project_id": "ml-prod",
                "resource_name": rest[0] if rest else None,
                "subcategory": "compute.gpu",
                "row_count": rest[1] if len(rest) > 1 else 1,
                "gross_micros": int(D(usd) * 1_000_000),
                "net_micros": int(D(usd) * 1_000_000),
                **dict.fromkeys(("cud_micros", "sud_micros", "other_credit_micros", "credit_micros"), 0),
            }
            for hour, invoice_month, usd, *rest in rows
        ],
        datetime(2026, 12, 3, tzinfo=UTC),
    )


def test_month_to_date_is_the_invoice_month(tmp_path: Path) -> None:
    """The digest's month to date counts rows by `invoice_month`, the export's month: usage in the
    last hours of November invoiced in December is December's, and usage at Dec 1 02:00 UTC (still
    November in Pacific time, when billing months turn) invoiced in November is not."""
    from monitor.digest_data import digest_data
    from monitor.state.analytics import AggregateStore
    from monitor.state.store import SQLiteStore
    from monitor.utilization import migrate

    store, aggregates = SQLiteStore(tmp_path / "state.sqlite"), AggregateStore(None)
    migrate(store)
    _stored(
        aggregates,
        [
            (datetime(2026, 11, 30, 23, tzinfo=UTC), "202612", "700"),  # late, invoiced in December
            (datetime(2026, 12, 1, 2, tzinfo=UTC), "202611", "50"),  # November's invoice
            (datetime(2026, 12, 1, 12, tzinfo=UTC), "202612", "100"),
            (datetime(2026, 12, 2, 12, tzinfo=UTC), "202612", "100"),
            (datetime(2026, 11, 20, 12, tzinfo=UTC), "202612", "-30"),  # a correction, this month
            # before the chart's 14 days (summed in the engine): December's correction counts,
            # November's usage does not
            (datetime(2026, 11, 5, 12, tzinfo=UTC), "202612", "-40"),
            (datetime(2026, 11, 6, 12, tzinfo=UTC), "202611", "999"),
        ],
    )
    data = digest_data(
        store, date(2026, 12, 2), "UTC", datetime(2026, 12, 3, 6, tzinfo=UTC), 3, aggregates=aggregates
    )
    assert data.mtd_by_category == {"compute": D("830")}
    assert data.yesterday_by_category == {"compute": D("100")}  # days stay usage days
    assert "- Month to date (invoice month 2026-12): **$830.00**" in render_markdown(data)
    assert data.other_month == 0  # nothing of Dec 2 is on another invoice


def test_the_day_whose_first_hours_are_last_months_says_so(tmp_path: Path) -> None:
    """Cloud Billing's days begin at midnight Pacific: Dec 1's first eight UTC hours are November on
    the invoice, so the digest of Dec 1 showed a month to date below its own day ($100 against
    $150) without a word. It says how much of the day is on another invoice month."""
    from monitor.digest_data import digest_data
    from monitor.state.analytics import AggregateStore
    from monitor.state.store import SQLiteStore
    from monitor.utilization import migrate

    store, aggregates = SQLiteStore(tmp_path / "state.sqlite"), AggregateStore(None)
    migrate(store)
    _stored(
        aggregates,
        [
            (datetime(2026, 12, 1, 2, tzinfo=UTC), "202611", "50"),  # 18:00 on Nov 30 in California
            (datetime(2026, 12, 1, 12, tzinfo=UTC), "202612", "100"),
        ],
    )
    data = digest_data(
        store, date(2026, 12, 1), "UTC", datetime(2026, 12, 3, 6, tzinfo=UTC), 1, aggregates=aggregates
    )
    assert (data.yesterday_total, data.mtd_total, data.other_month) == (D("150"), D("100"), D("50"))
    md = render_markdown(data)
    line = "- Month to date (invoice month 2026-12): **$100.00** ($50.00 of 2026-12-01 is on another invoice month)"
    assert line in md
    assert "($50.00 of 2026-12-01 is on another invoice month)" in json.dumps(render_blocks(data))


# Like with like: a provisional day (billing rows still arriving) is compared only with the part of
# the day before whose rows have arrived for it too, and the digest says how much of it is billed.

DEC1, DEC2 = date(2026, 12, 1), date(2026, 12, 2)


def _hours_of(day: date, hours, usd: str = "10", vm: str = "a3-1") -> list[tuple]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return [(start + timedelta(hours=h), "202612", usd, vm) for h in hours]


def _digest(
    tmp_path: Path, rows, now: datetime, provisional_days: int = 3, tz: str = "UTC", day: date = DEC2
) -> DigestData:
    from monitor.digest_data import digest_data
    from monitor.state.analytics import AggregateStore
    from monitor.state.store import SQLiteStore
    from monitor.utilization import migrate

    store, aggregates = SQLiteStore(tmp_path / "state.sqlite"), AggregateStore(None)
    migrate(store)
    _stored(aggregates, rows)
    return digest_data(store, day, tz, now, provisional_days, aggregates=aggregates)


def test_a_provisional_day_is_compared_with_the_same_hours_of_the_day_before(tmp_path: Path) -> None:
    """12 hours billed so far at the usual $10/h: no change, not -50%."""
    rows = _hours_of(DEC1, range(24)) + _hours_of(DEC2, range(12))
    d = _digest(tmp_path, rows, now=datetime(2026, 12, 3, 6, tzinfo=UTC))
    assert (d.yesterday_total, d.previous_total) == (D(120), D(120))  # today's code: 240, "-50%"
    assert d.not_compared == D(120)
    assert (d.billed_hours, d.day_hours, d.like_for_like) == (12, 24, True)
    md = render_markdown(d)
    assert (
        "- Yesterday (2026-12-02): **$120.00** *(provisional: 12 of 24 hours billed so far, latest "
        "11:00-12:00; 50% as many export rows as 2026-12-01)*, +$0.00 (+0.0%) vs the same hours and"
        " resources of 2026-12-01\n"
        "- $120.00 of 2026-12-01's cost not compared yet: its rows for 2026-12-02 have not arrived "
        "(late billing, or the resource stopped)\n" in md
    )
    assert "| Category | 2026-12-02 | 2026-12-01 (same hours and resources) | Change |" in md
    assert "| compute | $120.00 | $120.00 | +$0.00 (+0.0%) |" in md
    # whole days here; no utilization: idle unknown
    assert "| 2026-12-01 *(provisional)* | $240.00 | $240.00 | unknown |" in md


def test_rows_billed_late_are_left_out_of_both_days(tmp_path: Path) -> None:
    """Rows load resource by resource: VM b's hours 06-11 have not arrived, VM a's have, and hour 03
    of VM a is late too. The day before's VM b 06-11 (a $1,000/h spike) and VM a 03 are not compared
    (a rule by hours alone would count them); VM c stopped on Dec 2 and waits, named, as not compared."""
    before = _hours_of(DEC1, range(12)) + _hours_of(DEC1, range(6), vm="b")
    before += _hours_of(DEC1, range(6, 12), "1000", vm="b") + _hours_of(DEC1, range(12), "5", vm="c")
    after = _hours_of(DEC2, [h for h in range(12) if h != 3], "11") + _hours_of(DEC2, range(6), "11", vm="b")
    d = _digest(tmp_path, before + after, now=datetime(2026, 12, 3, 6, tzinfo=UTC))
    assert (d.yesterday_total, d.previous_total) == (D(17 * 11), D(17 * 10))
    assert d.not_compared == D(10 + 6 * 1000 + 12 * 5)
    # every hour has rows, but 17 of the day before's 36 rows have come: the count says how far
    assert d.completeness == (
        "12 of 24 hours billed so far, latest 11:00-12:00; 47% as many export rows as 2026-12-01"
    )
    assert d.change == "+$17.00 (+10.0%) vs the same hours and resources of 2026-12-01"


def test_a_sum_over_resources_is_compared_by_the_share_of_its_rows_arrived(tmp_path: Path) -> None:
    """Stored CPU, RAM and disk rows are summed over resources (no resource name at that grain): an
    hour whose rows have arrived for 4 of its 10 VMs was compared with all 10 VMs' hour of the day
    before, a drop that is only lag (the demo's digest: -3.6% where the export, resource by
    resource, says +0.9%). The day before counts the share of its rows that has arrived."""
    dec1, dec2 = datetime(2026, 12, 1, 5, tzinfo=UTC), datetime(2026, 12, 2, 5, tzinfo=UTC)
    rows = [(dec1, "202612", "10", None, 10), (dec2, "202612", "4.4", None, 4)]
    d = _digest(tmp_path, rows, now=datetime(2026, 12, 3, 6, tzinfo=UTC))
    assert (d.yesterday_total, d.previous_total, d.not_compared) == (D("4.4"), D(4), D(6))
    assert d.change == "+$0.40 (+10.0%) vs the same hours and resources of 2026-12-01"


def test_same_hours_are_clock_hours_in_the_digest_time_zone(tmp_path: Path) -> None:
    """Paris is UTC+1 in December: Dec 2 starts at Dec 1 23:00 UTC, and 6 billed hours are 00:00-06:00
    Paris on both days."""
    start = datetime(2026, 11, 30, 23, tzinfo=UTC)
    rows = [(start + timedelta(hours=h), "202612", "10") for h in range(24)]
    rows += [(start + timedelta(days=1, hours=h), "202612", "10") for h in range(6)]
    d = _digest(tmp_path, rows, now=datetime(2026, 12, 3, 6, tzinfo=UTC), tz="Europe/Paris")
    assert (d.yesterday_total, d.previous_total, d.billed_hours) == (D(60), D(60), 6)
    assert (
        d.completeness
        == "6 of 24 hours billed so far, latest 05:00-06:00; 25% as many export rows as 2026-12-01"
    )


def _steady(day: date, billed_to: datetime) -> list[tuple]:
    """$10 every UTC hour, from three days before `day` (UTC) to `billed_to`."""
    from monitor import month

    t = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=3)
    rows = []
    while t < billed_to:
        rows.append((t, month.month_at(t), "10", "a3-1"))
        t += timedelta(hours=1)
    return rows


LA, BERLIN = "America/Los_Angeles", "Europe/Berlin"


@pytest.mark.parametrize(
    ("tz", "day", "billed_to", "figures"),
    [
        # the 25-hour day, 3 hours billed: 00:00 PDT, 01:00 PDT, 01:00 PST (read +50.0%), then all
        # of it (read +4.2%): the repeated 01:00 is compared with nothing
        (LA, date(2026, 11, 1), datetime(2026, 11, 1, 10, tzinfo=UTC), (30, 20, 20, 220, 10, 0)),
        (LA, date(2026, 11, 1), datetime(2026, 11, 4, tzinfo=UTC), (250, 240, 240, 0, 10, 0)),
        # the day after, 2 hours billed (read -33.3%), then all of it (read -4.0%): its one 01:00
        # was compared with both of the day before's
        (LA, date(2026, 11, 2), datetime(2026, 11, 2, 10, tzinfo=UTC), (20, 20, 20, 220, 0, 10)),
        (LA, date(2026, 11, 2), datetime(2026, 11, 5, tzinfo=UTC), (240, 240, 240, 0, 0, 10)),
        # the 23-hour day: the day before's 02:00, which it lacks, is not a late row
        (LA, date(2026, 3, 8), datetime(2026, 3, 11, tzinfo=UTC), (230, 230, 230, 0, 0, 10)),
        # the day after it has a 02:00 the day before lacked (read +4.3%)
        (LA, date(2026, 3, 9), datetime(2026, 3, 12, tzinfo=UTC), (240, 230, 230, 0, 10, 0)),
        (BERLIN, date(2026, 10, 25), datetime(2026, 10, 28, tzinfo=UTC), (250, 240, 240, 0, 10, 0)),
        (BERLIN, date(2026, 10, 26), datetime(2026, 10, 29, tzinfo=UTC), (240, 240, 240, 0, 0, 10)),
    ],
)
def test_an_hour_only_one_of_the_two_days_has_is_not_compared(tmp_path, tz, day, billed_to, figures) -> None:
    """A steady $10/h fleet across DST changes, billing still arriving: no change. Figures: the day,
    its compared part, the day before's compared part, the day before's not compared yet (late), the
    day's and the day before's cost in an hour the other day does not have."""
    now = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(hours=36)
    d = _digest(tmp_path, _steady(day, billed_to), now=now, tz=tz, day=day)
    assert d.like_for_like
    assert d.change == f"+$0.00 (+0.0%) vs the same hours and resources of {d.previous_day}"
    assert (d.yesterday_total, d.not_compared) == (D(figures[0]), D(figures[3]))
    unpaired = sum(d.unpaired_by_category.values(), D(0))
    shown = (
        d.yesterday_total,
        d.compared_total,
        d.previous_total,
        d.not_compared,
        unpaired,
        d.previous_unpaired,
    )
    assert shown == tuple(D(x) for x in figures)


def test_the_hour_compared_with_nothing_is_said_and_the_tables_add_up(tmp_path: Path) -> None:
    """Los Angeles, Nov 1 (25 hours): the day is its report figure, $250; the tables compare the 24
    hours both days have, and the line between says where the other $10 went."""
    day = date(2026, 11, 1)
    d = _digest(
        tmp_path,
        _steady(day, datetime(2026, 11, 4, tzinfo=UTC)),
        datetime(2026, 11, 2, 12, tzinfo=UTC),
        tz=LA,
        day=day,
    )
    md = render_markdown(d)
    note = "$10.00 of 2026-11-01's cost not compared: it is in an hour 2026-10-31 does not have (the clocks changed)"
    assert "**$250.00** *(provisional: 25 of 25 hours billed so far" in md
    assert f", +$0.00 (+0.0%) vs the same hours and resources of 2026-10-31\n- {note}\n" in md
    assert "| Category | 2026-11-01 (same hours) | 2026-10-31 (same hours and resources) | Change |" in md
    assert "| compute | $240.00 | $240.00 | +$0.00 (+0.0%) |" in md
    assert "| **Total** | **$240.00** | **$240.00** | +$0.00 (+0.0%) |" in md
    assert "| ml-prod | $240.00 | $240.00 | +$0.00 (+0.0%) |" in md
    blocks = render_blocks(d)
    assert (
        f"(+$0.00 (+0.0%) vs the same hours and resources of 2026-10-31)\n_{note}_\n"
        in blocks[1]["text"]["text"]
    )
    assert blocks[2]["fields"][0]["text"] == "*compute*\n$240.00 (+$0.00 (+0.0%))"
    # the day after: its 24 hours against the same 24 of Nov 1, the repeated hour said
    (tmp_path / "after").mkdir()
    d = _digest(
        tmp_path / "after", _steady(day, datetime(2026, 11, 4, tzinfo=UTC)), datetime(2026, 11, 3, 12, tzinfo=UTC), tz=LA,
        day=date(2026, 11, 2),
    )  # fmt: skip
    md = render_markdown(d)
    assert "- $10.00 of 2026-11-01's cost not compared: it is in an hour 2026-11-02 does not have" in md
    assert "| Category | 2026-11-02 | 2026-11-01 (same hours and resources) | Change |" in md


def test_a_complete_day_is_compared_with_the_whole_day_before(tmp_path: Path) -> None:
    """No longer provisional (provisional_days = 1, two days later): a real drop is a drop, and the
    text is what it was before like-for-like comparisons existed."""
    rows = _hours_of(DEC1, range(24)) + _hours_of(DEC2, range(12))
    d = _digest(tmp_path, rows, now=datetime(2026, 12, 4, 6, tzinfo=UTC), provisional_days=1)
    assert (d.yesterday_total, d.previous_total, d.like_for_like, d.completeness, d.pending) == (
        D(120),
        D(240),
        False,
        "",
        "",
    )
    md = render_markdown(d)
    assert "- Yesterday (2026-12-02): **$120.00**, -$120.00 (-50.0%) vs 2026-12-01\n" in md
    assert "| Category | 2026-12-02 | 2026-12-01 | Change |" in md and "billed" not in md
    blocks = render_blocks(d)
    assert blocks[1]["text"]["text"] == (
        "*Yesterday:* $120.00 (-$120.00 (-50.0%) vs 2026-12-01)\n*Month to date (invoice month 2026-12):* $360.00"
    )
    assert blocks[2]["text"]["text"] == "*By category*"


def test_a_provisional_day_without_billing_rows_holds_the_change(tmp_path: Path) -> None:
    d = _digest(tmp_path, _hours_of(DEC1, range(24)), now=datetime(2026, 12, 3, 1, tzinfo=UTC))
    assert (d.billed_hours, d.previous_total, d.not_compared) == (0, D(0), D(240))
    assert (
        "- Yesterday (2026-12-02): **$0.00** *(provisional: no hours billed yet)*, "
        "change vs 2026-12-01 held until billing rows arrive\n" in render_markdown(d)
    )


def partial() -> DigestData:
    """A provisional day with 12 of 24 hours billed, as `digest_data` builds it."""
    return DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute": D("120"), "network": D("12")},
        previous_by_category={"compute": D("100"), "network": D("12")},
        yesterday_by_project={"ml-prod": D("132")},
        previous_by_project={"ml-prod": D("112")},
        mtd_by_category={"compute": D("120"), "network": D("12")},
        daily_by_category={DAY: {"compute": D("120"), "network": D("12")}},
        provisional_days=[DAY],
        billed_hours=12,
        last_billed_hour=datetime(2026, 11, 1, 11, tzinfo=UTC),
        like_for_like=True,
        not_compared=D("98.5"),
    )


def test_block_kit_says_how_complete_the_day_is_and_what_it_is_compared_with() -> None:
    blocks = render_blocks(partial())
    assert blocks[1]["text"]["text"] == (
        "*Yesterday:* $132.00 _(provisional: 12 of 24 hours billed so far, latest 11:00-12:00)_ "
        "(+$20.00 (+17.9%) vs the same hours and resources of 2026-10-31)\n"
        "_$98.50 of 2026-10-31's cost not compared yet: its rows for 2026-11-01 have not arrived "
        "(late billing, or the resource stopped)_\n*Month to date:* $132.00"
    )
    assert blocks[2]["text"]["text"] == "*By category* (vs the same hours and resources of 2026-10-31)"
    assert blocks[2]["fields"][0]["text"] == "*compute*\n$120.00 (+$20.00 (+20.0%))"
    assert blocks[3]["text"]["text"] == "*By project* (vs the same hours and resources of 2026-10-31)"


def test_markdown_and_chart_mark_the_partial_day() -> None:
    from alerts.charts import provisional_mark

    d = partial()
    md = render_markdown(d)
    assert "| Project | 2026-11-01 | 2026-10-31 (same hours and resources) | Change |" in md
    assert "| ml-prod | $132.00 | $112.00 | +$20.00 (+17.9%) |" in md
    assert "| 2026-11-01 *(provisional: 12 of 24 hours billed so far, latest 11:00-12:00)* |" in md
    assert provisional_mark(d, DAY) == "provisional\n12/24 h billed"
    assert provisional_mark(sample(), DAY) == "provisional"  # completeness unknown
    assert provisional_mark(sample(provisional=False), DAY) == ""


def test_a_chart_without_spend_is_drawn_without_a_warning(tmp_path: Path) -> None:
    """A window with no billing rows (an export pointed at last year's table): matplotlib warned on
    the daemon's stderr about an empty legend, and the axis read $0, $0, $1, $1. The chart says it
    has no spend instead."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = render_chart(empty_digest(), tmp_path / "empty.png")
    assert mpimg.imread(png).shape[:2] == (600, 1200)


def test_small_spend_is_labelled_in_cents(tmp_path: Path) -> None:
    """Whole-dollar ticks on a chart under $10 repeat themselves ($0, $0, $1, $1)."""
    from alerts.charts import finish_daily_chart, new_figure

    def ticks(top: float) -> str:
        fig = new_figure()
        ax = fig.add_subplot(1, 1, 1)
        ax.bar([0, 1], [top / 2, top], label="compute")
        finish_daily_chart(fig, ax, [0, 1], [DAY - timedelta(days=1), DAY], "USD", "t", tmp_path / "c.png")
        return ax.yaxis.get_major_formatter()(top / 4, 0)

    assert ticks(0.36) == "$0.09"  # koku's real export: 36 cents over four days
    assert ticks(4000.0) == "$1,000"


def test_a_day_without_spend_renders_a_readable_digest() -> None:
    """Its daily table was a header with an empty category column and one separator too few."""
    md = render_markdown(empty_digest())
    assert "## Daily spend\n\nNo spend in these days.\n" in md and "| Day |" not in md
    header, rule = next(
        (a, b) for a, b in pairwise(render_markdown(sample()).splitlines()) if a.startswith("| Day |")
    )
    assert header.count("|") == rule.count("|") == 7  # six columns: Day, three categories, Total, Idle GPU


def test_block_kit_sums_the_projects_past_its_ten_fields() -> None:
    """Slack allows 10 fields a section: the 11th project and after were dropped without a word."""
    projects = {f"p{i:02d}": Decimal(100 - i) for i in range(14)}
    d = DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute": Decimal(1)},
        previous_by_category={},
        yesterday_by_project=projects,
        previous_by_project={"p13": Decimal(80)},
        mtd_by_category={"compute": Decimal(1)},
        daily_by_category={DAY: {"compute": Decimal(1)}},
    )
    (section,) = [b for b in render_blocks(d) if "By project" in b.get("text", {}).get("text", "")]
    texts = [f["text"] for f in section["fields"]]
    assert len(texts) == 10 and texts[-1].startswith("*5 others*\n$445.00")  # 91 + 90 + 89 + 88 + 87
    assert texts[-1].endswith("(+$365.00 (+456.2%))")  # against p13's $80 the day before


def _steady_fleet(day: date, billed_to: datetime, usd=lambda t: "10") -> list[tuple]:
    t = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=3)
    rows = []
    while t < billed_to:
        rows.append((t, month.month_at(t), usd(t), "a3-1"))
        t += timedelta(hours=1)
    return rows


def _money(s: str) -> Decimal:
    return Decimal(s.replace("$", "").replace(",", ""))


def test_headline_equals_same_hours_total_plus_the_hour_not_compared(tmp_path) -> None:
    """Los Angeles, 1 Nov 2026 (25 h), provisional. Each of the two 01:00s costs $10.004, every other
    hour $10: the day is $250.008 -> $250.01; its 24 same hours $240.004, the hour only it has
    $10.004: each rounded alone, the digest printed $240.00 and $10.00 under $250.01 (helper 57)."""
    day = date(2026, 11, 1)
    tz = ZoneInfo("America/Los_Angeles")

    def usd(t):
        local = t.astimezone(tz)
        return "10.004" if local.date() == day and local.hour == 1 else "10"

    d = _digest(
        tmp_path,
        _steady_fleet(day, datetime(2026, 11, 4, tzinfo=UTC), usd),
        datetime(2026, 11, 2, 12, tzinfo=UTC),
        tz="America/Los_Angeles",
        day=day,
    )
    md = render_markdown(d)
    headline = _money(re.search(r"- Yesterday \(2026-11-01\): \*\*(\$[\d,.]+)\*\*", md).group(1))
    table_total = _money(
        re.search(r"## Yesterday by category.*?\| \*\*Total\*\* \| \*\*(\$[\d,.]+)\*\*", md, re.S).group(1)
    )
    unpaired = _money(re.search(r"- (\$[\d,.]+) of 2026-11-01's cost not compared", md).group(1))
    assert headline == table_total + unpaired, (headline, table_total, unpaired)


# (zone, day): the day of a DST change, and the day after it
CASES = [
    ("Australia/Lord_Howe", date(2026, 10, 4)),  # +10:30 -> +11:00 at 02:00
    ("Australia/Lord_Howe", date(2026, 4, 5)),  # +11:00 -> +10:30 at 02:00
    ("America/Santiago", date(2026, 9, 6)),  # 00:00 -> 01:00
    ("America/Santiago", date(2026, 4, 5)),  # Sat 24:00 -> 23:00
    ("America/Havana", date(2026, 11, 1)),  # 01:00 -> 00:00 (the repeated hour is 00:00)
    ("Asia/Kolkata", date(2026, 11, 1)),
    ("UTC", date(2026, 11, 1)),
]


@pytest.mark.parametrize("after", [0, 1])
@pytest.mark.parametrize(("zone", "change_day"), CASES)
def test_a_steady_fleet_reads_no_change_across_any_clock_change(tmp_path, zone, change_day, after) -> None:
    """A steady fleet reads +0.0% on a clock change's day and the day after, at most one clock hour
    of either day left uncompared: on Lord Howe's half-hour change, keyed by clock minute too,
    nothing after the change was compared (helper 57)."""
    day = change_day + timedelta(days=after)
    now = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(hours=36)
    d = _digest(tmp_path, _steady_fleet(day, now + timedelta(days=2)), now=now, tz=zone, day=day)
    assert d.like_for_like
    unpaired = sum(d.unpaired_by_category.values(), Decimal(0))
    assert d.compared_total + unpaired == d.yesterday_total
    assert d.change.startswith("+$0.00 (+0.0%)"), d.change
    # at most one clock hour of either day is left uncompared (what the digest's line says)
    assert unpaired <= 10 and d.previous_unpaired <= 10, (unpaired, d.previous_unpaired)
    render_markdown(d), render_blocks(d)


@pytest.mark.parametrize(("zone", "day"), CASES)
def test_a_fully_billed_day_has_as_many_hours_as_it_billed(tmp_path, zone, day) -> None:
    """The day's hours are the billing hours (UTC hours) whose start falls in it: Lord Howe's 23.5-hour
    day holds 23 of them and its 24.5-hour day 25, where rounding its length read "23 of 24 hours
    billed" on a day with every hour billed (and "25 of 24")."""
    now = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(hours=36)
    d = _digest(tmp_path, _steady_fleet(day, now + timedelta(days=2)), now=now, tz=zone, day=day)
    assert d.billed_hours == d.day_hours, (d.billed_hours, d.day_hours)


@pytest.mark.parametrize(
    ("unread", "dark", "cell"),
    [
        (0, 0, "$5.00"),  # every GPU-hour had utilization
        (0, 1, "≥ $5.00"),  # one VM's GPUs reported nothing: a floor, as "Top jobs" says (helper 72)
        (1, 1, "≥ $5.00"),  # one hour not read yet
        (0, 4, "unknown"),  # read, no GPU reported any: was "$0.00"
        (2, 4, "unknown"),
        (4, 4, "not read"),
    ],
)
def test_a_days_idle_cell_says_how_much_of_it_utilization_tells(unread: int, dark: int, cell: str) -> None:
    """Of a day's 4 GPU node-hours, `unread` had their utilization not read yet and `dark` (those
    among them) had none: the daily row's idle cell says a floor where some had none, not an exact
    figure (it read $422.48 where "Top jobs" said "≥ $422.48" of the same dollars)."""
    from alerts.digest import idle_cell
    from monitor.digest_data import _idle_known

    states = {DAY: _idle_known(unread, dark, 4)} if dark else {}
    d = DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute.gpu": D(5)},
        previous_by_category={},
        yesterday_by_project={},
        previous_by_project={},
        mtd_by_category={},
        daily_by_category={DAY: {"compute.gpu": D(5)}},
        idle_gpu_by_day={DAY: D(5) if dark < 4 else D(0)},
        idle_unread=states,
    )
    assert idle_cell(d, DAY) == cell
