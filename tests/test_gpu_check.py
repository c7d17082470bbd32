"""The prepared GPU check: its wheel bundle, what it installs, its phase table, and its
`--device cpu --dry-run` run end to end."""

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from creditgym.benchmarks import gpu_wheels
from creditgym.benchmarks.dependency_locks import pins
from creditgym.benchmarks.gpu_check import phase_split
from creditgym.benchmarks.gpu_wheels import check_requirements, closure, pack, unpack_bundle
from creditgym.models import registry

REPO = Path(__file__).resolve().parent.parent


def test_the_check_installs_the_locked_versions_except_torch_and_what_the_gpu_machine_keeps():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    direct = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    locked = pins(REPO / "locks" / "main.txt")
    requirements = check_requirements()
    names = {spec.split("==")[0] for spec in requirements}
    # Each one a direct dependency, at the version CI tests (the main lock).
    assert names <= {Requirement(spec).name for spec in direct}
    assert dict(spec.split("==") for spec in requirements) == {name: locked[name] for name in names}
    assert {"transformers", "peft", "tokenizers", "gymnasium", "tyro", "gguf"} <= names
    assert not names & {"torch", "alfworld", "textworld", "fast-downward-textworld", "ray"}
    assert gpu_wheels.SMOLLM2_PACKAGE == registry.SMOLLM2_PACKAGE


def test_closure_follows_the_target_markers_and_never_enters_torch():
    def package(name, *requires):
        return {"metadata": {"name": name, "version": "1.0", "requires_dist": list(requires)}}

    report = {
        "install": [
            package("Peft", "torch>=1.13", "Safe_Tensors", 'colorama; sys_platform == "win32"'),
            package("safe-tensors", 'numpy; python_version >= "3.12"', 'rich; extra == "dev"'),
            package("numpy"),
            package("torch", "sympy"),
            package("sympy"),
            package("colorama"),
            package("rich"),
        ]
    }
    found = closure(report, ["peft==1.0"], skip={"torch"})
    # sympy is reached only through torch; colorama (Windows) and rich (an extra) not at all.
    assert found == {"peft": "1.0", "safe-tensors": "1.0", "numpy": "1.0"}


def test_bundle_parts_join_to_the_same_wheels_and_a_missing_or_bad_part_is_named(tmp_path):
    folder = tmp_path / "wheels" / "py312"
    folder.mkdir(parents=True)
    contents = {f"pkg{i}-1.0-py3-none-any.whl": os.urandom(5000 + 3000 * i) for i in range(3)}
    for name, data in contents.items():
        (folder / name).write_bytes(data)
    parts = pack(folder, tmp_path / "wheels", part_bytes=8000)
    assert len(parts) >= 3  # about 24 kB of wheels (and tar headers) in parts of <= 8 kB
    chunk_sizes = {
        (part / f"{gpu_wheels.BUNDLE_CHUNK}{i}").stat().st_size
        for i, part in enumerate(parts, start=1)
    }
    assert max(chunk_sizes) <= 8000

    there = tmp_path / "there"  # the GPU machine: only the parts arrived
    there.mkdir()
    for part in parts:
        (there / part.name).mkdir()
        for file in part.iterdir():
            (there / part.name / file.name).write_bytes(file.read_bytes())
    assert unpack_bundle(there).startswith(f"joined {len(parts)} parts: 3 wheels")
    for name, data in contents.items():
        assert hashlib.sha256((there / "py312" / name).read_bytes()).digest() == (
            hashlib.sha256(data).digest()
        )

    last = there / parts[-1].name / f"{gpu_wheels.BUNDLE_CHUNK}{len(parts)}"
    last.write_bytes(last.read_bytes()[:-1] + b"!")
    with pytest.raises(ValueError, match="sha256"):
        unpack_bundle(there)
    (there / "part-2" / f"{gpu_wheels.BUNDLE_CHUNK}2").unlink()
    with pytest.raises(FileNotFoundError, match=f"part-2 of {len(parts)}"):
        unpack_bundle(there)


def test_phase_split_lists_each_step_and_the_mean_after_the_first(tmp_path):
    records = [
        {"step": 1, "time/rollout_s": 9.0, "time/credit_s": 1.0, "time/train_s": 2.0},
        {"step": 2, "time/rollout_s": 3.0, "time/credit_s": 0.5, "time/train_s": 1.0},
        {"step": 3, "time/rollout_s": 5.0, "time/credit_s": 1.5, "time/train_s": 1.0},
    ]
    lines = "\n".join(json.dumps(r) for r in records) + '\n{"step": 4, "time/ro'  # torn
    (tmp_path / "metrics.jsonl").write_text(lines)
    table = phase_split(tmp_path)
    assert [row.split() for row in table[1:]] == [
        ["1", "9.000", "1.000", "2.000", "12.000"],
        ["2", "3.000", "0.500", "1.000", "4.500"],
        ["3", "5.000", "1.500", "1.000", "7.500"],
        ["mean", "2+", "4.000", "1.000", "1.000", "6.000"],
    ]


@pytest.mark.slow
def test_cpu_dry_run_of_the_gpu_check_passes_every_step(tmp_path):
    out = tmp_path / "gpu_check.txt"
    # A loaded 2-core machine runs each step many times slower than its GPU limit assumes.
    command = ["bash", "benchmarks/gpu_check.sh", "--device", "cpu", "--dry-run"]
    command += ["--out", str(out), "--time-scale", "8"]
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    report = out.read_text()
    assert result.returncode == 0, report[-3000:]
    statuses = dict(re.findall(r"^  (\S.*?)\s{2,}(ok|failed|timed out|skipped)\s", report, re.M))
    expected = {"environment", "install", "model", "tests", "bench_rollout", "bench_decode"}
    expected |= {"bench_credit", "run grpo (G=8)", "run hp_rlvr (G=1)"}
    assert expected <= set(statuses)
    # A dry run installs nothing: it runs on the packages this Python has.
    assert all(statuses[name] == ("skipped" if name == "install" else "ok") for name in expected)
    # Each run's optimiser step, by phase, with its numbers.
    tables = re.findall(r"seconds per optimiser step by phase:\n.*\n  1 +([\d. ]+)\n", report)
    assert len(tables) == 2 and all(len(row.split()) == 4 for row in tables)
