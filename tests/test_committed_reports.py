"""The committed reports rebuild from their committed run folders with the same numbers.

Every number in results/ is to be produced by a command in the repository (the habits
in the project's style guide, results/README.md). These tests run those commands on the
committed run folders into a temporary folder and compare every number the committed
pages print: the reference leaderboard (`python -m benchmarks.leaderboard`, default
`--runs results/runs`) and the first study (`python -m benchmarks.study`, default
`--runs results/study/runs`) with its leaderboard (`--runs results/study/runs`). A
failure means either a committed page is stale (the code changed what it prints:
rebuild and commit the page) or the code changed a number it should not have.

The comparison is by numbers, not bytes: a table added to a report since it was
committed is allowed; a committed table or line missing from the rebuilt report, or any
number in it changed, is not. The provenance line (`Built by ...`) names the output
folder, which differs here, so it is left out.

The fair study (`--runs results/study_fair/runs`, its 484 run folders) is checked the
same way.
"""

from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"

# A number as the reports print it: an integer, a decimal or a float in e-notation.
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")
# The CSVs hold full floats; the same computation on another BLAS or NumPy build may
# differ in the last bits, which no printed page shows.
CSV_RELATIVE_TOLERANCE = 1e-9
# The commands run the whole report (bootstrap intervals, figures) over a few hundred run
# folders; two minutes on a loaded 2-core CPU, so one limit with room to spare.
COMMAND_TIMEOUT_S = 1800


