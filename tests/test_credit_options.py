"""Each credit option is declared once (credit/options.py): the command line, `--help`, the
run identity and the module all read the module's `Options` dataclass.

Checked here: every option of every registered module reaches the module built by
`benchmarks.run` from the command line and appears once in `--help`; one value is one run
whatever its spelling, and an option at its default is the run without it; the committed
run folders keep their names; a model-free module with options defined in one file of its
own (`Discounted` below, named by path) needs nothing else to be run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import credit
from agents.models import build_tiny
from agents.prompts import HINDSIGHT_POSITIONS
from agents.trajectory import Trajectory
from benchmarks.cli import UsageError
from benchmarks.run import (
    RunConfig,
    credit_options_of,
    env_id_for,
    main,
    parse_config,
    run_identity,
    run_name,
    training_credit,
)
from credit.base import CreditModuleBase, CreditOutput, broadcast_to_tokens
from credit.exact_hindsight import OUTCOMES
from credit.gigpo import discounted_returns
from credit.hca import Outcome
from credit.hindsight import WORDINGS, HindsightPosition, WordingName
from credit.options import (
    canonical_texts,
    doc,
    field_types,
    format_value,
    options_help,
    parse_options,
    parse_value,
)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny():
    return build_tiny()


def other_value(annotation: object, default: object) -> object:
    """A valid value of a field other than its default (halved numbers keep every range:
    gamma, momentum and temperature stay inside theirs)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return next(choice for choice in args if choice != default)
    if annotation is bool:
        return not default
    if default is None:  # float | None
        return 0.5
    if isinstance(default, tuple):
        return tuple(value / 2 for value in default)
    if isinstance(default, int | float):
        return type(default)(default / 2) if default else type(default)(1)
    raise AssertionError(f"no other value for {annotation!r}")


# Options valid only beside another: the seed variant has no causal contrast.
COMPANIONS = {("hcapo_seed", "causal_contrast"): ("variant=paper",)}
OPTION_CASES = [
    (name, spec.name)
    for name, cls in credit.REGISTRY.items()
    for spec in dataclasses.fields(cls.Options)
]


def test_every_registered_module_with_options_is_covered():
    modules = {name for name, _ in OPTION_CASES}
    assert {"grpo", "gigpo", "hcapo", "hcapo_seed", "hp_rlvr", "hca"} <= modules
    assert len(OPTION_CASES) >= 40


@pytest.mark.parametrize(("module", "key"), OPTION_CASES)
def test_every_option_reaches_the_module_from_the_command_line(module, key, tiny, tmp_path):
    cls = credit.REGISTRY[module]
    spec = {spec.name: spec for spec in dataclasses.fields(cls.Options)}[key]
    value = other_value(field_types(cls.Options)[key], spec.default)
    texts = (f"{key}={format_value(value)}", *COMPANIONS.get((module, key), ()))
    argv = ["--credit", module, "--env", "keydoor", "--model", "tiny", "--out", str(tmp_path)]
    cfg = parse_config([*argv, "--credit-options", *texts])
    built = training_credit(cfg, env_id_for(cfg.env), tiny)
    assert getattr(built.options, key) == value
    assert f"{key}={format_value(value)}" in run_identity(cfg)["credit_options"]


def help_text(capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: one option, one line
    with pytest.raises(SystemExit):
        main(["--help"])
    return capsys.readouterr().out


def test_every_option_of_every_module_appears_once_in_help(capsys, monkeypatch):
    lines = [line.strip(" │") for line in help_text(capsys, monkeypatch).splitlines()]
    headers = {f"{name}:": name for name in credit.REGISTRY}
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line in headers:
            current = headers[line]
            sections[current] = []
        elif line.startswith("--"):  # the next flag
            current = None
        elif current is not None:
            sections[current].append(line)
    without = [name for name, cls in credit.REGISTRY.items() if not dataclasses.fields(cls.Options)]
    assert set(sections) == set(credit.REGISTRY) - set(without)
    for name, cls in credit.REGISTRY.items():
        for spec in dataclasses.fields(cls.Options):
            entry = f"{spec.name}={format_value(spec.default)} ("
            assert sum(line.startswith(entry) for line in sections[name]) == 1, (name, entry)
            assert spec.metadata["help"] in " ".join(sections[name])
    assert any(line.startswith(f"{', '.join(without)}: no options.") for line in lines)


def test_the_four_spellings_of_one_value_are_one_run_and_a_spelled_default_is_none():
    base = RunConfig(env="keydoor", credit="hcapo", model="tiny")
    names = {
        spelling: run_name(dataclasses.replace(base, credit_options=(spelling,)))
        for spelling in ("causal_contrast=true", "causal_contrast=True", "causal_contrast=1")
    }
    assert len(set(names.values())) == 1
    assert run_name(base) not in names.values()
    assert run_name(dataclasses.replace(base, credit_options=("causal_contrast=false",))) == (
        run_name(base)
    )
    assert "credit_options" not in run_identity(
        dataclasses.replace(base, credit_options=("causal_contrast=false", "gamma=0.950"))
    )
    # Numbers are one value too: 1 and 1.0 and 1e0 are one clip, in any order of keys.
    one = run_name(dataclasses.replace(base, credit_options=("clip=1,1", "gamma=1")))
    assert one == run_name(dataclasses.replace(base, credit_options=("gamma=1.0", "clip=1e0,1.")))
    identity = run_identity(dataclasses.replace(base, credit_options=("gamma=1.0", "clip=1e0,1.")))
    assert identity["credit_options"] == ["clip=1,1", "gamma=1"]


def test_bad_options_are_one_usage_line_naming_the_module():
    base = RunConfig(env="keydoor", credit="hcapo", model="tiny")
    for bad, message in (
        (("temp=1",), r"--credit-options of hcapo: no option 'temp'; valid: variant, "),
        (("gamma=2",), r"gamma must be in \[0, 1\]"),
        (("do_no_harm=maybe",), "expected true or false"),
        (("gamma=1", "gamma=0.5"), "given twice"),
    ):
        with pytest.raises(UsageError, match=message):
            credit_options_of(dataclasses.replace(base, credit_options=bad))
    with pytest.raises(UsageError, match="needs a --credit module"):
        credit_options_of(dataclasses.replace(base, credit="none", credit_options=("gamma=1",)))


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (float, 0.95),
        (float, 1e-06),
        (float, math.inf),
        (float, -0.1),
        (int, 400),
        (bool, False),
        (float | None, None),
        (float | None, 0.25),
        (tuple[float, float], (0.8, 1.2)),
        (tuple[float, float], (0.0, math.inf)),
    ],
)
def test_the_identity_spelling_reads_back_to_the_same_value(annotation, value):
    assert parse_value(annotation, format_value(value)) == value


