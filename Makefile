# make install | make run | make test  (see README.md)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test bench clean

# Re-installs only when the project or its pins change.
$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints-dev.txt -e ".[validation,distributed,dev]"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m hetsim sweep

test: install
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/bench_sweep.py --json

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
