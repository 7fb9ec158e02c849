# make install | make run | make lint | make test | make test-fast | make bench | make docs | make clean  (see README.md)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Extra pytest arguments, e.g. make test-fast PYTEST_ARGS="-x -k engine"
PYTEST_ARGS ?=
# Python writes its bytecode caches (__pycache__/, ignored by git) here even where the environment
# sets PYTHONDONTWRITEBYTECODE: without them each pytest process rewrites every test module's
# asserts again (about 4 s of CPU per process here, twice per make test-fast) and each process a
# test starts recompiles the hetsim and validation modules it imports.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install run lint test test-fast bench docs clean

# Re-installs only when the project or its pins change. The packages go in with uv (pinned in
# constraints-dev.txt, itself put in by pip): it fetches and unpacks in parallel, seconds here
# against pip's two minutes. uv reads no pip configuration, so the sources pip is configured with
# (find-links, extra indexes: here the local CPU torch wheel and mirrors) are passed on, and every
# index is searched for the best match, as pip does. Should uv fail, pip installs the same pins.
# Bytecode: uv's --compile-bytecode compiles every module of every package (torch's thousands:
# 40 of a clean install's 45 s here); instead two processes import what hetsim, validation and
# the tests use, which writes the bytecode of those (12 s), so that a shell that sets
# PYTHONDONTWRITEBYTECODE (this machine's does) does not compile torch anew in every command typed
# by hand. Making the first optimizer imports torch._dynamo, as every rank does.
PIP_CONFIG = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
UV_SOURCES = $(addprefix --find-links=,$(sort $(call PIP_CONFIG,find-links) $(PIP_FIND_LINKS))) \
	$(addprefix --index-url=,$(firstword $(call PIP_CONFIG,index-url) $(PIP_INDEX_URL))) \
	$(addprefix --extra-index-url=,$(call PIP_CONFIG,extra-index-url) $(PIP_EXTRA_INDEX_URL))
EXTRAS := -c constraints-dev.txt -e ".[validation,distributed,dev,docs]"
WARM_TORCH := import torch, torch.distributed, torch.nn.parallel; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
WARM_REST := import pandas, pyarrow.parquet, scipy.integrate, scipy.optimize, scipy.stats, matplotlib.pyplot, \
	dask.distributed, hypothesis, nbclient, mkdocs.commands.build, hetsim.cli.main
$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints-dev.txt uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) --index-strategy unsafe-best-match $(UV_SOURCES) $(EXTRAS) \
	|| $(PY) -m pip install --quiet --disable-pip-version-check $(EXTRAS)
	$(PY) -c "$(WARM_TORCH)" & torch=$$!; $(PY) -c "$(WARM_REST)"; rest=$$?; wait $$torch && test $$rest -eq 0
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m hetsim sweep

# lint: ruff (rules and their reasons in pyproject.toml; the format too) and mypy (hetsim,
# validation, benchmarks); any of them finding anything fails the target, and so make test.
LINT = $(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check --quiet . && $(VENV)/bin/mypy
lint: install
	$(LINT)

# Tests. pytest's exit status is make's: any failure, an error, or no test collected (status 5)
# fails the target. Never prefix these recipes with `-` or append `|| true`.
# test: lint and the whole suite, slow and multi-process tests included (what CI runs, with CI=1), in two lanes.
# 1. Every test but the `serial` ones, on both cores (pytest-xdist), the multi-process ones among
#    them: those check results, exit statuses and messages, not times. One at a time they left
#    part of the 2 cores idle (ranks waiting on each other, on start-up or on an injected delay);
#    here the other worker's tests fill it. Tests go out one at a time (--maxschedchunk 1), files
#    with multi-process and slow tests first (tests/conftest.py), so no long test is left for the
#    end on one worker.
# 2. The `serial` tests, one at a time: each compares measured wall-clock times with a bound that
#    another test's processes would eat into (a stopped rank named within heartbeat.STALE_S + 5 s,
#    a signalled sweep gone within 10 s, the processes gone within 2 s of a killed launcher, a
#    new batch size's one-off cost outside the step, time to target within 30% of its prediction,
#    the neighbour's duty cycle, a profile's time budget, the real-run notebooks' predictions
#    against their measured times, a profiler trace's slowest rank against the run's own). A test
#    whose bound holds with a wide margin beside other tests' load stays on lane 1 (its marks say why).
# Lint (the lint target's commands) runs beside lane 1, its output held until lane 1 ends: mypy
# on a clean clone takes about 35 s of one core, which lane 1's waiting ranks leave idle now and
# then. Either failing fails the target (the serial lane is then not run).
test: install
	($(LINT)) > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(PY) -m pytest -m "not serial" -n 2 --maxschedchunk 1 $(PYTEST_ARGS); tests=$$?; \
	wait $$lint; linted=$$?; cat $(VENV)/lint.log; \
	test $$tests -eq 0 -a $$linted -eq 0
	$(PY) -m pytest -m serial $(PYTEST_ARGS)

# test-fast: the quick lane for the edit-test loop, on both cores; skips tests marked
# slow (over ~0.15 s of CPU each here) or multiprocess (see the markers in pyproject.toml).
# It must stay under 45 s beside one busy process (python benchmarks/bench_test_suite.py): a new
# test over ~0.15 s gets @pytest.mark.slow. Find them with make test-fast PYTEST_ARGS="--durations=20".
test-fast: install
	$(PY) -m pytest -m "not slow and not multiprocess" -n 2 $(PYTEST_ARGS)

# docs: the MkDocs site (docs/, mkdocs.yml) into site/; --strict makes a broken link or reference an
# error. Not --quiet: it silences the warnings before --strict counts them, and the build passes.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# bench: the quick benchmarks (a minute or two here); the others, each with its command, are in
# docs/benchmarks.md. Each prints JSON: mean, median and 90th percentile over repetitions.
bench: install
	$(PY) benchmarks/bench_sweep.py --json
	$(PY) benchmarks/bench_startup.py
	$(PY) benchmarks/bench_plugin_policy.py

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis .mypy_cache .ruff_cache
