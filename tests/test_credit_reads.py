"""Every registered credit module reads only what its class declares (`reads`).

Each module is handed trajectories whose undeclared fields raise when read
(`credit.base.READS` names the fields of each kind); one that touches an undeclared
field fails here, and its output on the poisoned batch must equal its output on the
plain one (the poisoning changes nothing the module is allowed to see).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from creditgym.agents.base import ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import SamplingConfig
from creditgym.agents.trajectory import Step, Trajectory
from creditgym.credit import REGISTRY, CreditContext, build
from creditgym.credit.base import (
    IDENTITY_FIELDS,
    READS,
    CreditModuleBase,
    CreditOutput,
    broadcast_to_tokens,
    is_oracle,
)
from creditgym.credit.gigpo import GiGPO
from creditgym.credit.grpo import GRPO
from creditgym.measure.ground_truth import exact_sources
from creditgym.models.registry import build_tiny
from tests.credit_cases import tokenised


class UndeclaredRead(AssertionError):
    """A module read a field of a kind its class does not declare."""


def undeclared(reads: frozenset[str], kind: str) -> dict[str, str]:
    """Attribute name -> the kind of `READS` it belongs to, for kinds not in `reads`.

    `kind` is "trajectory_fields" or "step_fields".
    """
    return {
        field: name
        for name, read in READS.items()
        if name not in reads
        for field in getattr(read, kind)
    }


class LengthOnly(Sequence):
    """Token ids whose number may be read (the output's shape) but not their values."""

    def __init__(self, values: Sequence[Any], what: str) -> None:
        self._count, self._what = len(values), what

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        raise UndeclaredRead(f"read the values of {self._what} (kind 'actions')")


class PoisonedStep:
    """A `Step` whose attributes of undeclared kinds raise when read."""

    def __init__(self, step: Step, reads: frozenset[str]) -> None:
        self._step = step
        self._poisoned = undeclared(reads, "step_fields")

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._step, name)
        if name in self._poisoned:
            if name == "action_token_ids":
                return LengthOnly(value, "Step.action_token_ids")
            raise UndeclaredRead(f"read Step.{name} (kind {self._poisoned[name]!r})")
        return value


class PoisonedTrajectory:
    """A `Trajectory` whose attributes of undeclared kinds raise when read; its steps are
    `PoisonedStep`s. Identity and shape (`IDENTITY_FIELDS`) stay readable."""

    def __init__(self, trajectory: Trajectory, reads: frozenset[str]) -> None:
        self._trajectory = trajectory
        self._poisoned = undeclared(reads, "trajectory_fields")
        self.steps = tuple(PoisonedStep(step, reads) for step in trajectory.steps)

    def __getattr__(self, name: str) -> Any:
        if name in self._poisoned:
            raise UndeclaredRead(f"read Trajectory.{name} (kind {self._poisoned[name]!r})")
        return getattr(self._trajectory, name)


KEYDOOR = "creditgym/KeyDoor-v0"
KEYDOOR_OPTIONS = {"delay": 2, "variance": "high"}


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_tiny()


@pytest.fixture(scope="module")
def context(tiny) -> CreditContext:
    """Everything a run offers a module, the exact-MDP oracles' env and sampling too."""
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=48, history_len=0, constrained=True)
    return CreditContext(
        tiny,
        history_len=0,
        env_id=KEYDOOR,
        env_kwargs=KEYDOOR_OPTIONS,
        sampling=sampling,
        exact_sources=exact_sources,
    )


@pytest.fixture(scope="module")
def keydoor_batch(tiny) -> list[Trajectory]:
    """Two groups of KeyDoor episodes of the expert and a random agent (apples, doors
    opened and not, key-step labels, true states, repeated rooms for GiGPO's anchors),
    half of them as a policy records them (token ids), and an empty trajectory."""
    env = gym.make(KEYDOOR, **KEYDOOR_OPTIONS)
    try:
        batch = [
            play_episode(env, agent, seed=group, group_id=f"g{group}")
            for group in (0, 1)
            for agent in (ExpertAgent(), *(RandomAgent(seed=k) for k in range(2)))
        ]
    finally:
        env.close()
    batch = [tokenised(t, tiny, history_len=0) if k % 2 else t for k, t in enumerate(batch)]
    assert len({t.total_return for t in batch}) > 2 and len({t.success for t in batch}) == 2
    return [*batch, dataclasses.replace(batch[0], steps=())]


