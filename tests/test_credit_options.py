"""Each credit option is declared once (credit/options.py): the command line, `--help`, the
run identity and the module all read the module's `Options` dataclass.

Checked here: every option of every registered module reaches the module built by
`benchmarks.run` from the command line and appears once in `--help`; one value is one run
whatever its spelling, and an option at its default is the run without it; the committed
run folders are named by the configuration they record; docs/extending.md's model-free
module with options, one file and one registry line, needs nothing else to be run.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
import typing
from pathlib import Path

import numpy as np
import pytest

from creditgym import credit
from creditgym.agents.prompts import HINDSIGHT_POSITIONS
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.run import RunConfig, main, parse_config, resolve
from creditgym.benchmarks.run.train import training_credit
from creditgym.credit.exact_hindsight import OUTCOMES
from creditgym.credit.hca import Outcome
from creditgym.credit.hindsight import WORDINGS, HindsightPosition, WordingName
from creditgym.credit.options import field_types, format_value, options_help, parse_value
from creditgym.models.registry import build_tiny
from tests.credit_cases import scripted_trajectory
from tests.doc_recipes import check_entry_point, docs_section, documented_file, documented_module

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
    built = training_credit(resolve(cfg), tiny)
    assert getattr(built.options, key) == value
    assert f"{key}={format_value(value)}" in resolve(cfg).identity["credit_options"]


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


def test_the_credit_help_names_every_registered_module(capsys, monkeypatch):
    (line,) = [
        line for line in help_text(capsys, monkeypatch).splitlines() if "--credit STR" in line
    ]
    assert f"({', '.join(credit.REGISTRY)}, or package.module:Class)" in line
    assert {"oracle", "hca"} <= set(credit.REGISTRY)


def test_the_four_spellings_of_one_value_are_one_run_and_a_spelled_default_is_none():
    base = RunConfig(env="keydoor", credit="hcapo", model="tiny")
    names = {
        spelling: resolve(dataclasses.replace(base, credit_options=(spelling,))).name
        for spelling in ("causal_contrast=true", "causal_contrast=True", "causal_contrast=1")
    }
    assert len(set(names.values())) == 1
    assert resolve(base).name not in names.values()
    assert resolve(dataclasses.replace(base, credit_options=("causal_contrast=false",))).name == (
        resolve(base).name
    )
    assert (
        resolve(
            dataclasses.replace(base, credit_options=("causal_contrast=false", "gamma=0.950"))
        ).identity["credit_options"]
        == []
    )
    # Numbers are one value too: 1 and 1.0 and 1e0 are one clip, in any order of keys.
    one = resolve(dataclasses.replace(base, credit_options=("clip=1,1", "gamma=1"))).name
    assert (
        one == resolve(dataclasses.replace(base, credit_options=("gamma=1.0", "clip=1e0,1."))).name
    )
    identity = resolve(
        dataclasses.replace(base, credit_options=("gamma=1.0", "clip=1e0,1."))
    ).identity
    assert identity["credit_options"] == ["clip=1,1", "gamma=1"]


def test_bad_options_are_one_usage_line_naming_the_module():
    base = RunConfig(env="keydoor", credit="hcapo", model="tiny")
    for bad, message in (
        (("temp=1",), r"--credit-options of hcapo: no option 'temp'; valid: .*temperature"),
        (("gamma=2",), r"gamma must be in \[0, 1\]"),
        (("do_no_harm=maybe",), "expected true or false"),
        (("gamma=1", "gamma=0.5"), "given twice"),
    ):
        with pytest.raises(UsageError, match=message):
            resolve(dataclasses.replace(base, credit_options=bad))
    with pytest.raises(UsageError, match="needs a --credit module"):
        resolve(dataclasses.replace(base, credit="none", credit_options=("gamma=1",)))


LITERAL_OPTIONS = [
    (name, spec.name)
    for name, cls in credit.REGISTRY.items()
    for spec in dataclasses.fields(cls.Options)
    if typing.get_origin(field_types(cls.Options)[spec.name]) is typing.Literal
]


@pytest.mark.parametrize(("module", "option"), LITERAL_OPTIONS)
def test_a_choice_outside_its_literal_is_refused_in_one_line(module, option):
    # Built in Python, where no parser has checked the value: `check_choices` refuses it.
    choices = typing.get_args(field_types(credit.REGISTRY[module].Options)[option])
    with pytest.raises(ValueError, match=rf"^{option} must be one of {', '.join(choices)}, got"):
        credit.REGISTRY[module].Options(**{option: "no-such-choice"})


def test_the_modules_with_choices_are_checked():
    assert {("grpo", "scale_rewards"), ("hca", "outcome")} <= set(LITERAL_OPTIONS)


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


def test_committed_runs_with_credit_options_are_named_by_their_configuration():
    # results/study/runs (do_no_harm=false, causal_contrast=true, hindsight=feedback) and
    # results/study_fair/runs (clip=1,1): the canonical spelling is the one they used.
    files = committed_run_configs(with_options_only=True)
    assert len(files) >= 40
    for config_file in files:
        cfg = committed_config(config_file)
        assert resolve(cfg).name == config_file.parent.name
        recorded = json.loads(config_file.read_text())["identity"]
        assert resolve(cfg).identity["credit_options"] == recorded["credit_options"]


@pytest.mark.slow
def test_every_committed_run_folder_is_named_by_its_configuration():
    files = committed_run_configs(with_options_only=False)
    assert len(files) >= 300
    renamed = [f.parent for f in files if resolve(committed_config(f)).name != f.parent.name]
    assert renamed == []


# --- docs/extending.md's credit module: one file and one registry line, nothing else -----


def recipe() -> tuple[str, str, str]:
    """The recipe's module file, its code and the entry its `MODULES` block adds."""
    section = docs_section("Adding a credit module")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "expected the module and its registry line as two python blocks"
    module_code, registry = blocks
    # `MODULES = (..., "<entry>",)`: the new line is the tuple's last entry.
    (assignment,) = ast.parse(registry).body
    assert [target.id for target in assignment.targets] == ["MODULES"]
    return documented_file(section), module_code, ast.literal_eval(assignment.value.elts[-1])


