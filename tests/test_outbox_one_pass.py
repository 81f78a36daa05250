"""One delivery pass at a time: the daemon's outbox tick and its digest job (two scheduler threads),
or a `gpucost digest --send` beside the daemon, never both post a pending row.

Real slack-sdk client against the local Slack (tests/fakes/slack_server.py), real SQLite file; the
post is held in flight (`FakeSlack.hold`) while the second pass starts, as when Slack is slow.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.delivery import DeliveryReport, deliver_outbox
from alerts.outbox import get_row
from alerts.pipeline import Deps
from alerts.slack import SlackNotifier
from monitor.state.store import SQLiteStore
from tests.fakes.slack_server import FakeSlack
from tests.test_alerts_channels import NOW, T, put

pytestmark = pytest.mark.integration


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack(token=T) as s:
        yield s


def posted(slack: FakeSlack) -> list[str]:
    return [m["metadata"]["event_payload"]["idempotency_key"] for m in slack.messages]


def deps(store: SQLiteStore, slack: FakeSlack, wait_s: float = 30.0) -> Deps:
    return Deps(store, SlackNotifier(SecretStr(T), slack.base_url), lock_wait_s=wait_s)


def in_thread(fn) -> tuple[threading.Thread, list[DeliveryReport]]:
    out: list[DeliveryReport] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


@pytest.mark.parametrize("other_process", [False, True], ids=["same_store", "another_store_on_the_file"])
def test_a_pass_that_reads_the_row_before_the_first_marks_it_does_not_post_it_again(
    tmp_path: Path, slack, other_process
) -> None:
    """The race as it was: both passes read `k` pending and not in flight, both posted it (no
    lookup, since neither attempt was marked yet). The second pass here runs at the first's
    "before_send" point, between its read and its mark."""
    store = SQLiteStore(tmp_path / "state.sqlite")
    second = SQLiteStore(store.path) if other_process else store
    put(store, "k", "#alerts")
    seen: list[DeliveryReport] = []

    def second_pass(point: str) -> None:
        if point == "before_send" and not seen:
            seen.append(deliver_outbox(deps(second, slack, wait_s=0), NOW))

    first = deliver_outbox(replace(deps(store, slack), fault=second_pass), NOW)
    assert posted(slack) == ["k"]
    assert seen[0].busy and seen[0].sent == 0
    assert first.sent == 1


@pytest.mark.parametrize("other_process", [False, True], ids=["same_store", "another_store_on_the_file"])
def test_a_pass_started_while_a_post_is_in_flight_leaves_it_alone(
    tmp_path: Path, slack, other_process
) -> None:
    store = SQLiteStore(tmp_path / "state.sqlite")
    second = SQLiteStore(store.path) if other_process else store
    put(store, "k", "#alerts")
    hold = slack.hold("chat.postMessage", process_first=True)  # answered 200 once released
    first, first_out = in_thread(lambda: deliver_outbox(deps(store, slack), NOW))
    try:
        assert hold.arrived.wait(30), "the first pass never posted"
        report = deliver_outbox(deps(second, slack, wait_s=0.2), NOW, ["k"])  # the digest's keyed pass
    finally:
        hold.release()
        first.join(30)
    assert report.busy and report.sent == 0
    assert first_out and first_out[0].sent == 1
    assert posted(slack) == ["k"]
    assert len(slack.calls("chat.postMessage")) == 1


def test_a_waiting_pass_goes_on_after_the_first_and_finds_the_row_sent(tmp_path: Path, slack) -> None:
    store = SQLiteStore(tmp_path / "state.sqlite")
    put(store, "k", "#alerts")
    put(store, "k2", "#alerts")
    hold = slack.hold("chat.postMessage", process_first=True)  # answered 200 once released
    first, first_out = in_thread(lambda: deliver_outbox(deps(store, slack), NOW, ["k"]))
    assert hold.arrived.wait(30)
    waiter, waiter_out = in_thread(lambda: deliver_outbox(deps(SQLiteStore(store.path), slack), NOW))
    hold.release()
    first.join(30)
    waiter.join(30)
    assert first_out[0].sent == 1
    assert waiter_out[0].sent == 1 and not waiter_out[0].busy  # k2 only: k was sent by the first
    assert sorted(posted(slack)) == ["k", "k2"]
    assert get_row(store, "k").status == get_row(store, "k2").status == "sent"
