# Developer and CI entry points. `make install` builds .venv; the other targets use it when it exists
# and the current python3 otherwise (PY=... overrides).
PYTHON ?= python3
VENV ?= .venv
PY ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,$(PYTHON))
EXTRAS ?= test,fast,notebook

.PHONY: install lint format test demo

install:
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q -e '.[$(EXTRAS)]'

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format:
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# pytest exits 5 when it collected no test; that fails here like any other non-zero status.
test: lint
	@$(PY) -m pytest -v; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; fi; \
	exit $$status

demo:
	$(PY) -m jlprof --help
