# Two commands: `make demo` and `make test`. Both bootstrap .venv with the machine's python3.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# pytest-xdist workers: two halves the suite's time on a 2-core machine (most tests wait on
# real processes); each file stays on one worker, so its module-scoped stacks are started once.
TEST_WORKERS ?= 2

.PHONY: demo test bench lint engines clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/syshax demo

test: $(STAMP)
	@command -v systemd-analyze >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq systemd >/dev/null; }
	$(PY) tools/build_engines.py --if-missing
	$(VENV)/bin/ruff check syshaxd sim demo console tests bench tools
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

bench: $(STAMP)
	$(PY) bench/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check syshaxd sim demo console tests bench tools
	$(VENV)/bin/mypy

engines: $(STAMP)
	$(PY) tools/build_engines.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
