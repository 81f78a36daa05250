"""DuckDB draws a progress bar on stdout (terminal or not) for any query running past 2 s: at scale
it landed in `gpucost jobs`'s output under cProfile (3.28 s for the export's check), and would in
`analyze --format json > file` and the daemon's output. Every billing connection gpucost opens has
it off (`open_billing_db`); gpucost reports its own progress (`monitor.progress`).

Asked in a process of its own: DuckDB's default differs under pytest (off) and in a command
(on, with stdout a pipe), so only a command shows what a user gets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import json, sys, duckdb
from monitor.sources.duckdb_conn import open_billing_db
db = sys.argv[1]
open_billing_db(db).close()
bar = "SELECT current_setting('enable_progress_bar')"
conns = {"bare": duckdb.connect(), "memory": open_billing_db(None), "file": open_billing_db(db)}
seen = {name: c.execute(bar).fetchone()[0] for name, c in conns.items()}
conns["file"].close()
seen["read_only"] = open_billing_db(db, read_only=True).execute(bar).fetchone()[0]
print(json.dumps(seen))
"""


def test_every_billing_connection_draws_no_progress_bar(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "billing.duckdb")],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(out.stdout)
    assert seen.pop("bare") is True  # DuckDB's default in a command: what the setting is for
    assert seen == {"memory": False, "file": False, "read_only": False}
