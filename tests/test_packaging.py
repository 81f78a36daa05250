"""A non-editable install works: the wheel carries `monitor`, `alerts` and `queries/*.sql`."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("gpucost-*.whl")
    return whl


def test_wheel_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "monitor/__init__.py" in names
    assert "alerts/__init__.py" in names
    assert "monitor/cli/__init__.py" in names
    sql = {n for n in names if n.startswith("queries/") and n.endswith(".sql")}
    shipped = {f"queries/{p.name}" for p in (REPO / "queries").glob("*.sql")}
    assert sql == shipped
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.slow
def test_installed_wheel_runs_help_and_simulate(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Install the wheel itself (no deps: the registry may be slow); borrow the dependencies from the
    # test interpreter's site-packages via a .pth line. Its editable finder for `monitor` is not
    # processed from there, so `monitor` must come from the wheel.
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    Path(site, "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    gpucost = env_dir / "bin" / "gpucost"
    where = subprocess.run(
        [str(py), "-c", "import monitor, queries; print(monitor.__file__); print(queries.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert str(env_dir) in where.splitlines()[0] and str(env_dir) in where.splitlines()[1]
    out = subprocess.run([str(gpucost), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0
    for cmd in ("run", "analyze", "skus", "report", "gpus", "digest", "check", "simulate", "load"):
        assert f"  {cmd}" in out.stdout
    sim = subprocess.run(
        [str(gpucost), "simulate", "--out", str(tmp_path / "fleet"), "--days", "2", "--seed", "3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert sim.returncode == 0, sim.stderr
    assert (tmp_path / "fleet" / "ground_truth.json").is_file()


def test_every_dependency_is_bounded_and_pinned_by_constraints() -> None:
    """Installs are reproducible: each dependency has an upper bound (the next major, untested),
    and constraints.txt, what `make demo` / `make test` install from, pins a version inside it."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    repo = Path(__file__).resolve().parents[1]
    project = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [Requirement(r) for r in project["dependencies"]]
    specs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for line in (repo / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    unbounded, unpinned, outside = [], [], []
    for req in specs:
        name = canonicalize_name(req.name)
        if name in {"tzdata", "setuptools", "wheel"}:  # data / build tools: any recent one
            continue
        if not any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier):
            unbounded.append(req.name)
        if name not in pins:
            unpinned.append(req.name)
        elif not req.specifier.contains(pins[name]):
            outside.append(f"{req.name}=={pins[name]} not in {req.specifier}")
    assert (unbounded, unpinned, outside) == ([], [], [])
