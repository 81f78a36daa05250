"""Simulated fleets that several test files read, written once per test session.

Seed 7 over 14 days takes about 5 s to simulate (one core, 2026-12-06), and three files read that fleet; seven read
seed 7 over 2 days. Each fleet is written once into a directory the session's xdist workers share
(`write_fleet` under a file lock, so a worker that asks while another writes waits for it), then only
read. `shared_fleet` checks on every use that no file in it was added, removed or rewritten since it
was written: a test that writes beside the export fails there, naming the fleet, instead of changing
what another test reads. A test that needs to change its fleet simulates its own (`write_fleet`).

`shared_cli_json` keeps the JSON of a command run on a shared fleet, so two files that assert on
`gpucost analyze` of the same fleet with the same arguments (the ground-truth seed 7 and the real
shapes' files) run it once.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from monitor.cli import main
from monitor.simulate import write_fleet

__all__ = ["cli_json", "shared_cli_json", "shared_fleet"]

#: The shared fleets' billing is read from its Parquet file only; the NDJSON's encoding was about
#: a quarter of each fleet's time (seed 7 over 14 days: 5.0 to 6.2 s against 6.9 to 7.8 s, 2026-12-07).
PARQUET = ("parquet",)


def _root(factory: pytest.TempPathFactory) -> Path:
    """The session's directory for shared fleets: under xdist each worker's base temp is a child
    (`…/pytest-N/popen-gw0`) of the session's, so the fleets live one level up."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-fleets"
    root.mkdir(exist_ok=True)
    return root


def _manifest(fleet: Path) -> dict[str, list[int]]:
    """Each file's size and modification time: what a write into the fleet changes."""
    return {
        str(p.relative_to(fleet)): [p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted(fleet.rglob("*"))
        if p.is_file()
    }


def shared_fleet(
    factory: pytest.TempPathFactory, seed: int, days: int, inject: bool = True
) -> tuple[Path, dict[str, Any]]:
    """The fleet `write_fleet(seed=seed, days=days, inject=inject)` writes (its billing as Parquet
    alone), and its summary."""
    root = _root(factory)
    name = f"seed{seed}-{days}d-{'injected' if inject else 'clean'}"
    fleet, meta = root / name, root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not meta.exists():
            shutil.rmtree(fleet, ignore_errors=True)  # a worker that died while writing it
            summary = write_fleet(fleet, seed=seed, days=days, inject=inject, formats=PARQUET)
            meta.write_text(json.dumps({"summary": summary, "manifest": _manifest(fleet)}), encoding="utf-8")
        saved = json.loads(meta.read_text(encoding="utf-8"))
    now, then = _manifest(fleet), saved["manifest"]
    changed = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
    assert not changed, f"a test changed the shared fleet {fleet} (simulate a fleet of its own): {changed}"
    return fleet, saved["summary"]


def cli_json(argv: list[str]) -> Any:
    """`gpucost <argv> --format json`, run in-process, parsed."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*argv, "--format", "json"])
    assert rc == 0, f"gpucost {' '.join(argv)} exited {rc}"
    return json.loads(buf.getvalue())


def shared_cli_json(factory: pytest.TempPathFactory, argv: list[str]) -> Any:
    """`cli_json(argv)`, run once per session for the same arguments."""
    root = _root(factory)
    key = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:16]
    out = root / f"run-{key}.json"
    with FileLock(str(root / f"run-{key}.lock")):
        if not out.exists():
            out.write_text(json.dumps(cli_json(argv)), encoding="utf-8")
        return json.loads(out.read_text(encoding="utf-8"))
