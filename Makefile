# Two entry points (see README): `make demo` and `make test`. Both create .venv on
# first use. torch==2.13.0 is installed before the project so that pip takes the local
# CPU build instead of resolving a multi-GB CUDA build.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint clean

# verl==0.9.1 requires transformers<5.11, below the project's pin, so it goes in without
# its dependencies; the `verl` extra holds what its advantage estimators import
# (docs/integrations.md).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev,trl,verl]"
	$(BIN)/pip install --quiet --no-deps verl==0.9.1
	touch $(STAMP)

setup: $(STAMP)

# The fast regime (docs/small_model.md): the untrained `small` policy evaluated (before),
# then trained with GRPO on KeyDoor and evaluated (after), then the leaderboard and plots.
demo: $(STAMP)
	$(BIN)/python -m benchmarks.run --preset demo --credit none
	$(BIN)/python -m benchmarks.run --preset demo
	$(BIN)/python -m benchmarks.leaderboard --runs results/local/runs

# The whole suite, as CI runs it; the 15 slowest tests are listed at the end so that a
# test that grew slow is seen.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q --durations=15

# For contributors: everything but the tests marked `slow` (end-to-end commands, training).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not slow" --durations=10

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache
