# Two entry points (see README): `make demo` and `make test`. Both create .venv on
# first use, from the lock (locks/README.md): pyproject.toml holds ranges, locks/main.txt
# the exact set. pip takes the lock's `torch==2.13.0` from the CPU build on disk, so no
# multi-GB CUDA build is resolved. `make test` also builds .venv-verl from locks/verl.txt:
# verl 0.9.1 caps transformers below 5.11, so its adapter is tested in its own resolution.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(VENV)/tools/bin/uv
VERL_VENV := .venv-verl
VERL_STAMP := $(VERL_VENV)/.installed
# The tests that import verl; the main environment has no verl and skips them.
VERL_TESTS := tests/test_integrations_verl.py tests/test_integrations_verl_hindsight.py
# The tests of what depends on transformers' cache interface (its argument's name, cache
# layers, checkpointing with a cache): also run in .venv-verl, whose transformers (5.10.4)
# is the oldest pyproject.toml admits.
OLDEST_TRANSFORMERS_TESTS := tests/test_kv_cache.py tests/test_masked_logits.py \
	tests/test_shared_prefix.py tests/test_batching.py

.PHONY: setup demo test test-fast test-all lint lock clean

# The locked set, then creditgym itself (its dependencies are the lock's). The stamp names
# the lock (tests/test_packaging_lock.py checks that the venv holds exactly its versions).
$(STAMP): pyproject.toml locks/main.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r locks/main.txt
	$(BIN)/pip install --quiet --no-deps -e .
	echo locks/main.txt > $(STAMP)

# verl's own resolution (`pip install .[verl]`, locked), for the verl adapter's tests.
$(VERL_STAMP): pyproject.toml locks/verl.txt
	test -x $(VERL_VENV)/bin/python || $(PY) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/pip install --quiet --upgrade pip
	$(VERL_VENV)/bin/pip install --quiet -r locks/verl.txt
	$(VERL_VENV)/bin/pip install --quiet --no-deps -e .
	echo locks/verl.txt > $(VERL_STAMP)

setup: $(STAMP)

# The fast regime (docs/small_model.md): the untrained `small` policy evaluated (before),
# then trained with GRPO on KeyDoor and evaluated (after), then the leaderboard and plots.
demo: $(STAMP)
	$(BIN)/python -m benchmarks.run --preset demo --credit none
	$(BIN)/python -m benchmarks.run --preset demo
	$(BIN)/python -m benchmarks.leaderboard --runs results/local/runs

# The suite as CI runs it (the locks first: in step with pyproject.toml): every test but
# those marked `slow` (about 5 min on the 2-core machine); the 10 slowest are listed at
# the end so that a test that grew slow is seen.
test: $(STAMP) $(VERL_STAMP)
	$(BIN)/python -m benchmarks.dependency_locks --check
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not slow" --durations=10
	$(VERL_VENV)/bin/python -m pytest -q $(VERL_TESTS) $(OLDEST_TRANSFORMERS_TESTS) tests/test_packaging_lock.py

# The contributors' loop: the fast tier alone, in .venv (no lock check, lint or verl venv).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --durations=10

# Everything, the slow end-to-end tests included (training runs, kill-and-resume, report
# rebuilds, the GPU check's CPU dry run): about 30 min more here. Run it before closing
# work that touches training, resume or the committed results.
test-all: $(STAMP) $(VERL_STAMP)
	$(BIN)/python -m benchmarks.dependency_locks --check
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q --durations=15
	$(VERL_VENV)/bin/python -m pytest -q $(VERL_TESTS) $(OLDEST_TRANSFORMERS_TESTS) tests/test_packaging_lock.py

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Resolve locks/ again from pyproject.toml's ranges (after changing them); needs a package
# registry. uv resolves (locks/README.md says why) in a venv of its own.
lock: $(STAMP)
	test -x $(UV) || ($(PY) -m venv $(VENV)/tools && $(VENV)/tools/bin/pip install --quiet uv==0.13.9)
	$(BIN)/python -m benchmarks.dependency_locks --uv $(UV)

clean:
	rm -rf $(VENV) $(VERL_VENV) .pytest_cache
