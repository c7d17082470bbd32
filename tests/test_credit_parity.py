"""Parity on the `return` channel: nothing a compared credit module reads states the env's
noise-free verdict, and every credit class, registered or not, reads only what it declares.

On KeyDoor's and Umbrella's `return` channel the verdict a module may use is the channel's
(`credit.base.verdict`: return > 0, as noisy as the return GRPO reads). The env's own
verdict (`Trajectory.success`, and the "solved" / "not solved" of the default final
feedback) is noise-free: a module reading it beside the channel is an oracle. The
feedback is shown to the policy by the hindsight block of HCAPO and HP-RLVR, so the envs
offer `verdict_feedback=False` (the feedback then says only what the agent saw happen);
here, with it, flipping the env's verdict in the success flag and in the feedback text
moves no compared module's credit, while with the default feedback (the text of the
committed studies) the same flip moves HCAPO's and HP-RLVR's: the guard's planted
violation. Every class runs: the registry's and the exact-hindsight classes named by
path (`credit.exact_source`), on constrained rollouts of `small` (their steps' tokens
must be trie paths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import Trajectory
from creditgym.credit import REGISTRY, CreditContext, build
from creditgym.credit.base import is_oracle, verdict
from creditgym.credit.exact_source import HCAPOExact, HCAPOSeedExact, HPRLVRExact
from creditgym.envs.keydoor.env import KeyDoorEnv
from creditgym.envs.umbrella.dynamics import LEAVE, TAKE, WALK_COMMANDS
from creditgym.envs.umbrella.env import UmbrellaEnv
from creditgym.measure.ground_truth import exact_sources
from creditgym.models.registry import LoadedModel, build_small
from creditgym.trainers.policy_gradient import AgentConfig
from tests.test_credit_reads import PoisonedTrajectory, credit_on, outputs_equal
from tests.test_feedback_leak import play

KEYDOOR = "creditgym/KeyDoor-v0"
ENV_OPTIONS = {"delay": 2, "variance": "high"}
VERDICT_FREE = {**ENV_OPTIONS, "verdict_feedback": False}
SAMPLING = AgentConfig(constrained=True, max_new_tokens=8, history_len=0, temperature=1.0)
# Every credit class creditgym ships: the registry and the exact-hindsight classes.
CLASSES: dict[str, type] = {
    **REGISTRY,
    **{cls.name: cls for cls in (HCAPOExact, HCAPOSeedExact, HPRLVRExact)},
}
COMPARED = sorted(name for name, cls in CLASSES.items() if not is_oracle(cls))


@pytest.fixture(scope="module")
def small() -> LoadedModel:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return build_small()


def context(policy: LoadedModel, env_kwargs) -> CreditContext:
    return CreditContext(
        policy=policy,
        history_len=SAMPLING.history_len,
        env_id=KEYDOOR,
        env_kwargs=env_kwargs,
        sampling=SAMPLING,
        exact_sources=exact_sources,
    )


def fresh(name: str, env_kwargs, small: LoadedModel):
    """A new module (HP-RLVR keeps a reward baseline across calls: one call each)."""
    return build(CLASSES[name], context(small, env_kwargs))


def rollouts(small: LoadedModel, env_kwargs) -> list[Trajectory]:
    """Three groups of 4 constrained rollouts of `small` on KeyDoor, on the return channel."""
    agent = LLMAgent(small, seed=3, **vars(SAMPLING))
    batch, _ = collect(
        KEYDOOR,
        agent,
        [11, 12, 13],
        group_size=4,
        num_envs=12,
        env_kwargs=env_kwargs,
        progress=False,
    )
    return batch


@pytest.fixture(scope="module")
def verdict_free_batch(small) -> list[Trajectory]:
    return rollouts(small, VERDICT_FREE)


@pytest.fixture(scope="module")
def verdict_batch(small) -> list[Trajectory]:
    return rollouts(small, ENV_OPTIONS)


def flip_verdict(trajectory: Trajectory) -> Trajectory:
    """The trajectory with the env's verdict flipped, in the flag and in the feedback's
    words ("solved" <-> "not solved"), the channel's rewards unchanged."""
    if "not solved" in trajectory.feedback:
        feedback = trajectory.feedback.replace("not solved", "solved")
    else:
        feedback = trajectory.feedback.replace("solved", "not solved")
    return dataclasses.replace(trajectory, success=not trajectory.success, feedback=feedback)