def test_literal_option_types_list_exactly_the_choices_their_modules_accept():
    assert typing.get_args(HindsightPosition) == HINDSIGHT_POSITIONS
    assert set(typing.get_args(WordingName)) == set(WORDINGS)
    assert set(typing.get_args(Outcome)) == set(OUTCOMES)


def committed_config(config_file: Path) -> RunConfig:
    """The `RunConfig` a committed run folder's config.json records, name unset (so the
    name is derived from the identity, as the run derived it)."""
    recorded = json.loads(config_file.read_text())
    fields = {spec.name for spec in dataclasses.fields(RunConfig)}
    values = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in recorded.items()
        if key in fields
    }
    return RunConfig(**{**values, "out": Path(values["out"]), "name": None})


def committed_run_configs(with_options_only: bool) -> list[Path]:
    files = sorted(REPO.glob("results/**/runs/*/config.json"))
    if with_options_only:
        files = [f for f in files if json.loads(f.read_text()).get("credit_options")]
    return files


def test_committed_runs_with_credit_options_keep_their_names_and_identities():
    # results/study/runs (do_no_harm=false, causal_contrast=true, hindsight=feedback) and
    # results/study_fair/runs (clip=1,1): the canonical spelling is the one they used.
    files = committed_run_configs(with_options_only=True)
    assert len(files) >= 40
    for config_file in files:
        cfg = committed_config(config_file)
        assert run_name(cfg) == config_file.parent.name
        recorded = json.loads(config_file.read_text())["identity"]
        assert run_identity(cfg)["credit_options"] == recorded["credit_options"]


@pytest.mark.slow
def test_every_committed_run_folder_keeps_its_name():
    files = committed_run_configs(with_options_only=False)
    assert len(files) >= 300
    renamed = [f.parent for f in files if run_name(committed_config(f)) != f.parent.name]
    assert renamed == []


# --- a model-free module with options: one file, nothing else (docs/extending.md) -----------


@dataclass(frozen=True)
class DiscountedOptions:
    """The options of `Discounted`."""

    gamma: float = field(default=0.9, metadata=doc("discount of the return-to-go, in [0, 1]"))

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")


class Discounted(CreditModuleBase):
    """Step credit G_t = sum_k gamma^k r_{t+k}, the discounted return-to-go (REINFORCE)."""

    name = "discounted"
    reads = frozenset({"step_rewards"})
    Options = DiscountedOptions

    def __init__(self, options: DiscountedOptions | None = None) -> None:
        self.options = DiscountedOptions() if options is None else options

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        steps = [
            discounted_returns([s.reward for s in t.steps], self.options.gamma).astype(np.float32)
            for t in trajectories
        ]
        return CreditOutput(steps, broadcast_to_tokens(trajectories, steps))


def test_a_module_in_one_file_takes_its_options_from_the_command_line(tmp_path):
    path = "tests.test_credit_options:Discounted"
    argv = ["--credit", path, "--env", "keydoor", "--model", "tiny", "--out", str(tmp_path)]
    cfg = parse_config([*argv, "--credit-options", "gamma=0.5"])
    module = training_credit(cfg, env_id_for(cfg.env), None)
    assert module.options == DiscountedOptions(0.5)
    assert run_identity(cfg)["credit_options"] == ["gamma=0.5"]
    at_default = dataclasses.replace(cfg, credit_options=("gamma=0.90",))
    assert run_name(at_default) == run_name(dataclasses.replace(cfg, credit_options=()))
    assert parse_options(DiscountedOptions, [("gamma", "1")]) == DiscountedOptions(1.0)
    assert canonical_texts(DiscountedOptions(1.0)) == ("gamma=1",)
    assert "discounted:\n  gamma=0.9 (float): discount" in options_help({"discounted": Discounted})
