"""What `gpucost digest` and `gpucost outbox` print: figures that add up as shown, changes of the
figures shown, marks kept in Slack, where a webhook posts, and a store that is not there."""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

from alerts.digest import DigestData, DigestFinding, render_blocks, render_markdown
from alerts.notifier import Message
from alerts.outbox import enqueue, ensure_schema
from monitor.cli import main
from monitor.sources.duckdb_conn import open_billing_db
from monitor.state.store import SQLiteStore
from tests.fakes.slack_server import FakeSlack
from tests.test_queries import T0, fleet_rows, load_rows

D = Decimal
DAY = date(2026, 11, 1)
BEFORE = DAY - timedelta(days=1)


def _money(text: str) -> Decimal:
    return D(text.replace("$", "").replace(",", ""))


def _uneven_day() -> DigestData:
    """A provisional day of $250.008 with $10.004 in a clock hour the day before lacks, against a
    day before of $200.008 of which $100.004 is compared and $100.004 not yet: each part rounded
    alone, $240.00 + $10.00 under $250.01 and $100.00 + $100.00 beside $200.01."""
    return DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute": D("250.008")},
        previous_by_category={"compute": D("100.004")},
        yesterday_by_project={"p": D("250.008")},
        previous_by_project={"p": D("100.004")},
        mtd_by_category={"compute": D("250.008")},
        daily_by_category={BEFORE: {"compute": D("200.008")}, DAY: {"compute": D("250.008")}},
        provisional_days=[BEFORE, DAY],
        billed_hours=25,
        day_hours=25,
        like_for_like=True,
        not_compared=D("100.004"),
        unpaired_by_category={"compute": D("10.004")},
        unpaired_by_project={"p": D("10.004")},
    )


def test_the_digests_changes_are_of_the_figures_shown_and_each_days_parts_add_up() -> None:
    """The headline's change and the Total row's were of the exact compared figures: +$140.00
    beside a Total row of $240.01 and $100.00; the day before's compared $100.00 and the $100.00
    "not compared yet" stood beside its daily row of $200.01. Now each day's parts are split to
    the cent from its total as shown, and every change is of the figures printed."""
    d = _uneven_day()
    md = render_markdown(d)
    headline, change = re.search(
        r"- Yesterday \(2026-11-01\): \*\*(\$[\d,.]+)\*\*.*?, ([+-]\$[\d,.]+) ", md
    ).groups()
    unpaired = re.search(r"- (\$[\d,.]+) of 2026-11-01's cost not compared", md).group(1)
    held = re.search(r"- (\$[\d,.]+) of 2026-10-31's cost not compared yet", md).group(1)
    day_row = re.search(r"\| 2026-10-31 \*\(provisional\)\* \| [^|]+ \| (\$[\d,.]+) \|", md).group(1)
    for title in ("Yesterday by category", "Yesterday by project"):
        section = md.split(f"## {title}", 1)[1]
        now, before, total_change = re.search(
            r"\| \*\*Total\*\* \| \*\*(\$[\d,.]+)\*\* \| \*\*(\$[\d,.]+)\*\* \| ([+-]\$[\d,.]+)", section
        ).groups()
        assert _money(now) + _money(unpaired) == _money(headline) == D("250.01"), title
        assert _money(before) + _money(held) == _money(day_row) == D("200.01"), title
        assert _money(total_change) == _money(now) - _money(before) == _money(change), (title, md)
    blocks = render_blocks(d)
    for name in ("By category", "By project"):
        (fields,) = [b["fields"] for b in blocks if name in b.get("text", {}).get("text", "")]
        (cell,) = [f["text"] for f in fields]
        now, delta = re.search(r"\n(\$[\d,.]+) \(([+-]\$[\d,.]+)", cell).groups()
        assert _money(now) == D("240.01") and _money(delta) == _money(change), cell


def test_slack_marks_an_estimated_finding_as_the_markdown_does() -> None:
    """The Markdown said "(provisional, estimated)" of an impact priced from the catalog before its
    billing rows landed; Slack's "Top findings" said "(provisional)" only."""
    f = DigestFinding("Forgotten GPU VM", "idle_gpu", "critical", D("7463.87"), "ml", True, True)
    d = DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={},
        previous_by_category={},
        yesterday_by_project={},
        previous_by_project={},
        mtd_by_category={},
        daily_by_category={},
        findings=[f],
    )
    assert "*(provisional, estimated)*" in render_markdown(d)
    (text,) = [b["text"]["text"] for b in render_blocks(d) if "Top findings" in b["text"].get("text", "")]
    assert text.endswith("1. *$7,463.87* Forgotten GPU VM (ml) _(provisional, estimated)_"), text