def outputs_equal(first, second) -> None:
    for a, b in zip(first.step_advantages, second.step_advantages, strict=True):
        np.testing.assert_array_equal(a, b)
    for a_steps, b_steps in zip(first.token_advantages, second.token_advantages, strict=True):
        for a, b in zip(a_steps, b_steps, strict=True):
            np.testing.assert_array_equal(a, b)
    assert dict(first.metrics) == dict(second.metrics)


def credit_on(module: CreditModuleBase, trajectories) -> Any:
    """The module's credit, without `CreditModuleBase.__call__`'s finite-reward guard: the
    guard is the harness's, reads every reward before any module, and has its own tests
    (tests/test_credit_contract.py)."""
    return module.compute(trajectories)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_registered_module_reads_only_what_it_declares(name, context, keydoor_batch):
    cls = REGISTRY[name]
    assert issubclass(cls, CreditModuleBase)  # `compute` is its credit (see `credit_on`)
    assert cls.reads <= READS.keys(), f"{name} reads {set(cls.reads) - READS.keys()}"
    poisoned = [PoisonedTrajectory(trajectory, cls.reads) for trajectory in keydoor_batch]
    plain = credit_on(build(cls, context), keydoor_batch)
    outputs_equal(credit_on(build(cls, context), poisoned), plain)


class GiGPOClaimingLess(GiGPO):
    """GiGPO declaring less than it reads: it reads observations (its anchor states)."""

    name = "gigpo_claiming_less"
    reads = frozenset({"return", "step_rewards"})


class GRPOReadingTheFlag(GRPO):
    """GRPO keeping only the credit of the env's successes: reads `outcome`, undeclared."""

    name = "grpo_reading_the_flag"

    def compute(self, trajectories):
        output = super().compute(trajectories)
        kept = [
            values * float(trajectory.success)
            for values, trajectory in zip(output.step_advantages, trajectories, strict=True)
        ]
        return CreditOutput(kept, broadcast_to_tokens(trajectories, kept))


@pytest.mark.parametrize(
    ("cls", "field"),
    [(GiGPOClaimingLess, "Step.observation"), (GRPOReadingTheFlag, "Trajectory.success")],
)
def test_a_module_reading_an_undeclared_field_is_caught(cls, field, keydoor_batch):
    poisoned = [PoisonedTrajectory(trajectory, cls.reads) for trajectory in keydoor_batch]
    with pytest.raises(UndeclaredRead, match=f"read {field}"):
        credit_on(cls(), poisoned)


def test_token_ids_give_their_number_but_not_their_values(keydoor_batch):
    step = PoisonedTrajectory(keydoor_batch[1], frozenset({"return"})).steps[0]
    assert len(step.action_token_ids) > 0
    with pytest.raises(UndeclaredRead, match=r"values of Step\.action_token_ids"):
        list(step.action_token_ids)


def test_the_vocabulary_names_every_field_of_a_trajectory_and_a_step():
    def attributes(cls: type) -> set[str]:
        fields = {f.name for f in dataclasses.fields(cls)}
        properties = {n for n, v in vars(cls).items() if isinstance(v, property)}
        return fields | properties

    named_trajectory = {f for read in READS.values() for f in read.trajectory_fields}
    named_step = {f for read in READS.values() for f in read.step_fields}
    assert attributes(Trajectory) == named_trajectory | set(IDENTITY_FIELDS)
    assert attributes(Step) == named_step
    assert not named_trajectory & set(IDENTITY_FIELDS)


def test_oracles_are_the_modules_that_read_labels_outcome_or_mdp_state():
    oracles = {name for name, cls in REGISTRY.items() if is_oracle(cls)}
    assert {"rule_based", "oracle", "hca"} <= oracles
    assert not oracles & {"grpo", "gigpo", "hcapo", "hcapo_seed", "hp_rlvr"}
    for name in oracles:
        assert REGISTRY[name].reads & {"env_labels", "outcome", "mdp_state"}
