# Two commands on a fresh machine: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
DEMO_CONFIG ?= deploy/config/demo.toml
# loadfile: a module's tests share one worker, so a module-scoped fixture (an emulator fleet, a
# daemon run) is built once, not once per worker. Three workers on two cores: about a sixth of the
# workers' time is waiting (daemons' group_wait, the BigQuery emulator's process, retries), which a
# third worker fills: 263 and 271 s against 303 and 304 s with two, alternated (2026-12-06).
PYTEST_ARGS ?= -n 3 --dist loadfile --no-loadscope-reorder

.PHONY: demo test lint bench clean venv bqemu postgres upgrade

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installs are pinned by constraints.txt (the versions the suite last passed with); `make upgrade`
# moves them. uv (from the same registry, into the venv first) installs them: 11 s where pip took 40
# on the development machine, the venv's creation included (pip's installs, this venv's and the
# emulator's, were a fifth of `make test` from a fresh clone). Where uv cannot be had or fails, pip
# installs them as before. Bytecode is compiled at install, as pip does: 8 s more, against 19 s
# more in the first test run without it.
UV_PIN ?= uv==0.13.9
install = { $(PIP) install '$(UV_PIN)' && $(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode $(1); } \
	|| { echo "uv unavailable: installing with pip" >&2; $(PIP) install $(1); }

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(call install,-c constraints.txt -e .)
	touch $@

$(VENV)/.installed-test: $(BIN)/python pyproject.toml constraints.txt
	$(call install,-c constraints.txt -e '.[test]')
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/gpucost run --config $(DEMO_CONFIG) $(if $(ONCE),--once,)

# The BigQuery emulator (PyPI bqemulator) lives in its own venv: its pins clash with ours.
bqemu:
	PYTHON=$(PYTHON) UV_PIN='$(UV_PIN)' bash tests/emulators/bqemu_setup.sh

# PostgreSQL server binaries for the PostgreSQL state-store tests (the tests start their own server).
postgres:
	bash tests/emulators/postgres_setup.sh

# The project's own modules are compiled once before the suite (0.4 s): where the environment sets
# PYTHONDONTWRITEBYTECODE, as the development machine's does, every daemon and CLI process the suite
# starts (seventy, counted on 2026-12-05) would compile them from source again. The project's venv,
# the emulator's venv and PostgreSQL's binaries are set up side by side: 22 s from a fresh clone,
# against 33 s one after the other (2026-12-06).
test:
	$(MAKE) --no-print-directory -j3 $(VENV)/.installed-test bqemu postgres
	$(BIN)/ruff check monitor alerts tests bench
	$(BIN)/python -m compileall -q -j 0 monitor alerts tests > /dev/null
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The newest versions pyproject.toml allows, resolved in a scratch venv, written to constraints.txt;
# then the project venv is rebuilt from them and the suite runs (git diff constraints.txt shows what moved).
upgrade:
	rm -rf .venv-upgrade
	$(PYTHON) -m venv .venv-upgrade
	.venv-upgrade/bin/python -m pip --disable-pip-version-check -q install -e '.[test]'
	{ sed -n '1,3p' constraints.txt; .venv-upgrade/bin/python -m pip freeze --exclude-editable \
	  --disable-pip-version-check | grep -v '^gpucost'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-upgrade $(VENV)
	$(MAKE) test

bench: $(VENV)/.installed
	$(BIN)/python bench/bench.py $(BENCH_ARGS)

clean:
	rm -rf out build dist *.egg-info .pytest_cache .ruff_cache
