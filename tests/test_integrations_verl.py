"""creditgym credit modules as verl advantage estimators (integrations.verl_credit).

Trajectories are written by hand, encoded as verl's multi-turn batch lays out a rollout
(one row per rollout; each turn's tokens under response_mask 1, the env's reply under 0;
a step's reward on its turn's last token, the outcome on the last response token), and
the estimator verl looks up by name must give each turn's tokens the advantage the
creditgym module gives that step of the hand-written trajectory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

# verl 0.9.1 caps transformers below 5.11: `make test` runs this file in .venv-verl, built
# from verl's own lock (locks/verl.txt); an environment without verl skips it.
pytest.importorskip("verl", reason="verl is not installed here (make test runs it in .venv-verl)")

import verl
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from creditgym.agents.trajectory import Step, Trajectory
from creditgym.credit.gigpo import GiGPO
from creditgym.credit.grpo import GRPO
from creditgym.credit.hp_rlvr import HPRLVR, HPRLVROptions
from creditgym.credit.rule_based import RuleBased
from creditgym.integrations import verl_plugin
from creditgym.integrations.verl_credit import (
    HPRLVREstimator,
    compute_advantage,
    trajectories_from_batch,
    turns_of,
)
from creditgym.models.registry import build_tiny

TURN_TOKENS = 3  # policy tokens per turn
REPLY_TOKENS = 2  # env-reply tokens after each turn but the last


def trajectory(group: str, steps: list[tuple[str, float, bool]], success: bool) -> Trajectory:
    return Trajectory(
        env_id="verl",
        task_id=group,
        seed=0,
        group_id=group,
        task="",
        initial_observation=steps[0][0],
        steps=tuple(
            Step(observation=obs, action="", reward=reward, info={"key_step": key})
            for obs, reward, key in steps
        ),
        success=success,
    )


# Two groups; rewards are dyadic so float32 tensors hold them exactly. Group a repeats
# the observation "desk" at different steps (a GiGPO anchor state); b has a singleton.
TRAJECTORIES = [
    trajectory("a", [("hall", -0.25, False), ("desk", -0.25, True), ("door", 1.0, True)], True),
    trajectory("a", [("hall", -0.25, False), ("desk", 0.0, True)], False),
    trajectory("a", [("desk", -0.25, False), ("hall", -0.25, False), ("desk", 0.5, True)], False),
    trajectory("b", [("room", 1.0, True)], True),
    trajectory("b", [("room", -0.25, False), ("room", 0.0, False)], False),
]


def turn_starts(trajectory: Trajectory) -> list[tuple[int, int]]:
    """(start, length) of each turn in the row: the step's generated tokens (TURN_TOKENS
    for a step without any), then REPLY_TOKENS of env reply."""
    spans, position = [], 0
    for step in trajectory.steps:
        length = len(step.action_token_ids) or TURN_TOKENS
        spans.append((position, length))
        position += length + REPLY_TOKENS
    return spans


def verl_batch(
    trajectories: list[Trajectory], divergences: list[list[np.ndarray]] | None = None
) -> DataProto:
    """The batch verl's multi-turn rollout builds for these trajectories (right padding);
    `divergences` (per trajectory, per step, one per token) go to `hindsight_divergence`."""
    width = max(sum(n + REPLY_TOKENS for _, n in turn_starts(t)) for t in trajectories) + 1
    rewards = torch.zeros(len(trajectories), width)
    mask = torch.zeros(len(trajectories), width, dtype=torch.int64)
    divergence = torch.zeros(len(trajectories), width)
    for row, traj in enumerate(trajectories):
        for t, (step, (start, length)) in enumerate(
            zip(traj.steps, turn_starts(traj), strict=True)
        ):
            mask[row, start : start + length] = 1
            rewards[row, start + length - 1] = step.reward
            if divergences is not None:
                divergence[row, start : start + length] = torch.from_numpy(divergences[row][t])
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": mask,
            "hindsight_divergence": divergence,
        },
        non_tensors={
            "uid": np.array([t.group_id for t in trajectories], dtype=object),
            "turn_observations": np.array(
                [[s.observation for s in t.steps] for t in trajectories], dtype=object
            ),
            "turn_key_steps": np.array(
                [[s.key_step for s in t.steps] for t in trajectories], dtype=object
            ),
            "success": np.array([t.success for t in trajectories], dtype=object),
            "task_id": np.array([f"{t.env_id}/{t.task_id}" for t in trajectories], dtype=object),
        },
    )


def by_turn(step_advantages: list[np.ndarray], like: torch.Tensor) -> torch.Tensor:
    """What the estimator must return: step t's value on turn t's tokens."""
    expected = torch.zeros(like.shape)
    for row, values in enumerate(step_advantages):
        for t, value in enumerate(values):
            start = t * (TURN_TOKENS + REPLY_TOKENS)
            expected[row, start : start + TURN_TOKENS] = float(value)
    return expected


def by_token(
    trajectories: list[Trajectory], token_advantages: list[list[np.ndarray]], like: torch.Tensor
) -> torch.Tensor:
    """Per-token values of each step on its turn's tokens."""
    expected = torch.zeros(like.shape)
    for row, traj in enumerate(trajectories):
        for values, (start, length) in zip(token_advantages[row], turn_starts(traj), strict=True):
            expected[row, start : start + length] = torch.from_numpy(values)
    return expected


