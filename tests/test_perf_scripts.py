"""The speed scripts in benchmarks/perf/: one argument style and one timing helper."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import time
from pathlib import Path

import pytest
import tyro

from creditgym import benchmarks
from creditgym.benchmarks.perf.timing import Stopwatch, machine_state, timed

SCRIPTS = sorted(
    info.name for info in pkgutil.iter_modules(benchmarks.perf.__path__) if info.name != "timing"
)


def test_stopwatch_sums_wall_and_cpu_time_over_its_blocks():
    watch = Stopwatch()
    for _ in range(2):
        with watch:
            time.sleep(0.02)  # wall time without CPU time
    assert watch.blocks == 2
    assert watch.wall_s >= 0.04
    assert watch.cpu_s < watch.wall_s / 2
    with watch:
        deadline = time.process_time() + 0.05
        while time.process_time() < deadline:  # CPU time
            pass
    assert watch.blocks == 3
    assert watch.cpu_s >= 0.05


def test_timed_returns_the_result_and_its_time():
    result, watch = timed(sorted, [3, 1, 2])
    assert result == [1, 2, 3]
    assert watch.blocks == 1 and watch.wall_s >= 0


def test_machine_state_names_the_time_the_cores_and_the_load():
    line = machine_state()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", line)
    assert re.search(r"\d+ of \d+ cores usable", line)
    assert re.search(r"load average \d+\.\d, \d+\.\d, \d+\.\d$", line)


def test_every_perf_script_is_listed_in_docs_performance_md():
    table = (Path(__file__).parents[1] / "docs" / "performance.md").read_text()
    for name in SCRIPTS:
        assert f"benchmarks.perf.{name}" in table, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_perf_script_takes_its_options_from_a_tyro_dataclass(name: str):
    module = importlib.import_module(f"benchmarks.perf.{name}")
    assert dataclasses.is_dataclass(module.BenchArgs)
    fields = dataclasses.fields(module.BenchArgs)
    assert tyro.cli(module.BenchArgs, args=[]) == module.BenchArgs()
    with pytest.raises(SystemExit) as exit_info:
        tyro.cli(module.BenchArgs, args=["--help"])
    assert exit_info.value.code == 0
    assert fields, f"{name} has no options"
    assert callable(module.main)
