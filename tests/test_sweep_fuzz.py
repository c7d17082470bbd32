"""Property-based fuzzing of what a user hands the commands: sweep files of random shape and
values, the sweep's flags, and `benchmarks.run`'s flags. Whatever the input, the command
either accepts it or refuses it in one `error:` line with exit status 2, never with a
traceback, and writes nothing before the first run starts (`--dry-run`: no run starts).

Hypothesis draws the inputs (derandomized: the same examples on every machine, so a
failure here replays); `benchmarks/sweep_file.py` is what most of them meet.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditgym.benchmarks import sweep
from creditgym.benchmarks.cli import exit_on_usage_error
from creditgym.benchmarks.run import parse_config, resolve
from creditgym.benchmarks.run.validate import validate
from creditgym.benchmarks.sweep_file import FIELD_TYPES, WORD_LIST_FIELDS, expected_form

FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,  # writes nothing in the checkout
    suppress_health_check=[HealthCheck.too_slow],
)

# Text that is sometimes a valid value (names of envs, credit modules, models, dtypes) and
# sometimes not; no ALFWorld (its first use generates games for minutes).
WORDS = [
    "keydoor", "umbrella", "sysdiag", "grpo", "gigpo", "none", "random", "expert", "small",
    "auto", "float32", "fast", "return", "outcome", "inline", "test", "all", "delay=3",
    "delay=abc", "variance=high", "memory_leak", "cpu", "cuda:3", "1/2", "0/1", "-1", "x y",
    "", "é", "../up", "a,b", "nosuch-model-xyz",
]  # fmt: skip
JUNK_KEYS = ["sead", "grid", "common", "junk"]

scalars = st.one_of(
    st.integers(min_value=-3, max_value=40),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.booleans(),
    st.sampled_from(WORDS),
    st.text(max_size=6),
)
# Any TOML value: scalars, arrays, inline tables.
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    ),
    max_leaves=4,
)


def typed_value(key: str) -> st.SearchStrategy:
    """A value of `key`'s declared type (often valid, so that the fuzz reaches the checks
    of ranges and names past the type checks), or any value."""
    kind = FIELD_TYPES[key]
    if key in WORD_LIST_FIELDS:
        typed = st.one_of(st.sampled_from(WORDS), st.lists(st.sampled_from(WORDS), max_size=2))
    else:
        accepted, choices, _ = expected_form(kind)
        if choices is not None:
            typed = st.sampled_from([*choices, "bogus"])
        elif bool in accepted:
            typed = st.booleans()
        elif float in accepted:
            typed = st.one_of(st.integers(-1, 4), st.floats(-1, 4), st.just(math.nan))
        elif int in accepted:
            typed = st.integers(min_value=-2, max_value=4)
        else:
            typed = st.sampled_from(WORDS)
    return st.one_of(typed, typed, typed, values)


@st.composite
def tables(draw, in_grid: bool) -> dict[str, Any]:
    """A [common] or [[grid]] table: mostly RunConfig fields (in a grid a list is an axis,
    sometimes empty), now and then a key that is not one."""
    keys = draw(st.lists(st.sampled_from([*FIELD_TYPES, *JUNK_KEYS[:1]]), max_size=3, unique=True))
    table = {}
    for key in keys:
        if key not in FIELD_TYPES:
            table[key] = draw(values)
        elif in_grid and draw(st.booleans()):
            table[key] = draw(st.lists(typed_value(key), max_size=3))
        else:
            table[key] = draw(typed_value(key))
    return table


@st.composite
def documents(draw) -> dict[str, Any]:
    """A sweep file: mostly [common] and [[grid]] tables, now and then a value where a table
    belongs, a missing grid or an unknown section (Hypothesis prefers the first of a
    `sampled_from`, so the well-formed shape comes first)."""
    document: dict[str, Any] = {}
    common = draw(st.sampled_from(["table", "table", "none", "value"]))
    if common != "none":
        document["common"] = draw(tables(in_grid=False) if common == "table" else values)
    grid = draw(st.sampled_from(["tables", "tables", "tables", "none", "value"]))
    if grid != "none":
        document["grid"] = draw(
            st.lists(tables(in_grid=True), min_size=1, max_size=2) if grid == "tables" else values
        )
    if draw(st.sampled_from([False] * 9 + [True])):
        document[draw(st.sampled_from(JUNK_KEYS))] = draw(tables(in_grid=False))
    return document


def toml_value(value: Any) -> str:
    """`value` as a TOML inline value (TOML's strings take JSON's escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{" + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + "}"


def toml_document(document: dict[str, Any]) -> str:
    """Scalars first, then tables: [name] for a table, [[grid]] for a list of tables."""
    lines, tables = [], []
    for key, value in document.items():
        if isinstance(value, dict):
            tables += [f"[{key}]", *(f"{k} = {toml_value(v)}" for k, v in value.items())]
        elif key == "grid" and isinstance(value, list) and all(isinstance(t, dict) for t in value):
            for table in value:
                tables += ["[[grid]]", *(f"{k} = {toml_value(v)}" for k, v in table.items())]
        else:
            lines.append(f"{key} = {toml_value(value)}")
    return "\n".join([*lines, *tables]) + "\n"


flags = st.lists(
    st.one_of(
        st.tuples(st.just("--shard"), st.sampled_from(["0/1", "0/1", "1/2", "2/2", "x"])),
        st.tuples(st.just("--executor"), st.sampled_from(["local", "local", "ray", "slurm"])),
        st.tuples(
            st.sampled_from(["--retries", "--cpus-per-run"]),
            st.sampled_from(["2", "0", "0.5", "-1", "x"]),
        ),
        st.tuples(st.sampled_from(["--no-leaderboard", "--leaderboard", "--bogus"])),
    ),
    max_size=2,
)


def outcome(call) -> tuple[int, str]:
    """(exit status, stderr) of `call()`, an entry point's main."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = call()
    return status, err.getvalue()


def assert_refused_in_one_line_or_accepted(status: int, err: str) -> None:
    assert "Traceback" not in err, err
    assert status in (0, 2), (status, err)
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert "bad arguments" not in err, err  # tyro's message was found in its box


@FUZZ
@given(
    document=documents(),
    garbage=st.one_of(st.none(), st.binary(min_size=1, max_size=20)),
    sweep_flags=flags,
)
def test_any_sweep_file_and_flags_are_accepted_or_refused_in_one_line_writing_nothing(
    document, garbage, sweep_flags
):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "sweep.toml"
        path.write_bytes(toml_document(document).encode() if garbage is None else garbage)
        out = Path(scratch) / "out" / "runs"
        argv = ["--config", str(path), "--out", str(out), "--dry-run"]
        argv += [word for flag in sweep_flags for word in flag]
        status, err = outcome(lambda: sweep.main(argv))
        assert_refused_in_one_line_or_accepted(status, err)
        assert not (Path(scratch) / "out").exists(), "a check wrote its output folder"


run_flags = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "--steps",
                "--seed",
                "--env",
                "--model",
                "--credit",
                "--dtype",
                "--name",
                "--eval-episodes",
                "--env-options",
                "--faults",
                "--group-size",
                "--learning-rate",
                "--preset",
                "--reward-channel",
                "--stepz",
            ]
        ),
        st.sampled_from([*WORDS, "1.5", "3", "nan", "1e9"]),
    ),
    max_size=4,
)


@FUZZ
@given(run_flags=run_flags)
def test_any_run_flags_are_parsed_and_validated_or_refused_in_one_line_writing_nothing(run_flags):
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "out" / "runs"
        argv = [*(word for flag in run_flags for word in flag), "--out", str(out)]

        @exit_on_usage_error
        def check(args: list[str] | None) -> int:  # `benchmarks.run.main` up to its first work
            validate(resolve(parse_config(args)))
            return 0

        status, err = outcome(lambda: check(argv))
        assert_refused_in_one_line_or_accepted(status, err)
        assert not (Path(scratch) / "out").exists(), "a check wrote its output folder"