def test_the_batch_has_the_env_verdict_apart_from_the_channel_verdict(
    verdict_free_batch, verdict_batch
):
    for batch in (verdict_free_batch, verdict_batch):
        assert {t.success for t in batch} == {True, False}
        # Failures that ate apples: the channel says success where the env does not.
        assert any(verdict(t) and not t.success for t in batch)
    assert not any("solved" in t.feedback for t in verdict_free_batch)
    assert all("solved" in t.feedback for t in verdict_batch)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_credit_class_reads_only_what_it_declares(name, small, verdict_free_batch):
    cls = CLASSES[name]
    poisoned = [PoisonedTrajectory(t, cls.reads) for t in verdict_free_batch]
    outputs_equal(
        credit_on(fresh(name, VERDICT_FREE, small), poisoned),
        credit_on(fresh(name, VERDICT_FREE, small), verdict_free_batch),
    )


@pytest.mark.parametrize("name", COMPARED)
def test_a_flipped_env_verdict_moves_no_compared_module_on_the_return_channel(
    name, small, verdict_free_batch
):
    flipped = [flip_verdict(t) for t in verdict_free_batch]
    outputs_equal(
        credit_on(fresh(name, VERDICT_FREE, small), flipped),
        credit_on(fresh(name, VERDICT_FREE, small), verdict_free_batch),
    )


@pytest.mark.parametrize("name", ["hcapo", "hp_rlvr"])
def test_with_the_verdict_in_the_feedback_the_flip_moves_the_hindsight_modules(
    name, small, verdict_batch
):
    """The planted violation: the default feedback states the verdict, and the test above
    would fail on it (the committed studies' return-channel rows read it)."""
    plain = credit_on(fresh(name, ENV_OPTIONS, small), verdict_batch).step_advantages
    flipped = [flip_verdict(t) for t in verdict_batch]
    moved = credit_on(fresh(name, ENV_OPTIONS, small), flipped).step_advantages
    assert any(not np.array_equal(a, b) for a, b in zip(plain, moved, strict=True))


def test_the_oracles_are_the_classes_that_read_the_exact_state_or_labels():
    oracles = {name for name, cls in CLASSES.items() if is_oracle(cls)}
    assert oracles == {
        "rule_based",
        "oracle",
        "hca",
        "hcapo_exact",
        "hcapo_seed_exact",
        "hp_rlvr_exact",
    }
    assert HPRLVRExact.reads >= {"step_rewards", "mdp_state"}


def feedbacks(env, episodes: Sequence[Sequence[str]], seed: int = 0) -> list[tuple[bool, str]]:
    return [
        (info["success"], info["feedback"])
        for info in (play(env, actions, seed=seed) for actions in episodes)
    ]


def test_keydoor_verdict_free_feedback_is_the_same_whether_or_not_the_door_opened():
    env = KeyDoorEnv(delay=1, num_objects=2, verdict_feedback=False)
    _observation, info = env.reset(seed=0)
    things = [c for c in info["admissible_commands"]]
    key = next(c for c in things if c.endswith("key"))
    other = next(c for c in things if not c.endswith("key"))
    opened = feedbacks(
        env, [[key, "eat the apple", "open the door"], [other, "eat the apple", "open the door"]]
    )
    assert [success for success, _ in opened] == [True, False]
    assert opened[0][1] == opened[1][1] == "You tried the door."
    timed_out = feedbacks(env, [[key, "wait", "wait", "wait", "wait"]])
    assert timed_out == [(False, "Step limit (5) reached before the door was tried.")]


def test_umbrella_verdict_free_feedback_is_the_weather_whichever_the_choice():
    env = UmbrellaEnv(length=3, verdict_feedback=False)
    walk = [WALK_COMMANDS[0]] * 2
    ended = feedbacks(env, [[TAKE, *walk], [LEAVE, *walk]], seed=5)
    assert {success for success, _ in ended} == {True, False}
    assert ended[0][1] == ended[1][1]
    assert ended[0][1] in ("You reached work in the rain.", "You reached work in sunshine.")


@pytest.mark.parametrize("env_class", [KeyDoorEnv, UmbrellaEnv])
def test_verdict_free_feedback_cannot_be_causal(env_class):
    with pytest.raises(ValueError, match="needs verdict_feedback=true"):
        env_class(causal_feedback=True, verdict_feedback=False)
    with pytest.raises(ValueError, match="verdict_feedback must be true or false"):
        env_class(verdict_feedback="false")