def _config(tmp: Path, state: str, extra: str = "") -> Path:
    (tmp / "util").mkdir(exist_ok=True)
    (tmp / "util" / "none.json").write_text("[]")
    path = tmp / "gpucost.toml"
    path.write_text(
        f'[billing]\nsource = "duckdb"\ndb = "{tmp / "billing.duckdb"}"\nlookback_days = 10\n'
        f'[utilization]\nsource = "files"\nfiles = ["{tmp / "util"}"]\n'
        f'[state]\nurl = "sqlite:///{state}"\n'
        f'[digest]\nout_dir = "{tmp / "out"}"\n[alerts]\nconsole_dir = "{tmp / "console"}"\n{extra}',
        encoding="utf-8",
    )
    return path


def test_a_digest_sent_through_a_webhook_names_no_channel_of_ours(tmp_path, capsys, monkeypatch) -> None:
    """Through an incoming webhook, `digest --send` said "sent to #gpucost-alerts", the default
    channel a webhook never posts to (it posts to the channel it was made for), and nothing of the
    chart it cannot upload. The webhook's URL, a secret, is never printed."""
    conn = open_billing_db(tmp_path / "billing.duckdb")
    load_rows(conn, fleet_rows(11, 40))
    conn.close()
    with FakeSlack() as slack:
        monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
        monkeypatch.setenv("GPUCOST_TEST_HOOK", slack.webhook_url)
        config = _config(
            tmp_path, tmp_path / "state.sqlite", '[slack]\nwebhook_url_env = "GPUCOST_TEST_HOOK"\n'
        )
        code = main(["digest", "--config", str(config), "--date", str(T0.date()), "--send"])
        out, err = capsys.readouterr()
        assert code == 0, err
        (msg,) = slack.messages
        assert msg["text"].startswith(f"GPU cost digest for {T0.date()}") and not slack.files
    assert out.splitlines()[-1] == (
        "sent through the incoming webhook, to its own channel (without the chart: a webhook cannot"
        " upload files)"
    )
    assert "#gpucost-alerts" not in out + err and "/hooks/" not in out + err


def test_the_outbox_marks_a_first_line_it_cuts(tmp_path, capsys) -> None:
    """`gpucost outbox` showed a message's first 60 characters as they fell: "forecast $549,6" for
    $549,669.22 reads as another figure. A line it cuts now ends in "…"."""
    db = tmp_path / "state.sqlite"
    store = SQLiteStore(db)
    ensure_schema(store)
    text = 'Budget "whole fleet monthly" forecast $549,669.22 vs $400,000.00'
    with store.transaction() as conn:
        for key, line in (("long", text), ("short", "Digest for 2026-11-13")):
            enqueue(
                conn, key=key, reason="new", group_key=key, receiver="#c", sequence=1,
                root_key=None, message=Message(key, "#c", line), now=T0,
            )  # fmt: skip
    store.close()
    assert main(["outbox", "--config", str(_config(tmp_path, db)), "--status", "pending"]) == 0
    long, short = capsys.readouterr().out.splitlines()
    assert long.endswith('Budget "whole fleet monthly" forecast $549,669.22 vs $400,0…')
    assert short.endswith("Digest for 2026-11-13")


def test_the_outbox_of_a_relative_store_not_there_is_refused(tmp_path, capsys, monkeypatch) -> None:
    """Run from another directory than the daemon's, a relative `state.url` named no store:
    `gpucost outbox` created an empty one there and said "no messages in pending / failed", exit 0,
    while the daemon's store held failed messages."""
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = _config(tmp_path, "out/state.sqlite")
    for args in ([], ["--requeue-failed"]):
        assert main(["outbox", "--config", str(config), *args]) == 2
        _, err = capsys.readouterr()
        assert err == (
            f"gpucost: error: state.url: out/state.sqlite does not exist in the current directory ({elsewhere}),"
            " which a relative path is read from; run gpucost outbox from the directory the daemon runs in,"
            " or give state.url an absolute path\n"
        )
    assert list(elsewhere.iterdir()) == []  # nothing created
    (tmp_path / "home" / "out").mkdir()
    SQLiteStore(elsewhere / "out" / "state.sqlite").close()  # the daemon's store, from its directory
    assert main(["outbox", "--config", str(config)]) == 0
    assert capsys.readouterr().out == "no messages in pending / failed\n"


def test_a_complete_day_is_unchanged() -> None:
    """A day no longer provisional is compared with the whole day before, as before: its parts are
    its figures rounded (the split only moves cents between parts of one day)."""
    d = DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute": D("105"), "network": D("0.004")},
        previous_by_category={"compute": D("100"), "network": D("0.006")},
        yesterday_by_project={"p": D("105.004")},
        previous_by_project={"p": D("100.006")},
        mtd_by_category={"compute": D("105.004")},
        daily_by_category={},
    )
    md = render_markdown(d)
    assert "- Yesterday (2026-11-01): **$105.00**, +$4.99 (+5.0%) vs 2026-10-31" in md
    assert "| **Total** | **$105.00** | **$100.01** | +$4.99 (+5.0%) |" in md