def rebuild(module: str, runs: str, out: Path, *options: str) -> None:
    """Run `python -m <module> --runs <runs> --out <out> [options]` from the repository root."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [sys.executable, "-m", module, "--runs", runs, "--out", str(out), *options]
    done = subprocess.run(
        command,
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-4000:]}"


def shape(line: str) -> tuple[str, tuple[float, ...]]:
    """A line with its numbers masked as `#`, and those numbers in order."""
    return NUMBER.sub("#", line), tuple(float(number) for number in NUMBER.findall(line))


def markdown_numbers(text: str) -> dict[tuple[str, ...], list[tuple[str, tuple[float, ...]]]]:
    """Every numbered line of a report, keyed by where it stands.

    A table is keyed by its section heading, the line that introduces it, its header row
    and its place among tables with those three, and maps to its rows in order; any other
    line holding a number is keyed by its section heading and its masked text. Headings
    and the provenance line are left out.
    """
    blocks: dict[tuple[str, ...], list[tuple[str, tuple[float, ...]]]] = {}
    section = ""
    caption = ""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        if line.startswith("#"):
            section, caption = line, ""
        elif line.startswith("|"):
            header = line
            index += 2  # the header row and the |---| row under it
            rows = []
            while index < len(lines) and lines[index].startswith("|"):
                rows.append(shape(lines[index].rstrip()))
                index += 1
            key = ("table", section, shape(caption)[0], header)
            # Two tables under one heading may share caption and header (the methods'
            # per-type table and the oracles'): the second is told apart by its place.
            occurrence = sum(1 for other in blocks if other[:4] == key)
            blocks[(*key, str(occurrence))] = rows
            continue
        elif line and not line.startswith("Built "):
            masked, numbers = shape(line)
            if numbers:
                blocks.setdefault(("line", section, masked), []).append((masked, numbers))
            caption = line
        index += 1
    return blocks


def assert_same_markdown_numbers(committed_path: Path, rebuilt_path: Path) -> None:
    """Every table and numbered line of the committed page is in the rebuilt one, unchanged."""
    committed = markdown_numbers(committed_path.read_text())
    rebuilt = markdown_numbers(rebuilt_path.read_text())
    assert committed, f"{committed_path} holds no numbers: the parser no longer reads it"
    for key, rows in committed.items():
        where = " / ".join(part for part in key[1:4] if part)
        assert key in rebuilt, f"{committed_path.name}: not rebuilt: {where}"
        assert [masked for masked, _ in rebuilt[key]] == [masked for masked, _ in rows], (
            f"{committed_path.name}: the rows differ under {where}"
        )
        for (masked, numbers), (_, rebuilt_numbers) in zip(rows, rebuilt[key], strict=True):
            assert rebuilt_numbers == numbers, (
                f"{committed_path.name}: {masked}: committed {numbers}, rebuilt {rebuilt_numbers}"
            )


def leaderboard_key(path: Path) -> tuple[str, ...]:
    """The columns that name a line of a leaderboard CSV: the task, every setting, the split.

    leaderboard.csv is the long form, one line per (task, method configuration, split
    column), the configuration spelled out over the setting columns before `column`.
    """
    with path.open(newline="") as handle:
        header = next(csv.reader(handle))
    return tuple(header[: header.index("column") + 1])


def same_cell(committed: str, rebuilt: str) -> bool:
    """Equal as text, or as floats within `CSV_RELATIVE_TOLERANCE`."""
    if committed == rebuilt:
        return True
    try:
        return math.isclose(float(committed), float(rebuilt), rel_tol=CSV_RELATIVE_TOLERANCE)
    except ValueError:
        return False


def assert_same_csv(committed_path: Path, rebuilt_path: Path, key: Sequence[str]) -> None:
    """The rebuilt CSV has every committed column and row (matched on `key`), same values.

    Columns added since the file was committed are allowed; the committed ones must all
    be there with the same value in every row.
    """
    with committed_path.open(newline="") as handle:
        committed = list(csv.DictReader(handle))
    with rebuilt_path.open(newline="") as handle:
        rebuilt = list(csv.DictReader(handle))
    assert committed, f"{committed_path} is empty"
    columns = list(committed[0])
    assert set(columns) <= set(rebuilt[0]), (
        f"{committed_path.name}: columns not rebuilt: {sorted(set(columns) - set(rebuilt[0]))}"
    )
    rebuilt_by_key = {tuple(row[name] for name in key): row for row in rebuilt}
    assert len(rebuilt_by_key) == len(rebuilt), f"{rebuilt_path.name}: {key} is not a key"
    assert len(rebuilt) == len(committed), (
        f"{committed_path.name}: {len(committed)} rows committed, {len(rebuilt)} rebuilt"
    )
    for row in committed:
        row_key = tuple(row[name] for name in key)
        assert row_key in rebuilt_by_key, f"{committed_path.name}: no rebuilt row {row_key}"
        other = rebuilt_by_key[row_key]
        differing = {
            name: (row[name], other[name])
            for name in columns
            if not same_cell(row[name], other[name])
        }
        assert not differing, f"{committed_path.name} {row_key}: committed, rebuilt {differing}"


@pytest.mark.slow  # the leaderboard over 61 run folders with its plots: about a minute
def test_reference_leaderboard_rebuilds_with_the_committed_numbers(tmp_path: Path) -> None:
    rebuild("benchmarks.leaderboard", "results/runs", tmp_path)
    assert_same_markdown_numbers(RESULTS / "leaderboard.md", tmp_path / "leaderboard.md")
    assert_same_csv(
        RESULTS / "leaderboard.csv",
        tmp_path / "leaderboard.csv",
        key=leaderboard_key(RESULTS / "leaderboard.csv"),
    )


@pytest.mark.slow  # 2000 bootstrap resamples per interval over 242 run folders, and figures
def test_first_study_rebuilds_with_the_committed_numbers(tmp_path: Path) -> None:
    rebuild("benchmarks.study", "results/study/runs", tmp_path)
    assert_same_markdown_numbers(RESULTS / "study" / "study.md", tmp_path / "study.md")
    assert_same_csv(
        RESULTS / "study" / "runs.csv",
        tmp_path / "runs.csv",
        key=("task", "method", "seed"),
    )


@pytest.mark.slow  # 2000 bootstrap resamples per interval over 484 run folders: about a minute
def test_fair_study_rebuilds_with_the_committed_numbers(tmp_path: Path) -> None:
    rebuild("benchmarks.study", "results/study_fair/runs", tmp_path)
    fair = RESULTS / "study_fair"
    assert_same_markdown_numbers(fair / "study.md", tmp_path / "study.md")
    assert_same_csv(fair / "runs.csv", tmp_path / "runs.csv", key=("run",))


@pytest.mark.slow  # the pretrained slice's finished run folders (the sweep adds more)
def test_pretrained_slice_rebuilds_with_the_committed_numbers(tmp_path: Path) -> None:
    config = "benchmarks/configs/study_pretrained.toml"
    rebuild("benchmarks.study", "results/study_pretrained/runs", tmp_path, "--config", config)
    slice_ = RESULTS / "study_pretrained"
    assert_same_markdown_numbers(slice_ / "study.md", tmp_path / "study.md")
    assert_same_csv(slice_ / "runs.csv", tmp_path / "runs.csv", key=("run",))


@pytest.mark.slow  # the leaderboard over 242 run folders with its plots: about four minutes
def test_study_leaderboard_rebuilds_with_the_committed_numbers(tmp_path: Path) -> None:
    rebuild("benchmarks.leaderboard", "results/study/runs", tmp_path)
    study = RESULTS / "study"
    assert_same_markdown_numbers(study / "leaderboard.md", tmp_path / "leaderboard.md")
    committed = study / "leaderboard.csv"
    assert_same_csv(committed, tmp_path / "leaderboard.csv", key=leaderboard_key(committed))


def test_markdown_numbers_catches_a_changed_cell(tmp_path: Path) -> None:
    """The comparison fails on one changed number and passes on an added table."""
    page = (
        "# Report\n\nBuilt by `x --out a`; 95 % intervals.\n\n## Task[T=5]\n\n"
        "Untrained policy: 14.1 % success.\n\n| method | test |\n|---|---|\n"
        "| grpo | 70.6 ± 8.7 (n=5) |\n| hcapo | 100.0 ± 0.0 (n=5) |\n"
    )
    committed = tmp_path / "committed.md"
    committed.write_text(page)
    extended = tmp_path / "extended.md"
    extended.write_text(
        page.replace("`x --out a`", "`x --out b`")
        + "\nPer task type:\n\n| method | a |\n|---|---|\n| grpo | 1.0 |\n"
    )
    assert_same_markdown_numbers(committed, extended)
    for changed, to in (("70.6 ± 8.7", "70.7 ± 8.7"), ("14.1 %", "14.2 %")):
        altered = tmp_path / "altered.md"
        altered.write_text(page.replace(changed, to))
        with pytest.raises(AssertionError):
            assert_same_markdown_numbers(committed, altered)


def test_csv_comparison_allows_new_columns_but_not_changed_values(tmp_path: Path) -> None:
    committed = tmp_path / "committed.csv"
    committed.write_text("task,method,seed,auc\nA,grpo,0,0.375\nA,grpo,1,0.8\n")
    extended = tmp_path / "extended.csv"
    extended.write_text(
        "run,task,method,seed,auc\nr1,A,grpo,1,0.8\nr0,A,grpo,0,0.3750000000000001\n"
    )
    assert_same_csv(committed, extended, key=("task", "method", "seed"))
    altered = tmp_path / "altered.csv"
    altered.write_text("task,method,seed,auc\nA,grpo,0,0.376\nA,grpo,1,0.8\n")
    with pytest.raises(AssertionError):
        assert_same_csv(committed, altered, key=("task", "method", "seed"))
