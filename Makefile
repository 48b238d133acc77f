# The two set-up commands of the README, for a fresh Debian/Ubuntu machine:
#   make demo   installs everything, runs notebooks/quickstart.ipynb end to end (%%dlprof profiles
#               the example training loop under nsys) into demo_out/, reports included
#   make test   installs everything, then lints and runs the whole test suite
# Both install system packages (.ci/install-system, idempotent) and a .venv with jlprof.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= test,fast,notebook,ui,torch
DEMO_OUT ?= demo_out

.PHONY: system install lint format test demo bench

system:
	@bash .ci/install-system

install: system
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[setup] pip install -e '.[$(EXTRAS)]' into $(VENV)"
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format:
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# pytest exits 5 when it collected no test; that fails here like any other non-zero status.
# One pytest run (one summary line for CI): the tests, plus the notebooks re-run by nbval and
# compared with their saved outputs (notebooks/sanitize.cfg blanks timings, paths, run folders).
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg
test: install lint
	@$(PY) -m pytest -v tests notebooks $(NBVAL); status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; fi; \
	exit $$status

demo: install
	$(PY) notebooks/execute.py notebooks/quickstart.ipynb $(DEMO_OUT)
	@echo "executed notebook: $(DEMO_OUT)/quickstart.ipynb; reports and raw nsys files in" \
	    "$(DEMO_OUT)/jlprof_runs/<run>/ (open the notebook in JupyterLab to see the outputs)"

bench: install
	$(PY) bench/run_bench.py
	$(PY) bench/magic_bench.py