def test_the_recipe_registry_line_names_the_recipe_file() -> None:
    path, _, entry = recipe()
    check_entry_point(entry, path)
    assert all(line.startswith("creditgym.credit.") for line in credit.MODULES)
    with pytest.raises(AssertionError, match=r"does not name credit/discounted\.py"):
        check_entry_point("credit.discounted:Discounted", "credit/discounted.py")


@pytest.fixture
def recipe_module(monkeypatch, tmp_path_factory):
    """The recipe's module written as the file the page names, registered by its line as
    `MODULES` is."""
    path, module_code, entry = recipe()
    with documented_module(path, module_code, tmp_path_factory.mktemp("recipe")):
        cls = credit.import_class(entry)
        monkeypatch.setitem(credit.REGISTRY, cls.name, cls)
        yield cls


def test_the_recipe_module_takes_its_options_from_the_command_line(recipe_module, tmp_path):
    argv = ["--credit", "discounted", "--env", "keydoor", "--model", "tiny", "--out", str(tmp_path)]
    cfg = parse_config([*argv, "--credit-options", "gamma=0.5"])
    module = training_credit(resolve(cfg), None)
    assert module.options == recipe_module.Options(0.5)
    assert resolve(cfg).identity["credit_options"] == ["gamma=0.5"]
    at_default = dataclasses.replace(cfg, credit_options=("gamma=0.90",))
    assert resolve(at_default).name == resolve(dataclasses.replace(cfg, credit_options=())).name
    with pytest.raises(UsageError, match=r"gamma must be in \[0, 1\]"):
        resolve(dataclasses.replace(cfg, credit_options=("gamma=2",)))
    output = module([scripted_trajectory("g", [0.0, 1.0], True)])
    np.testing.assert_allclose(output.step_advantages[0], [0.5, 1.0])
    assert "discounted:\n  gamma=0.9 (float): discount" in options_help(credit.REGISTRY)


@pytest.mark.slow
def test_the_recipe_module_trains_through_the_command_line(recipe_module, tmp_path):
    argv = ["--credit", "discounted", "--credit-options", "gamma=0.50", "--env", "keydoor"]
    sizes = ["--steps", "1", "--tasks-per-step", "1", "--group-size", "2", "--eval-episodes", "1"]
    rest = ["--model", "tiny", "--sample-group-size", "0", "--out", str(tmp_path)]
    assert main([*argv, *sizes, *rest]) == 0
    (run_dir,) = tmp_path.iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["credit_options"] == ["gamma=0.5"]
    assert config["identity"]["credit_options"] == ["gamma=0.5"]
