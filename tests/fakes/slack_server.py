"""An HTTP server on 127.0.0.1 that behaves like Slack's Web API, for the real slack-sdk client.

Implements `auth.test`, `chat.postMessage`, `conversations.list`, `conversations.history`,
`conversations.replies`, `files.getUploadURLExternal`, the upload URL it hands out,
`files.completeUploadExternal`, and an incoming-webhook endpoint (`/hooks/...`). Like Slack: the bot
token goes in `Authorization: Bearer`, errors are HTTP 200 with `{"ok": false, "error": ...}`,
channels may be named (`#alerts`) for posting but `conversations.history` / `.replies` need the
channel id, and message metadata is kept. A file shared into a channel or thread shows in its
history as a message carrying the file (`files`, `upload`).

`conversations.list` pages with `limit` (default 100, capped by `page_size`) and an opaque `cursor`
from `response_metadata.next_cursor` (empty on the last page); `types` defaults to public_channel;
archived channels are listed unless `exclude_archived`. It needs the `channels:read` scope for
public and `groups:read` for private channels (`missing_scope` with `needed` / `provided`
otherwise); `scopes=` sets what the token has. Channels can be added, renamed and archived while
the server runs.

Scriptable failures (`fail(method, ...)`), each in Slack's wire format:

- HTTP 429 with a `Retry-After` header (seconds) and `{"ok": false, "error": "ratelimited"}`: "Slack
  will return a HTTP 429 Too Many Requests error, and a Retry-After HTTP header containing the
  number of seconds until you can retry" (https://api.slack.com/docs/rate-limits);
- HTTP 5xx (Slack's `fatal_error` / `internal_error` say "It's possible some aspect of the operation
  succeeded before the error was raised", https://api.slack.com/methods/chat.postMessage: an
  uncertain outcome);
- HTTP 200 with `ok: false` and a method error (https://api.slack.com/methods/chat.postMessage
  lists `invalid_auth` "Some aspect of authentication cannot be validated", `channel_not_found`
  "Value passed for channel was invalid", `is_archived` "Channel has been archived");
- a connection reset mid-response (`reset`: status line and headers sent, part of the body, then a
  TCP RST), after the message was stored;
- a delay that makes the client time out, optionally after the message was stored (an uncertain
  outcome);
- a held response (`hold(method)`): the request is answered only when the test releases it, so a
  test can kill the client while the post is in flight, or outwait its timeout without a race;
- a garbled answer (`body`: HTTP 200, `application/gzip`, bytes slack-sdk cannot read as JSON), which
  makes the client raise something no classifier expects.

Those errors can also come from the workspace itself, as in Slack: a revoked token (`set_token`)
answers `invalid_auth`, an archived channel `is_archived`, a private channel the bot was removed from
`channel_not_found` (`remove_bot` / `invite_bot`). Every request is recorded with its raw body.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["DEFAULT_SCOPES", "Failure", "FakeSlack", "Hold", "Recorded"]


class Hold:
    """A response held back: `arrived` is set when the request is in, `release()` lets it go."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def wait(self, timeout: float = 60.0) -> None:
        self.arrived.set()
        self._released.wait(timeout)


@dataclass(frozen=True)
class Failure:
    status: int = 200
    error: str | None = None  # ok: false with this error (status 200 unless given)
    retry_after: int | None = None
    delay: float = 0.0  # sleep before answering (client timeout)
    process_first: bool = False  # with delay, reset or hold: store the message first, then fail
    reset: bool = False  # send the headers and part of the body, then reset the connection
    hold: Hold | None = None  # answer only when the test releases it
    body: bytes | None = None  # a 200 answered with these bytes as `application/gzip` (garbled)
    only: Callable[[dict[str, Any]], bool] | None = None  # only a call whose params it accepts

    @property
    def after_processing(self) -> bool:
        return self.process_first and bool(self.delay or self.reset or self.hold)