def test_hp_rlvr_estimator_gives_the_module_token_credit_batch_after_batch() -> None:
    loaded = build_tiny()
    tokenizer = loaded.tokenizer

    def generated(traj: Trajectory) -> Trajectory:  # as if the policy had written the actions
        steps = []
        for step in traj.steps:
            ids = tuple(tokenizer.encode(f"<action>{step.observation}</action>"))
            steps.append(replace(step, action_token_ids=ids, action_logprobs=(0.0,) * len(ids)))
        return replace(traj, steps=tuple(steps))

    # Task a: returns 0.5 and -0.25 (its next baseline 0.125); task b: return 1.0 twice.
    trajectories = [generated(t) for t in (TRAJECTORIES[0], TRAJECTORIES[1], TRAJECTORIES[3])]
    trajectories.append(trajectories[2])
    module = HPRLVR(loaded, generation_cache_bytes=0)
    for _ in range(2):  # the second batch meets the baselines the first one left
        batch = verl_batch(trajectories, module.divergences(trajectories))
        expected = module(trajectories).token_advantages
        computed = compute_advantage(batch, "creditgym_hp_rlvr").batch["advantages"]
        torch.testing.assert_close(
            computed, by_token(trajectories, expected, computed), rtol=1e-5, atol=1e-6
        )
    assert module.task_baselines["verl/b"] == pytest.approx(1.0)
    assert torch.all(computed[2:] == 0)  # task b's R equals its baseline now: no credit
    assert torch.any(computed[:2] != 0)


def test_hp_rlvr_estimator_refuses_options_it_cannot_honour() -> None:
    for options, name in [
        (HPRLVROptions(eligible_tokens="action"), "eligible_tokens"),
        (HPRLVROptions(weights="uniform"), "weights=uniform"),
    ]:
        with pytest.raises(ValueError, match=name):
            HPRLVREstimator(options)


def test_installed_verl_is_the_pinned_version() -> None:
    assert verl.__version__ == "0.9.1"


