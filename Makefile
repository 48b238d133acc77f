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
	$(VENV)/bin/lint-imports

format:
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# pytest exits 5 when it collected no test; that fails here like any other non-zero status.
# One pytest run (one summary line for CI): the tests, plus the notebooks re-run by nbval and
# compared with their saved outputs (notebooks/sanitize.cfg blanks timings, paths, run folders).
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg
# pytest-xdist: `make test TEST_WORKERS=auto` runs one worker per core (a file's tests stay
# together, the files that start nsys one after another: tests/parallel.py; 7.8 min from a fresh
# clone here). One process is the default: under two busy workers, nsys 2022.4 starts failed
# with "End of file" in 3 of 3 CI runs (docs/install.md). The 25 slowest steps are in the log.
TEST_WORKERS ?= 0
XDIST := -n $(TEST_WORKERS) --dist loadfile --durations=25
# The last line says what ran and where the full log is (pytest's own summary line stays above it).
TEST_LOG ?= .cache/make-test.log
test: install lint
	@mkdir -p $(dir $(TEST_LOG))
	@{ $(PY) -m pytest -v $(XDIST) tests notebooks $(NBVAL); echo $$? > $(TEST_LOG).status; } 2>&1 \
	    | tee $(TEST_LOG); status=$$(cat $(TEST_LOG).status); \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; fi; \
	summary=$$(grep -E '^=+ .* in [0-9.]+s' $(TEST_LOG) | tail -n 1 | sed -E 's/^=+ //; s/ =+$$//'); \
	echo "make test: lint ok; pytest (tests/ + notebooks/ via nbval): $${summary:-no summary}" \
	    "(exit $$status); full log $(TEST_LOG), real traces decompressed in .cache/real/"; \
	exit $$status

demo: install
	$(PY) notebooks/execute.py notebooks/quickstart.ipynb $(DEMO_OUT)
	@run=$$(ls -td $(DEMO_OUT)/jlprof_runs/*/ 2>/dev/null | head -n 1); \
	echo "make demo: ran notebooks/quickstart.ipynb end to end (%%dlprof under nsys): executed" \
	    "notebook $(DEMO_OUT)/quickstart.ipynb, reports and raw nsys files in $${run:-$(DEMO_OUT)/jlprof_runs/}"

bench: install
	$(PY) bench/run_bench.py
	$(PY) bench/magic_bench.py