@dataclass(frozen=True)
class Recorded:
    method: str  # API method ("chat.postMessage"), "upload" or "webhook"
    path: str
    headers: dict[str, str]
    body: bytes
    params: dict[str, Any]


_RESET = -1  # `_handle` status meaning "reset the connection mid-response"

#: What a bot token installed with the scopes gpucost documents would have.
DEFAULT_SCOPES = frozenset(
    {"chat:write", "channels:read", "groups:read", "channels:history", "groups:history", "files:write"}
)


@dataclass
class _Channel:
    id: str
    name: str
    private: bool = False
    archived: bool = False
    member: bool = True  # the bot is in the channel
    previous_names: list[str] = field(default_factory=list)

    def as_api(self) -> dict[str, Any]:
        """The shape `conversations.list` returns for a channel the bot is in."""
        flags = ("is_group", "is_im", "is_mpim", "is_general", "is_shared", "is_ext_shared", "is_org_shared")
        blank = {"value": "", "creator": "", "last_set": 0}
        return {"id": self.id, "name": self.name, "name_normalized": self.name, "is_channel": True} | {
            **dict.fromkeys(flags, False),
            "is_private": self.private,
            "is_archived": self.archived,
            "is_member": True,
            "created": 1767225600,
            "creator": "U0ADMIN",
            "context_team_id": "T000",
            "previous_names": list(self.previous_names),
            "topic": dict(blank),
            "purpose": dict(blank),
            "num_members": 3,
        }


@dataclass
class _State:
    token: str
    channels: dict[str, str]  # name (without #) -> id
    scopes: frozenset[str] = DEFAULT_SCOPES
    page_size: int = 1000
    meta: dict[str, _Channel] = field(default_factory=dict)  # id -> channel
    messages: list[dict[str, Any]] = field(default_factory=list)
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    failures: dict[str, deque[Failure]] = field(default_factory=dict)
    ts_counter: int = 0


def _parse_body(headers: Any, body: bytes) -> dict[str, Any]:
    ctype = headers.get("Content-Type", "")
    if not body:
        return {}
    if ctype.startswith("application/json"):
        return json.loads(body)
    if ctype.startswith("application/x-www-form-urlencoded"):
        return {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode(), keep_blank_values=True).items()}
    if ctype.startswith("multipart/form-data"):
        msg = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body)
        return {p.get_param("name", header="content-disposition"): p.get_content() for p in msg.iter_parts()}
    return {"_raw": body}