def test_turns_are_runs_of_the_response_mask_and_rewards_follow_them() -> None:
    turns = turns_of(np.array([1, 1, 0, 0, 1, 0, 1, 1, 0]))
    assert [(t.start, t.end) for t in turns] == [(0, 2), (4, 5), (6, 8)]
    assert [(t.reward_start, t.reward_end) for t in turns] == [(0, 4), (4, 6), (6, 9)]
    batch = verl_batch(TRAJECTORIES)
    rebuilt, _ = trajectories_from_batch(
        batch.batch["token_level_rewards"],
        batch.batch["response_mask"],
        batch.non_tensor_batch["uid"],
        batch.non_tensor_batch,
    )
    for original, mapped in zip(TRAJECTORIES, rebuilt, strict=True):
        assert [s.reward for s in mapped.steps] == [s.reward for s in original.steps]
        assert [s.observation for s in mapped.steps] == [s.observation for s in original.steps]
        assert [s.key_step for s in mapped.steps] == [s.key_step for s in original.steps]
        assert (mapped.group_id, mapped.success) == (original.group_id, original.success)


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("creditgym_grpo", GRPO(convention="verl")),
        ("creditgym_gigpo", GiGPO(convention="verl-agent")),
        ("creditgym_rule_based", RuleBased()),
    ],
)
def test_estimator_found_by_verl_gives_each_turn_the_module_step_advantage(name, module) -> None:
    batch = verl_batch(TRAJECTORIES)
    computed = compute_advantage(batch, name).batch
    expected = by_turn(module(TRAJECTORIES).step_advantages, computed["response_mask"])
    torch.testing.assert_close(computed["advantages"], expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(computed["returns"], computed["advantages"])
    assert torch.all(computed["advantages"][computed["response_mask"] == 0] == 0)
    if name == "creditgym_gigpo":  # the anchor state "desk" gave some step its own term
        assert not torch.allclose(
            computed["advantages"],
            by_turn(GRPO(convention="verl-agent")(TRAJECTORIES).step_advantages, expected),
        )


def test_creditgym_grpo_equals_verl_grpo_called_as_verl_calls_it() -> None:
    batch = verl_batch(TRAJECTORIES)
    arguments = {
        "token_level_rewards": batch.batch["token_level_rewards"],
        "response_mask": batch.batch["response_mask"],
        "index": batch.non_tensor_batch["uid"],
        "config": None,
    }
    ours, _ = get_adv_estimator_fn("creditgym_grpo")(**arguments)
    theirs, _ = get_adv_estimator_fn("grpo")(**arguments)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_step_level_estimator_without_turn_fields_says_what_it_needs() -> None:
    batch = verl_batch(TRAJECTORIES)
    with pytest.raises(ValueError, match="turn_observations"):
        get_adv_estimator_fn("creditgym_gigpo")(
            token_level_rewards=batch.batch["token_level_rewards"],
            response_mask=batch.batch["response_mask"],
            index=batch.non_tensor_batch["uid"],
            config=None,
        )


CREDITGYM_ESTIMATORS = (
    "creditgym_grpo",
    "creditgym_gigpo",
    "creditgym_rule_based",
    "creditgym_hp_rlvr",
    "creditgym_hcapo",
)


@pytest.mark.slow  # a fresh interpreter importing verl, torch and transformers: ~30 s
def test_import_verl_registers_every_creditgym_estimator_through_the_plugin_entry_point(
    tmp_path,
):
    # A fresh interpreter outside the checkout, with no VERL_USE_* variable: only the
    # installed `verl.plugins` entry point can bring creditgym's estimators in.
    script = (
        "import sys, verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        f"print([get_adv_estimator_fn(name) is not None for name in {CREDITGYM_ESTIMATORS}])\n"
        "print('creditgym.integrations.verl_plugin' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [str([True] * len(CREDITGYM_ESTIMATORS)), "True"]


def test_the_plugin_reports_a_missing_verl_instead_of_failing_silently(tmp_path):
    # creditgym installed without its verl extra: the estimators cannot be registered,
    # and the plugin says so on stderr, naming the extra, without raising.
    script = (
        "import importlib.abc, sys\n"
        "class NoVerl(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'verl':\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, NoVerl())\n"
        "from creditgym.integrations import verl_plugin\n"
        "print(verl_plugin.register_estimators())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(list(verl_plugin.ESTIMATOR_MODULES))
    warnings = [line for line in result.stderr.splitlines() if "PluginWarning" in line]
    # Once when imported, once for the explicit call; each names the missing package.
    assert len(warnings) == 2 * len(verl_plugin.ESTIMATOR_MODULES)
    assert all("'verl" in line and "creditgym[verl]" in line for line in warnings)
