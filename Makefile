# The two set-up commands of the README, for a fresh Debian/Ubuntu machine:
#   make demo   installs everything, profiles the example training loop under nsys, writes reports
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
test: install lint
	@$(PY) -m pytest -v; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; fi; \
	exit $$status

demo: install
	$(PY) -m jlprof --key_node=optimizer_step --reports=all --formats=csv,json \
	    --output_path=$(DEMO_OUT) -f true $(PY) examples/train_loop.py --steps 20
	@echo "reports in $(DEMO_OUT)/ (jlprof_*.csv, jlprof_*.json); raw nsys files kept beside them"

bench: install
	$(PY) bench/run_bench.py