class FakeSlack:
    """Start with `with FakeSlack() as slack:`; point `WebClient(base_url=slack.base_url)` at it."""

    def __init__(
        self,
        token: str = "xoxb-test-token",
        channels: dict[str, str] | None = None,
        *,
        private: frozenset[str] | set[str] = frozenset(),
        scopes: frozenset[str] | set[str] = DEFAULT_SCOPES,
        page_size: int = 1000,
    ):
        """`channels` maps name -> id; names in `private` are private channels the bot is in;
        `page_size` caps a `conversations.list` page (Slack may return fewer than `limit`)."""
        names = dict(channels or {"alerts": "C0ALERTS", "ml-team": "C0MLTEAM", "digest": "C0DIGEST"})
        self._s = _State(token, names, frozenset(scopes), page_size)
        self._s.meta = {cid: _Channel(cid, name, name in private) for name, cid in names.items()}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> FakeSlack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/api/"

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/hooks/T000/B000/secret"

    # -- scripting and inspection -------------------------------------------------------------------
    def fail(self, method: str, failure: Failure, times: int = 1) -> None:
        with self._lock:
            self._s.failures.setdefault(method, deque()).extend([failure] * times)

    def add_channel(self, name: str, channel_id: str, *, private: bool = False) -> None:
        with self._lock:
            self._s.channels[name] = channel_id
            self._s.meta[channel_id] = _Channel(channel_id, name, private)

    def rename_channel(self, old: str, new: str) -> None:
        """Like Slack: the id stays, the old name stops working and is kept in `previous_names`."""
        with self._lock:
            cid = self._s.channels.pop(old)
            self._s.channels[new] = cid
            ch = self._s.meta[cid]
            ch.previous_names.insert(0, old)
            ch.name = new

    def archive_channel(self, name: str) -> None:
        with self._lock:
            self._s.meta[self._s.channels[name]].archived = True

    def unarchive_channel(self, name: str) -> None:
        with self._lock:
            self._s.meta[self._s.channels[name]].archived = False

    def remove_bot(self, name: str) -> None:
        """The bot leaves (is removed from) `name`: a private channel then answers
        `channel_not_found`, a public one `not_in_channel`."""
        with self._lock:
            self._s.meta[self._s.channels[name]].member = False

    def invite_bot(self, name: str) -> None:
        with self._lock:
            self._s.meta[self._s.channels[name]].member = True

    def set_token(self, token: str) -> None:
        """The token the workspace accepts (revoke / rotate): any other answers `invalid_auth`."""
        with self._lock:
            self._s.token = token

    def hold(
        self,
        method: str,
        *,
        process_first: bool = False,
        only: Callable[[dict[str, Any]], bool] | None = None,
    ) -> Hold:
        """Hold the next `method` response until `release()`; with `process_first` the message is
        stored before the hold (the post arrived, its answer did not); with `only`, the next call
        whose params it accepts (the others pass)."""
        h = Hold()
        self.fail(method, Failure(hold=h, process_first=process_first, only=only))
        return h

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._s.requests)

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method]

    @property
    def messages(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self._s.messages]

    @property
    def files(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(f) for f in self._s.files]

    # -- API behaviour ------------------------------------------------------------------------------
    def _channel_id(self, channel: str, *, by_name: bool) -> str | None:
        ids = set(self._s.channels.values())
        if channel in ids:
            return channel
        if by_name:
            return self._s.channels.get(channel.removeprefix("#"))
        return None

    def _visible(self, cid: str) -> bool:
        """A private channel the bot is not in does not exist, as far as the bot can tell."""
        ch = self._s.meta.get(cid)
        return ch is None or ch.member or not ch.private

    def _next_ts(self) -> str:
        self._s.ts_counter += 1
        return f"1767225600.{self._s.ts_counter:06d}"

    def _post_message(self, p: dict[str, Any]) -> dict[str, Any]:
        cid = self._channel_id(str(p.get("channel", "")), by_name=True)
        if cid is None or not self._visible(cid):
            return {"ok": False, "error": "channel_not_found"}
        if self._s.meta[cid].archived:
            return {"ok": False, "error": "is_archived"}
        if not self._s.meta[cid].member:
            return {"ok": False, "error": "not_in_channel"}
        if not p.get("text") and not p.get("blocks"):
            return {"ok": False, "error": "no_text"}
        thread_ts = p.get("thread_ts")
        if thread_ts and not any(m["ts"] == thread_ts and m["channel"] == cid for m in self._s.messages):
            return {"ok": False, "error": "thread_not_found"}
        meta = p.get("metadata")
        if isinstance(meta, str):
            meta = json.loads(meta)
        msg = {
            "channel": cid,
            "ts": self._next_ts(),
            "text": p.get("text"),
            "blocks": p.get("blocks"),
            "thread_ts": thread_ts,
            "reply_broadcast": bool(p.get("reply_broadcast")),
            "metadata": meta,
        }
        self._s.messages.append(msg)
        return {
            "ok": True,
            "channel": cid,
            "ts": msg["ts"],
            "message": {"text": msg["text"], "ts": msg["ts"]},
        }

    def _history(self, p: dict[str, Any], replies: bool) -> dict[str, Any]:
        cid = self._channel_id(str(p.get("channel", "")), by_name=False)
        if cid is None or not self._visible(cid):
            return {"ok": False, "error": "channel_not_found"}
        meta = str(p.get("include_all_metadata", "")).lower() in ("1", "true")
        shown = sorted([*self._s.messages, *self._file_shares()], key=lambda m: m["ts"])
        if replies:
            ts = p.get("ts")
            found = [m for m in shown if m["channel"] == cid and (m["ts"] == ts or m["thread_ts"] == ts)]
        else:
            found = [m for m in shown if m["channel"] == cid and (not m["thread_ts"] or m["reply_broadcast"])]
            found.reverse()
        limit = int(p.get("limit") or 100)
        out = [
            {k: v for k, v in m.items() if k != "metadata" or meta} | {"type": "message"}
            for m in found[:limit]
        ]
        return {"ok": True, "channel": cid, "messages": out, "has_more": len(found) > limit}

    def _file_shares(self) -> list[dict[str, Any]]:
        """The message a file shared into a channel (or a thread) shows as in its history: `upload`
        true and the file in `files` with its `id`, `name` and `title` (the message shape of
        `conversations.replies` / `.history` as the SDK types generated from Slack's answers list it:
        https://deno.land/x/slack_web_api_client@0.2.7/client/generated-response/ConversationsRepliesResponse.ts,
        `Message.files: FileElement[]`, `Message.upload`)."""
        return [
            {
                "channel": f["channel"],
                "ts": f["ts"],
                "text": f.get("initial_comment") or "",
                "thread_ts": f["thread_ts"],
                "reply_broadcast": False,
                "upload": True,
                "files": [{"id": f["id"], "name": f["name"], "title": f["title"]}],
            }
            for f in self._s.files
            if f["channel"]
        ]

    def _list_conversations(self, p: dict[str, Any]) -> dict[str, Any]:
        types = [t.strip() for t in str(p.get("types") or "public_channel").split(",") if t.strip()]
        if any(t not in ("public_channel", "private_channel", "mpim", "im") for t in types):
            return {"ok": False, "error": "invalid_types"}
        needed = [
            scope
            for t, scope in (("public_channel", "channels:read"), ("private_channel", "groups:read"))
            if t in types and scope not in self._s.scopes
        ]
        if needed:
            provided = ",".join(sorted(self._s.scopes))
            return {"ok": False, "error": "missing_scope", "needed": ",".join(needed), "provided": provided}
        try:
            limit = int(p.get("limit") or 100)
        except ValueError:
            return {"ok": False, "error": "invalid_limit"}
        if not 1 <= limit <= 1000:
            return {"ok": False, "error": "invalid_limit"}
        start = 0
        if p.get("cursor"):
            try:
                start = int(base64.b64decode(str(p["cursor"])).decode().removeprefix("offset:"))
            except ValueError:
                return {"ok": False, "error": "invalid_cursor"}
        exclude_archived = str(p.get("exclude_archived", "")).lower() in ("1", "true")
        listed = [
            ch
            for ch in sorted(self._s.meta.values(), key=lambda c: c.id)
            if ("private_channel" if ch.private else "public_channel") in types
            and not (exclude_archived and ch.archived)
            and self._visible(ch.id)
        ]
        end = start + min(limit, self._s.page_size)
        cursor = base64.b64encode(f"offset:{end}".encode()).decode() if end < len(listed) else ""
        return {
            "ok": True,
            "channels": [ch.as_api() for ch in listed[start:end]],
            "response_metadata": {"next_cursor": cursor},
        }

    def _get_upload_url(self, p: dict[str, Any]) -> dict[str, Any]:
        if not p.get("filename") or not p.get("length"):
            return {"ok": False, "error": "invalid_arguments"}
        fid = "F" + hashlib.sha1(f"{p['filename']}{len(self._s.uploads)}".encode()).hexdigest()[:10].upper()
        self._s.uploads[fid] = {"filename": p["filename"], "length": int(p["length"]), "data": None}
        return {"ok": True, "file_id": fid, "upload_url": f"{self.url}/upload/{fid}"}

    def _complete_upload(self, p: dict[str, Any]) -> dict[str, Any]:
        files = json.loads(p.get("files") or "[]")
        out = []
        for f in files:
            up = self._s.uploads.get(f.get("id"))
            if up is None or up["data"] is None:
                return {"ok": False, "error": "file_not_found"}
            if len(up["data"]) != up["length"]:
                return {"ok": False, "error": "file_size_mismatch"}
            cid = p.get("channel_id")
            if cid and self._channel_id(cid, by_name=False) is None:
                return {"ok": False, "error": "channel_not_found"}
            rec = {"id": f["id"], "title": f.get("title"), "channel": cid, "thread_ts": p.get("thread_ts")}
            share = {"ts": self._next_ts(), "name": up["filename"]}  # its file-share message
            self._s.files.append(
                rec | share | {"data": up["data"], "initial_comment": p.get("initial_comment")}
            )
            out.append(rec)
        return {"ok": True, "files": out}

    def _dispatch(self, method: str, headers: Any, p: dict[str, Any]) -> dict[str, Any]:
        if headers.get("Authorization") != f"Bearer {self._s.token}":
            return {"ok": False, "error": "invalid_auth" if headers.get("Authorization") else "not_authed"}
        if method == "auth.test":
            return {"ok": True, "team_id": "T000", "user_id": "U0BOT", "bot_id": "B0BOT"}
        if method == "chat.postMessage":
            return self._post_message(p)
        if method == "conversations.list":
            return self._list_conversations(p)
        if method in ("conversations.history", "conversations.replies"):
            return self._history(p, replies=method == "conversations.replies")
        if method == "files.getUploadURLExternal":
            return self._get_upload_url(p)
        if method == "files.completeUploadExternal":
            return self._complete_upload(p)
        return {"ok": False, "error": "unknown_method"}

    def _handle(self, h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        parsed = urllib.parse.urlsplit(h.path)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        if parsed.path.startswith("/api/"):
            params |= _parse_body(h.headers, body)
            method = parsed.path.removeprefix("/api/")
        elif parsed.path.startswith("/upload/"):
            method = "upload"
        elif parsed.path.startswith("/hooks/"):
            method, params = "webhook", json.loads(body or b"{}")
        else:
            return 404, {}, b"not found"
        with self._lock:
            self._s.requests.append(Recorded(method, h.path, dict(h.headers.items()), body, params))
            queue = self._s.failures.get(method)
            failure = queue.popleft() if queue and (queue[0].only is None or queue[0].only(params)) else None
        if failure is not None and not failure.after_processing:
            if failure.delay:
                time.sleep(failure.delay)
            if failure.hold is not None:
                failure.hold.wait()
            if failure.reset:
                return _RESET, {}, b""
            if failure.body is not None:
                return 200, {"Content-Type": "application/gzip"}, failure.body
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
            err = {
                "ok": False,
                "error": failure.error or ("ratelimited" if failure.status == 429 else "fatal_error"),
            }
            return failure.status, headers, json.dumps(err).encode()
        with self._lock:
            if method == "upload":
                up = self._s.uploads.get(parsed.path.rsplit("/", 1)[-1])
                if up is None:
                    return 404, {}, b"no such upload"
                up["data"] = body
                result: Any = f"OK - {len(body)}"
            elif method == "webhook":
                self._s.messages.append(
                    {"channel": "webhook", "ts": self._next_ts(), "thread_ts": None} | params
                )
                result = "ok"
            else:
                result = self._dispatch(method, h.headers, params)
        if failure is not None:  # processed, then stall past the client's timeout, hold or reset
            time.sleep(failure.delay)
            if failure.hold is not None:
                failure.hold.wait()
            if failure.reset:
                return _RESET, {}, json.dumps(result).encode()
        if isinstance(result, str):
            return 200, {"Content-Type": "text/plain"}, result.encode()
        return 200, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(result).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                status, headers, body = fake._handle(self)
                if status == _RESET:
                    self._reset(body)
                    return
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Type" not in headers:
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)  # the client may have timed out and left

            def _reset(self, body: bytes) -> None:
                """Status line, headers and half the body, then a TCP RST (SO_LINGER 0 + close)."""
                body = body or b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                self.close_connection = True

            do_GET = _serve
            do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
