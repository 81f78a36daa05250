"""First start is not a flood: what ended before gpucost first started is told once, as a summary.

A new install reads weeks of billing history at once. Findings whose window ended before the first
start are history: one summary message per channel lists them with their impact (through the
outbox, so idempotent), none of them is alerted as "New", and a restart sends nothing again.
Findings still going on at the first start alert as usual. Real slack-sdk client against the local
fake Slack, real SQLite, injected time, no sleeps.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.console import ConsoleNotifier
from alerts.history import SUMMARY_GROUP
from alerts.pipeline import Deps, outbox_tick, process
from alerts.slack import SlackNotifier
from monitor.config import AlertsConfig, Route, SlackConfig
from monitor.model import Finding, Scope, Severity, fingerprint
from monitor.state.store import SQLiteStore, first_start
from tests.fakes.slack_server import FakeSlack
from tests.test_state_postgres import pg_server, pg_url, store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 18, 14, 0, 8, tzinfo=UTC)  # the daemon's first start
TOKEN = "xoxb-test-token"
HOUR, DAY = timedelta(hours=1), timedelta(days=1)
DETECTION, OUTBOX = timedelta(minutes=5), timedelta(seconds=30)  # the daemon's default cadences


def finding(
    kind: str, project: str, instance: str, impact: str, start: datetime, end: datetime, team: str = "ml"
) -> Finding:
    scope = Scope(project=project, zone="us-central1-a", instance=instance, labels={"team": team})
    return Finding(
        kind=kind,
        severity=Severity.WARNING,
        title=f"{kind} on {instance}",
        summary=f"{instance}: {kind}",
        impact_usd=Decimal(impact),
        window_start=start,
        window_end=end,
        scope=scope,
        evidence={"hours": int((end - start) / HOUR)},
        recommendation="Look at it",
        fingerprint=fingerprint(kind, scope),
    )


HUNG_LAST_WEEK = finding("idle_gpu", "ml-train-prod", "a3-job-7", "3249.60", START - 8 * DAY, START - 7 * DAY)
NOTEBOOK_GONE = finding("idle_gpu", "ml-research", "nb-2", "1210.00", START - 13 * DAY, START - 3 * DAY)
EGRESS_SPIKE = finding(
    "inter_zone_egress", "ml-train-prod", "a3-node-2", "402.18", START - 5 * DAY, START - 4 * DAY
)
HUNG_NOW = finding("idle_gpu", "ml-train-prod", "a3-hung-1", "812.40", START - 6 * HOUR, START - 2 * HOUR)
PAST = [HUNG_LAST_WEEK, NOTEBOOK_GONE, EGRESS_SPIKE]
FLEET = [*PAST, HUNG_NOW]


@dataclass
class Env:
    slack: FakeSlack
    db: Path
    alerts_cfg: AlertsConfig
    slack_cfg: SlackConfig

    def deps(self) -> Deps:
        """A fresh process (what a restart gives): new store connection, new client."""
        notifier = SlackNotifier(SecretStr(TOKEN), self.slack.base_url, timeout=30)  # only a hang times out
        return Deps(SQLiteStore(self.db), notifier, self.alerts_cfg, self.slack_cfg)

    def run(self, deps: Deps, findings: list[Finding], since: datetime, until: datetime) -> None:
        """The daemon's cadence: an outbox tick every 30 s, a detection run every 5 minutes."""
        now = since
        while now < until:
            if (now - since) % DETECTION == timedelta(0):
                process(findings, now, deps)
            outbox_tick(deps, now)
            now += OUTBOX

    def summaries(self) -> list[dict]:
        return [m for m in self.slack.messages if "gpucost found in the last" in m["text"]]

    def alerts(self) -> list[dict]:
        return [m for m in self.slack.messages if m not in self.summaries()]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with FakeSlack(token=TOKEN) as slack:
        yield Env(slack, tmp_path / "state.sqlite", AlertsConfig(), SlackConfig(channel="C0ALERTS"))


def text_of(msg: dict) -> str:
    return json.dumps(msg["blocks"])


def test_first_run_sends_one_summary_and_alerts_only_the_ongoing_finding(env: Env) -> None:
    deps = env.deps()
    first_start(deps.store, START)
    env.run(deps, FLEET, START + timedelta(seconds=8), START + 70 * timedelta(minutes=1))
    [summary] = env.summaries()
    [alert] = env.alerts()
    assert HUNG_NOW.fingerprint in text_of(alert)
    body = text_of(summary)
    assert summary["text"] == "What gpucost found in the last 13 days: 3 findings, $4,861.78"
    for f in PAST:
        assert f.title in body and f"${f.impact_usd:,}" in body
        assert f.fingerprint not in text_of(alert)
    assert HUNG_NOW.title not in body
    # the ongoing alert did not wait for the summary: group_wait + the outbox interval
    assert env.slack.messages[0] == alert


def test_a_restart_sends_nothing_again(env: Env) -> None:
    first = env.deps()
    first_start(first.store, START)
    env.run(first, FLEET, START, START + 65 * timedelta(minutes=1))
    assert (len(env.summaries()), len(env.alerts())) == (1, 1)
    first.store.close()
    second = env.deps()  # restarted: its own first detection sees the same fleet
    env.run(second, FLEET, START + 2 * HOUR, START + 4 * HOUR)
    assert (len(env.summaries()), len(env.alerts())) == (1, 1)


