"""Paths a setting names, as the user's file system has them."""

from __future__ import annotations

from pathlib import Path

__all__ = ["file_in_the_way"]


def file_in_the_way(path: Path) -> Path | None:
    """The file that stops `path` (a directory to make, or a file to make in its directory) from
    being created: `path` itself or one of its parents, when it exists and is not a directory.
    Never creates anything. One walk for `state.url`, `digest.out_dir` and `alerts.console_dir`.

    >>> file_in_the_way(Path("/")) is None
    True
    """
    return next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
