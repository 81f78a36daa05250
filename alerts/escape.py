"""Escaping text for Slack mrkdwn.

Slack parses `<...>` in message text as control sequences: `<!channel>` pings everybody,
`<http://x|label>` renders a link, `<@U123>` mentions a user. Any text that comes from billing data
(project ids, label values, instance names, titles built from them) is untrusted: a label value of
`<!channel> <http://evil|click>` must arrive as literal text. Slack's documented rule is to replace
exactly three characters with HTML entities; nothing else is needed (and escaping more would show
entity names to the reader).

>>> escape_mrkdwn("<!channel> <http://evil|click> & co")
'&lt;!channel&gt; &lt;http://evil|click&gt; &amp; co'
"""

from __future__ import annotations

__all__ = ["escape_mrkdwn", "truncate"]


def escape_mrkdwn(text: object) -> str:
    """`&` -> `&amp;`, `<` -> `&lt;`, `>` -> `&gt;` (in that order, so entities are not doubled)."""
    s = "" if text is None else str(text)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    """Cut `text` to `limit` characters without splitting an escape entity (`&lt;` etc.).

    Block Kit rejects over-long fields with `invalid_blocks`, a permanent error: truncating on our
    side keeps a long label from turning into a dropped alert.
    """
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"
