"""`gpucost outbox`: failed messages are listed and, once their cause is fixed, re-queued and
delivered exactly once. Real slack-sdk client against the local Slack stand-in, real SQLite."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import SecretStr

from alerts.outbox import status
from alerts.pipeline import Deps, outbox_tick, process
from alerts.slack import SlackNotifier
from monitor.cli import main
from monitor.config import AlertsConfig, SlackConfig
from monitor.state.store import SQLiteStore, first_start
from tests.fakes.slack_server import FakeSlack
from tests.test_first_start import HUNG_NOW, OUTBOX, START, TOKEN


def test_a_failed_message_is_listed_requeued_and_delivered_once(tmp_path: Path, capsys, caplog) -> None:
    db = tmp_path / "state.sqlite"
    config = tmp_path / "gpucost.toml"
    config.write_text(f'[state]\nurl = "sqlite:///{db}"\n')
    with FakeSlack(token=TOKEN) as slack:
        slack.archive_channel("alerts")
        deps = Deps(
            SQLiteStore(db),
            SlackNotifier(SecretStr(TOKEN), slack.base_url, timeout=30),  # only a hang times out
            AlertsConfig(group_wait_seconds=0),
            SlackConfig(channel="#alerts"),
        )
        first_start(deps.store, START - timedelta(days=30))  # the finding is news, not history
        now = START
        process([HUNG_NOW], now, deps)
        outbox_tick(deps, now + OUTBOX)
        assert status(deps.store).failed == 1 and slack.messages == []
        assert "is_archived; nothing was posted: fix the cause, then `gpucost outbox" in caplog.text
        assert "--requeue 1` sends it" in caplog.text

        assert main(["outbox", "--config", str(config)]) == 0
        listed = capsys.readouterr().out
        assert "failed" in listed and "is_archived" in listed and "#alerts" in listed

        slack.unarchive_channel("alerts")  # the operator fixed the cause
        assert main(["outbox", "--config", str(config), "--requeue", "999"]) == 2  # not a failed row
        assert main(["outbox", "--config", str(config), "--requeue-failed"]) == 0
        assert "re-queued 1 failed message" in capsys.readouterr().out

        for tick in range(2, 6):  # delivery, then nothing more: no repeat, no second post
            outbox_tick(deps, now + tick * OUTBOX)
            process([HUNG_NOW], now + tick * OUTBOX, deps)
        assert len(slack.messages) == 1 and HUNG_NOW.fingerprint in str(slack.messages[0]["blocks"])
        st = status(deps.store)
        assert (st.failed, st.pending, st.sent) == (0, 0, 1)
        assert main(["outbox", "--config", str(config)]) == 0
        assert "no messages in pending / failed" in capsys.readouterr().out
