"""The console / file notifier: the embedded default when no Slack token and channel are set.

It goes through the same pipeline and outbox as Slack. Each message is printed as readable,
Slack-like text and appended as one JSON line to `out_dir/alerts.jsonl` (with its idempotency key,
so `lookup` can tell after a crash whether a line was already written). Its `ts` is a synthetic,
increasing `<seconds>.<n>` so threads (`thread_ts`) stay visible in the log.
"""

from __future__ import annotations

import html
import json
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

from alerts.notifier import DeliveryResult, Message
from monitor.errors import ConfigError
from monitor.paths import file_in_the_way

__all__ = ["ConsoleNotifier", "blocks_to_text", "unusable_dir"]


def unusable_dir(path: Path, setting: str) -> ConfigError | None:
    """Why the directory `path` (the value of `setting`) cannot hold files, if it cannot: it, or
    one of its parents, is a file. Never creates anything (a missing directory is made on first use).

    >>> unusable_dir(Path("/"), "digest.out_dir") is None
    True
    """
    path = Path(path)
    blocker = file_in_the_way(path)
    if blocker is None:
        return None
    what = f"{path} is a file" if blocker == path else f"{path}: {blocker} is a file"
    return ConfigError(
        f"{setting}: {what}, not a directory; point {setting} at a directory (created if missing)"
    )


def blocks_to_text(blocks: list[dict[str, Any]]) -> str:
    """Block Kit -> plain lines (entities decoded for reading; the JSON log keeps them escaped)."""
    lines: list[str] = []
    for b in blocks:
        t = b.get("type")
        if t == "header":
            title = html.unescape(b["text"]["text"])
            lines += [title, "-" * min(len(title), 80)]
        elif t == "section":
            lines.append(html.unescape(b["text"]["text"]))
        elif t == "context":
            lines += [html.unescape(e.get("text", "")) for e in b.get("elements", [])]
        elif t == "divider":
            lines.append("")
        elif t == "image":
            lines.append(f"[image: {b.get('alt_text', '')}]")
    return "\n".join(lines)


class ConsoleNotifier:
    name = "console"
    supports_threads = True

    def __init__(self, out_dir: Path, stream: TextIO | None = None):
        """Raises `ConfigError` if `out_dir` (`alerts.console_dir`) is, or is under, a file: every
        alert would stay pending (retried for ever) while nothing said why."""
        if (problem := unusable_dir(Path(out_dir), "alerts.console_dir")) is not None:
            raise problem
        self.out_dir = Path(out_dir)
        self.stream = stream if stream is not None else sys.stdout
        self.log_path = self.out_dir / "alerts.jsonl"

    def _next_ts(self) -> str:
        n = 0
        if self.log_path.exists():
            with self.log_path.open(encoding="utf-8") as fh:
                n = sum(1 for _ in fh)
        return f"{n + 1}.000000"

    def _append(self, record: dict[str, Any]) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")

    def resolve_channel(self, channel: str) -> str | None:
        return channel  # the log is searched by idempotency key; names are fine here

    def send(self, message: Message) -> DeliveryResult:
        try:
            ts = self._next_ts()
            self._append(
                {
                    "idempotency_key": message.idempotency_key,
                    "channel": message.channel,
                    "ts": ts,
                    "thread_ts": message.thread_ts,
                    "text": message.text,
                    "blocks": message.blocks,
                }
            )
        except OSError as e:
            return DeliveryResult.retry(f"{self.log_path}: {e.strerror}", uncertain=True)
        where = f"{message.channel} (thread {message.thread_ts})" if message.thread_ts else message.channel
        body = blocks_to_text(message.blocks) or html.unescape(message.text)
        print(f"── alert to {where} ──\n{body}\n", file=self.stream)
        return DeliveryResult.sent(ts, message.channel)

    def lookup(self, message: Message) -> DeliveryResult | None:
        if not self.log_path.exists():
            return None
        with self.log_path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line from a crash mid-write
                if rec.get("idempotency_key") == message.idempotency_key:
                    return DeliveryResult.sent(rec.get("ts"), rec.get("channel"))
        return None

    def lookup_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult | None:
        """Cannot tell (nothing is logged per file); copying again is harmless."""
        return None

    def send_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult:
        """Copy the file next to the log (unless it is already there) and note it."""
        dest = self.out_dir / path.name
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if dest.resolve() != Path(path).resolve():
                shutil.copyfile(path, dest)
        except OSError as e:
            return DeliveryResult.retry(f"{dest}: {e.strerror}")
        print(f"── file for {channel}: {title} -> {dest}", file=self.stream)
        return DeliveryResult.sent(thread_ts, channel)
