#!/usr/bin/env bash
# Create .venv-bqemu: the BigQuery emulator (PyPI `bqemulator`) in a virtualenv of its own.
#
# Why a separate venv: bqemulator pins sqlglot<30.12 and needs a duckdb version for which PyPI ships
# the `spatial` extension (duckdb-extension-spatial); both clash with the project's own pins. The
# emulator runs as a subprocess of the tests, so nothing of it is imported into the project's .venv.
#
# Idempotent: a stamp file records the hash of the pinned requirements and the Python version; a
# second run with the same pins only re-checks that DuckDB can load `spatial` (about a second).
# Needs only the package registry (no other network): DuckDB's extension is installed from the
# file inside the duckdb-extension-spatial wheel, so the emulator's own `INSTALL spatial` finds it
# already installed (in DuckDB's per-user extension directory, ~/.duckdb/extensions/v<version>/).
#
# Environment: BQEMU_VENV (default <repo>/.venv-bqemu), PYTHON (default python3), UV_PIN (a uv
# requirement, `uv==X.Y.Z`: install with uv; unset: with pip).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${BQEMU_VENV:-$repo/.venv-bqemu}"
python="${PYTHON:-python3}"
reqs="$here/bqemu-requirements.txt"
stamp="$venv/.bqemu-stamp"

want="$( { sha256sum "$reqs" | cut -d' ' -f1; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"

install_spatial() {
  # INSTALL from the wheel's file (no download), then prove LOAD works as the emulator will do it.
  "$venv/bin/python" - <<'PY'
import pathlib

import duckdb
import duckdb_extension_spatial

root = pathlib.Path(duckdb_extension_spatial.__file__).parent / "extensions"
ext = next(root.glob(f"v{duckdb.__version__}/spatial.duckdb_extension"), None)
if ext is None:
    raise SystemExit(f"bqemu_setup: no spatial extension for duckdb {duckdb.__version__} under {root}")
conn = duckdb.connect()
conn.execute(f"INSTALL '{ext}'")
conn.execute("LOAD spatial")
PY
}

spatial_loads() {
  "$venv/bin/python" -c 'import duckdb; duckdb.connect().execute("LOAD spatial")' >/dev/null 2>&1
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/bqemulator" ]]; then
  spatial_loads || install_spatial
  exit 0
fi

start=$SECONDS
echo "bqemu_setup: installing the BigQuery emulator into $venv (seconds with uv, about half a minute with pip)"
rm -rf "$venv"
trap 'rm -rf "$venv"; echo "bqemu_setup: FAILED; $venv removed (emulator tests will skip)" >&2' ERR
"$python" -m venv "$venv"
pip_install() {
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@" 2> >(grep -v '^WARNING: Location' >&2)
}
# With UV_PIN (the Makefile's), uv installs the pins: seconds where pip takes about 30; pip if uv
# cannot be had or fails.
if [[ -n "${UV_PIN:-}" ]] && pip_install "$UV_PIN" && "$venv/bin/uv" pip install --python "$venv/bin/python" -q --compile-bytecode -r "$reqs"; then
  :
else
  [[ -z "${UV_PIN:-}" ]] || echo "bqemu_setup: uv unavailable: installing with pip" >&2
  pip_install -r "$reqs"
fi
install_spatial
"$venv/bin/bqemulator" version >/dev/null
trap - ERR
echo "$want" >"$stamp"
echo "bqemu_setup: ready in $((SECONDS - start)) s"
