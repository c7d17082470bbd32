"""Each env declares its options once (`EnvInfo.options`): parsed from text by the machinery
credit options share (envs/options.py), a bad value one line, the run identity built from
the parsed values (defaults left out, the class's order), so the spellings of one setting
are one run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import gymnasium
import pytest

from creditgym import envs
from creditgym.benchmarks.run import RunConfig, resolve
from creditgym.envs import ENVS, EnvOptions, parse_env_options
from creditgym.envs.keydoor.dynamics import APPLE_REWARDS
from creditgym.envs.keydoor.options import KeyDoorOptions
from creditgym.envs.options import HELP_KEY, describe_type, field_types, format_value, parse_options
from creditgym.envs.umbrella.options import UmbrellaOptions
from creditgym.report import records

KEYDOOR = "creditgym/KeyDoor-v0"
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("env_id", list(ENVS))
def test_every_env_declares_typed_documented_options_that_read_back(env_id: str) -> None:
    options_class = ENVS[env_id].options
    assert issubclass(options_class, EnvOptions)
    defaults = options_class()
    assert defaults.canonical() == () and defaults.kwargs() == {}
    for spec in dataclasses.fields(options_class):
        assert spec.metadata[HELP_KEY], f"{env_id}: {spec.name} has no help"
    # Every option's default, written out, parses back to the defaults and is no option
    # off its default: the text a run's identity is built from reads back to its value.
    spelled = [f"{line.split()[0]}" for line in options_class.help().splitlines()]
    assert options_class.parse(spelled) == defaults


@pytest.mark.parametrize("env_id", list(ENVS))
def test_the_env_takes_exactly_its_declared_options(env_id: str) -> None:
    # The constructor reads its options through the class: an undeclared keyword is refused
    # before the env loads anything (ALFWorld: before its game files).
    with pytest.raises(TypeError, match="no_such_option"):
        gymnasium.make(env_id, no_such_option=1)


def test_the_spellings_of_one_setting_are_one_canonical_form() -> None:
    spellings = [
        "delay=16 variance=high",
        "variance=high delay=16",
        "delay=16 variance=high num_keys=1",
        "delay=16 variance=high causal_feedback=False verdict_feedback=1",
        ("delay=016", "variance=high"),
    ]
    forms = {parse_env_options(KEYDOOR, text).canonical() for text in spellings}
    assert forms == {("delay=16", "variance=high")}
    assert parse_env_options(KEYDOOR, "delay=8").canonical() == ()  # the default is unset
    assert parse_env_options("creditgym/SysDiag-v0", "reboot_reward=0.0").canonical() == (
        "reboot_reward=0",
    )


def test_the_canonical_order_is_the_declaration_order() -> None:
    # The committed runs' texts are already canonical, so their folders keep their names.
    for text in (
        "delay=4 variance=high num_keys=3 num_objects=6 verdict_feedback=false",
        "delay=16 variance=high num_objects=12",
    ):
        assert " ".join(parse_env_options(KEYDOOR, text).canonical()) == text
    umbrella = "length=1 forecast_per_replica=true verdict_feedback=false"
    assert " ".join(UmbrellaOptions.parse(umbrella).canonical()) == umbrella


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("delay=x", "delay=x: expected an integer"),
        ("delay=-1", "delay must be a non-negative integer"),
        ("variance=medium", "expected one of low, high"),
        ("num_keys=5", "num_keys must be an integer in [1, 4]"),
        ("colour=red", "no option 'colour'; valid: delay, variance"),
        ("delay", "an env option is key=value"),
        ("delay=1 delay=2", "option 'delay' given twice"),
        ("causal_feedback=true verdict_feedback=false", "needs verdict_feedback=true"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_env(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_env_options(KEYDOOR, text)
    assert str(caught.value).startswith(f"{KEYDOOR}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_options_built_in_python_are_type_checked() -> None:
    for bad in ({"delay": 1.5}, {"delay": True}, {"variance": "medium"}, {"num_keys": "2"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            KeyDoorOptions(**bad)


def test_the_variance_choices_are_the_apple_reward_tables() -> None:
    choices = typing.get_args(field_types(KeyDoorOptions)["variance"])
    assert set(choices) == set(APPLE_REWARDS)


def test_credit_options_parse_with_the_same_machinery() -> None:
    from creditgym.credit.hcapo import HCAPO

    parsed = parse_options(HCAPO.Options, [("gamma", "1.0")])
    assert parsed == HCAPO.Options(gamma=1.0)


@pytest.mark.parametrize(
    "spelling",
    [
        ("delay=16", "variance=high"),
        ("variance=high", "delay=16"),
        ("delay=16", "variance=high", "num_keys=1", "verdict_feedback=True"),
    ],
)
def test_the_spellings_of_one_setting_are_one_run(spelling: tuple[str, ...], tmp_path) -> None:
    base = {"env": "keydoor", "model": "random", "credit": "none", "out": tmp_path}
    plan = resolve(RunConfig(**base, env_options=spelling))
    canonical = resolve(RunConfig(**base, env_options=("delay=16", "variance=high")))
    assert plan.name == canonical.name and plan.identity == canonical.identity
    assert plan.name.startswith("keydoor-delay16-variancehigh_random_")
    assert plan.config.env_options == ("delay=16", "variance=high")  # what config.json shows
    unset = resolve(RunConfig(**base))
    assert resolve(RunConfig(**base, env_options=("delay=8",))).name == unset.name


def test_a_bad_env_option_on_the_command_line_is_one_line_and_exit_2(tmp_path) -> None:
    argv = ["--env", "keydoor", "--env-options", "delay=x", "--model", "random"]
    done = subprocess.run(
        [sys.executable, "-m", "creditgym.benchmarks.run", *argv, "--credit", "none", "--out",
         str(tmp_path)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --env-options: creditgym/KeyDoor-v0: delay=x: expected an integer, got 'x'"
    )
    assert not any(tmp_path.iterdir())


def test_the_run_help_lists_every_envs_options() -> None:
    help_text = envs.env_options_help()
    for info in ENVS.values():
        assert f"{info.short_name}:" in help_text
        for name in info.options.names():
            assert f"  {name}=" in help_text
    shown = subprocess.run(
        [sys.executable, "-m", "creditgym.benchmarks.run", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    assert "delay=8 (int): orchard steps" in shown and "length=10 (int)" in shown


def test_the_study_reads_an_unset_horizon_as_the_envs_default() -> None:
    from creditgym.report.study.rows import option

    config = {"env_id": "creditgym/Umbrella-v0", "env_options": ["num_distractors=0"]}
    assert option(config, "length") == UmbrellaOptions().length == 10
    assert option({"env_id": KEYDOOR, "env_options": ["delay=4"]}, "delay") == 4


def test_committed_run_folders_are_named_by_their_parsed_options() -> None:
    # Every committed config.json records its options in their parsed form: renamed once
    # by tools/rename_runs.py where the typed text was not (a default spelled out).
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "results"], capture_output=True, text=True, check=True
    ).stdout.split()
    configs = [p for p in listed if p.endswith(f"/{records.CONFIG_FILE}") and "/runs/" in p]
    assert configs
    for path in configs:
        recorded = json.loads((REPO / path).read_text())
        options = ENVS[recorded["env_id"]].options.parse(recorded.get("env_options", ()))
        assert list(options.canonical()) == recorded.get("env_options", []), path
        assert recorded["identity"]["env_options"] == recorded.get("env_options", []), path


def test_the_docs_table_lists_every_option_as_declared() -> None:
    table = (REPO / "docs" / "environments.md").read_text()
    for info in ENVS.values():
        types = field_types(info.options)
        for spec in dataclasses.fields(info.options):
            written = describe_type(types[spec.name]).replace("|", " / ")
            row = (
                f"| `{info.short_name}` | `{spec.name}` | `{format_value(spec.default)}` | "
                f"{written} | {spec.metadata[HELP_KEY]} |"
            )
            assert row in table, row


def test_credit_truth_sweeps_the_envs_horizon_option_by_default() -> None:
    from creditgym.benchmarks.credit_truth import CreditTruthArgs, swept_option

    umbrella = CreditTruthArgs(env="umbrella", sweep=(1, 2))
    assert swept_option(umbrella, "creditgym/Umbrella-v0") == "length"
    assert swept_option(CreditTruthArgs(), KEYDOOR) == "delay"


def test_measuring_commands_name_their_files_by_the_parsed_options() -> None:
    from creditgym.benchmarks.credit_truth import CreditTruthArgs, truth_stem
    from creditgym.benchmarks.hindsight_ablation import AblationArgs, ablation_stem

    committed = "keydoor_uniform_delay1-2-4-8_variance-high_shared_G8_pool512_tasks2_seed0"
    for spelling in (("variance=high",), ("variance=high", "num_keys=1")):
        args = CreditTruthArgs(
            model="uniform", sweep_kwarg="delay", sweep=(1, 2, 4, 8), env_kwargs=spelling, pool=512
        )
        assert truth_stem(args, KEYDOOR) == committed
    for spelling in (("delay=2",), ("delay=2", "variance=low")):
        args = AblationArgs(
            env="keydoor", model="smollm2-135m", env_kwargs=spelling, pool=16, batch_size=8
        )
        assert (
            ablation_stem(args, KEYDOOR) == "keydoor_delay2_smollm2-135m_pool16_G8_B8_tasks2_seed0"
        )