def test_history_is_never_alerted_as_new_even_before_its_summary(env: Env) -> None:
    deps = env.deps()
    first_start(deps.store, START)
    env.run(deps, PAST, START, START + 59 * timedelta(minutes=1))  # the backfill's hour
    assert env.slack.messages == []
    env.run(deps, PAST, START + 60 * timedelta(minutes=1), START + 2 * HOUR)
    assert len(env.summaries()) == 1 and env.alerts() == []


def test_one_summary_per_channel(env: Env) -> None:
    env.slack_cfg = SlackConfig(
        channel="C0ALERTS", routes=(Route(match={"label.team": "web"}, channel="C0MLTEAM"),)
    )
    web = finding("idle_gpu", "web-prod", "g2-render", "77.00", START - 9 * DAY, START - 8 * DAY, team="web")
    deps = env.deps()
    first_start(deps.store, START)
    env.run(deps, [*PAST, web], START, START + 2 * HOUR)
    by_channel = {m["channel"]: m for m in env.summaries()}
    assert set(by_channel) == {"C0ALERTS", "C0MLTEAM"}
    assert web.title in text_of(by_channel["C0MLTEAM"]) and web.title not in text_of(by_channel["C0ALERTS"])
    assert by_channel["C0MLTEAM"]["text"].endswith(": 1 finding, $77.00")


def test_history_found_later_goes_in_a_follow_up_summary_once(env: Env) -> None:
    deps = env.deps()
    first_start(deps.store, START)
    env.run(deps, PAST[:2], START, START + 2 * HOUR)
    env.run(deps, PAST, START + 2 * HOUR, START + 4 * HOUR)  # the backfill found one more
    _, second = env.summaries()
    assert second["text"].startswith("More of what gpucost found")
    assert EGRESS_SPIKE.title in text_of(second) and HUNG_LAST_WEEK.title not in text_of(second)
    assert env.alerts() == []


def test_the_summary_can_be_turned_off(env: Env) -> None:
    env.alerts_cfg = AlertsConfig(first_start_summary=False)
    deps = env.deps()
    first_start(deps.store, START)
    env.run(deps, FLEET, START, START + 10 * timedelta(minutes=1))
    assert env.summaries() == [] and len(env.alerts()) == 3  # groups: kind x project


def test_an_upgraded_install_does_not_summarise_what_it_already_alerted(env: Env) -> None:
    """gpucost ran (and alerted) before first starts were recorded: that is not news, nor history."""
    env.alerts_cfg = AlertsConfig(first_start_summary=False)
    old = env.deps()
    env.run(old, [NOTEBOOK_GONE], START - HOUR, START - HOUR + 2 * timedelta(minutes=1))
    assert len(env.alerts()) == 1
    env.alerts_cfg = AlertsConfig()
    deps = env.deps()  # the upgrade: nothing recorded a first start yet
    env.run(deps, [NOTEBOOK_GONE, EGRESS_SPIKE], START, START + 2 * HOUR)
    # the first start is that of the first alert; only what was never told is summarised
    assert first_start(deps.store, START) < START - HOUR + timedelta(minutes=1)
    [summary] = env.summaries()
    assert EGRESS_SPIKE.title in text_of(summary) and NOTEBOOK_GONE.title not in text_of(summary)
    assert len(env.alerts()) == 1
    with deps.store.transaction() as conn:
        n = conn.execute("SELECT COUNT(*) FROM alerts_outbox WHERE group_key = ?", (SUMMARY_GROUP,))
        assert n.fetchone()[0] == 1


def test_the_summary_works_on_both_state_stores(store, tmp_path: Path) -> None:  # noqa: F811
    """SQLite and PostgreSQL (through the dialect layer): the console notifier, a restart."""
    log = tmp_path / "alerts" / "alerts.jsonl"
    deps = Deps(store, ConsoleNotifier(tmp_path / "alerts", io.StringIO()), AlertsConfig(), SlackConfig())
    assert first_start(store, START) == START
    for minutes in (0, 1, 61, 62):  # detection + outbox at the first start, after the wait, again
        process(FLEET, START + minutes * timedelta(minutes=1), deps)
        outbox_tick(deps, START + minutes * timedelta(minutes=1))
    records = [json.loads(x) for x in log.read_text().splitlines()]
    texts = [r["text"] for r in records]
    assert len(records) == 2 and texts[1].startswith("What gpucost found in the last 13 days: 3 findings")
    assert first_start(store, START + DAY) == START


def test_the_summary_goes_as_soon_as_the_history_was_read_not_after_the_wait(env: Env) -> None:
    """The backfill read the whole window 4 minutes after the start: the summary follows then, not
    at the end of `first_start_summary_wait_minutes` (60), which only caps a slow backfill."""
    deps = env.deps()
    first_start(deps.store, START)
    process(FLEET, START + timedelta(seconds=8), deps)  # live windows only: history not read yet
    for tick in range(1, 8):
        outbox_tick(deps, START + tick * OUTBOX)
    assert env.summaries() == [] and len(env.alerts()) == 1
    read_at = START + timedelta(minutes=4)
    process(FLEET, read_at, deps, history_read=True)
    outbox_tick(deps, read_at + OUTBOX)
    [summary] = env.summaries()
    assert summary["text"] == "What gpucost found in the last 13 days: 3 findings, $4,861.78"
