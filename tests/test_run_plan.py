"""A run is resolved once (benchmarks/run/plan.py): `resolve` builds a frozen plan from the
command line, and the run's identity, checks, training, evaluation, samples and a
population's members read it; none of them parses the credit or env options' text again."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from creditgym import credit
from creditgym.benchmarks.run import main, parse_config, resolve
from creditgym.benchmarks.run.population import member_plans
from creditgym.credit import options as credit_options
from creditgym.credit.grpo import GRPOOptions
from creditgym.envs.options import EnvOptions

# `small` on KeyDoor: one iteration, two evaluation episodes and a group of samples (which
# build every registered module, the run's own with its options): a few seconds.
MODULE = ["--env", "keydoor", "--env-options", "delay=4", "--model", "small", "--credit", "grpo"]
ARGV = [
    *MODULE, "--credit-options", "scale_rewards=batch", "--steps", "1", "--max-new-tokens", "8",
    "--eval-episodes", "2", "--eval-batch-size", "2", "--sample-group-size", "2",
    "--threads", "1",
]  # fmt: skip


@pytest.fixture
def parses(monkeypatch) -> dict[str, list[tuple[str, ...]]]:
    """Every parse of a credit module's and an env's options (`parse_options`, which both
    share) from here on, by whichever module it was imported into: the texts each parsed,
    under "credit" and "env"."""
    real = credit_options.parse_options
    credit_classes = {module.Options for module in credit.REGISTRY.values()}
    calls: dict[str, list[tuple[str, ...]]] = {"credit": [], "env": []}

    def counting(options_class: type, pairs):
        texts = tuple(f"{key}={text}" for key, text in pairs)
        if options_class in credit_classes:
            calls["credit"].append(texts)
        elif issubclass(options_class, EnvOptions):
            calls["env"].append(texts)
        return real(options_class, pairs)

    for module in list(sys.modules.values()):
        if getattr(module, "parse_options", None) is real:
            monkeypatch.setattr(module, "parse_options", counting)
    return calls


def test_the_counter_sees_every_parse_of_credit_options(parses):
    # The guard planted: a second resolution, and a parse from the options module itself.
    resolve(parse_config(ARGV))
    resolve(parse_config(ARGV))
    credit_options.parse_options(GRPOOptions, [("scale_rewards", "none")])
    batch, delay = ("scale_rewards=batch",), ("delay=4",)
    assert parses == {"credit": [batch, batch, ("scale_rewards=none",)], "env": [delay, delay]}


def test_a_run_parses_its_options_once(parses, tmp_path: Path):
    assert main([*ARGV, "--out", str(tmp_path)]) == 0
    assert parses == {"credit": [("scale_rewards=batch",)], "env": [("delay=4",)]}


def test_a_population_parses_its_options_once_for_all_its_members(parses, tmp_path):
    assert main([*ARGV, "--population", "2", "--out", str(tmp_path)]) == 0
    assert len(list(tmp_path.iterdir())) == 2
    assert parses == {"credit": [("scale_rewards=batch",)], "env": [("delay=4",)]}


def test_the_plan_is_frozen_and_carries_the_parsed_options():
    plan = resolve(parse_config([*ARGV, "--population", "3"]))
    assert plan.credit_options == GRPOOptions(scale_rewards="batch")
    # The options in their one spelling: what config.json and the run identity show.
    assert plan.config.credit_options == ("scale_rewards=batch",)
    assert plan.identity["credit_options"] == ["scale_rewards=batch"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.step_limit = 1  # type: ignore[misc]
    members = member_plans(plan)
    assert [m.config.seed for m in members] == [0, 1, 2]
    assert all(m.credit_options is plan.credit_options for m in members)
    # Spelled out at its default, an option is the run without it.
    at_default = resolve(parse_config([*MODULE, "--credit-options", "scale_rewards=group"]))
    assert at_default.config.credit_options == ()
    assert at_default.name == resolve(parse_config(MODULE)).name
