"""Reward channels (agents/trajectory.py): the signal credit and training see, and the
verdict modules read off it (credit.base.verdict; docs/credit.md)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch

from creditgym.agents.episode import play_episode
from creditgym.agents.tabular import TableAgent
from creditgym.agents.trajectory import REWARD_CHANNELS, RewardChannel, Trajectory, outcome_channel
from creditgym.benchmarks.run import RunConfig, resolve, run
from creditgym.credit.base import verdict
from creditgym.credit.grpo import GRPO
from creditgym.credit.hcapo import HCAPO, HCAPOOptions
from creditgym.credit.hindsight import HCAPO_WORDING, hindsight_block
from creditgym.credit.oracle import Oracle
from creditgym.measure.ground_truth import MDP_CHANNELS, TaskMDPs
from creditgym.models.registry import build_tiny
from creditgym.report import leaderboard, records
from creditgym.report.study import comparisons
from tests.credit_cases import scripted_trajectory, tokenised
from tests.test_exact_hindsight import KEYDOOR, random_table
from tests.test_leaderboard import made_up_run


def keydoor_like(rewards, success, group_id="g") -> Trajectory:
    """Apples paid along the way, the door's reward (or none) at the end."""
    return scripted_trajectory(group_id, rewards, success)


def test_outcome_channel_pays_only_the_verdict_at_the_last_step():
    success = keydoor_like([10.0, 1.0, 1.0], True)
    failure = keydoor_like([10.0, 1.0, 0.0], False)
    assert [s.reward for s in outcome_channel(success).steps] == [0.0, 0.0, 1.0]
    assert [s.reward for s in outcome_channel(failure).steps] == [0.0, 0.0, 0.0]
    # Everything but the rewards is kept.
    moved = outcome_channel(failure)
    assert dataclasses.replace(moved, steps=()) == dataclasses.replace(failure, steps=())
    for before, after in zip(failure.steps, moved.steps, strict=True):
        assert dataclasses.replace(after, reward=before.reward) == before
    empty = keydoor_like([], True)
    assert outcome_channel(empty) == empty


def test_the_return_channel_is_the_env_reward_and_the_names_match_the_type():
    trajectory = keydoor_like([10.0, 1.0, 0.0], False)
    assert REWARD_CHANNELS["return"](trajectory) is trajectory
    assert set(REWARD_CHANNELS) == set(RewardChannel.__args__)


def test_the_verdict_is_read_off_the_channel():
    apples_only = keydoor_like([10.0, 1.0, 0.0], False)  # failed, yet paid 11
    penalised_success = keydoor_like([-0.1, -0.1, 1.0], True)
    assert verdict(apples_only) and not verdict(outcome_channel(apples_only))
    assert verdict(penalised_success) and verdict(outcome_channel(penalised_success))
    words = [
        hindsight_block("outcome", t, 0, HCAPO_WORDING)
        for t in (apples_only, outcome_channel(apples_only))
    ]
    assert words == ["Outcome: task completed.", "Outcome: task failed."]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_tiny()


def micro_terms(batch: list[Trajectory], loaded) -> list[np.ndarray]:
    """HCAPO's micro term per step (its credit less GRPO's), the ratio fixed at 1."""
    hcapo = HCAPO(loaded, HCAPOOptions(clip=(1.0, 1.0)), generation_cache_bytes=0)(batch)
    grpo = GRPO()(batch)
    return [h - g for h, g in zip(hcapo.step_advantages, grpo.step_advantages, strict=True)]


def test_hcapos_do_no_harm_gate_follows_the_channel(tiny):
    # A failure paid a small apple, a success paid 10, a failure paid nothing: the small
    # return sits below the group's mean hindsight Q, so its micro terms are negative.
    batch = [
        tokenised(keydoor_like([0.5, 0.0, 0.0], False), tiny),
        tokenised(keydoor_like([9.0, 0.0, 1.0], True), tiny),
        tokenised(keydoor_like([0.0, 0.0, 0.0], False), tiny),
    ]
    on_return = micro_terms(batch, tiny)
    on_outcome = micro_terms([outcome_channel(t) for t in batch], tiny)
    # Return channel: the apple makes it a success there (return > 0), so the gate zeroes
    # its negative micro terms, as it would a success's ...
    np.testing.assert_allclose(on_return[0], 0.0, atol=1e-6)
    # ... and on the outcome channel it is the failure it was: its terms stay negative.
    assert np.all(on_outcome[0] < -0.1)
    # The env's own success is gated on both channels.
    assert np.all(on_return[1] >= -1e-6) and np.all(on_outcome[1] >= -1e-6)


KEYDOOR_RUN = {
    "env": "keydoor",
    "model": "small",
    "credit": "grpo",
    "steps": 1,
    "group_size": 2,  # four groups of two: some uniform on the verdict
    "tasks_per_step": 1,
    "learning_rate": 3e-3,
    "max_new_tokens": 8,
    "eval_episodes": 2,
    "sample_group_size": 0,
}


def test_a_keydoor_run_on_the_outcome_channel_trains_on_the_verdict(tmp_path):
    outcome = RunConfig(out=tmp_path, reward_channel="outcome", **KEYDOOR_RUN)
    default = RunConfig(out=tmp_path, **KEYDOOR_RUN)
    assert resolve(outcome).name != resolve(default).name
    assert (
        resolve(dataclasses.replace(default, reward_channel="return")).name == resolve(default).name
    )
    identity = records.read_json(run(resolve(outcome)) / records.CONFIG_FILE)["identity"]
    assert identity["reward_channel"] == "outcome"
    identity = records.read_json(run(resolve(default)) / records.CONFIG_FILE)["identity"]
    assert identity["reward_channel"] == "return"
    [on_outcome] = records.read_metrics(tmp_path / resolve(outcome).name)
    [on_return] = records.read_metrics(tmp_path / resolve(default).name)
    # The same rollouts (same seed and starting policy), measured on the env's reward ...
    for key in ("rollout/success_rate", "rollout/mean_return"):
        assert on_outcome[key] == on_return[key]
    # ... credited on two signals: the apples make groups' returns differ that the verdict
    # alone leaves uniform (both rollouts failed, or both succeeded).
    uniform = {
        k: m["credit/frac_reward_zero_std"]
        for k, m in [("outcome", on_outcome), ("return", on_return)]
    }
    assert uniform["outcome"] > uniform["return"], uniform


def test_the_leaderboard_has_a_table_per_channel_and_lists_oracles_apart(tmp_path):
    trained = {"env": "keydoor", "model": "tiny", "steps": 2}
    made_up_run(tmp_path, [True, False], credit="grpo", **trained)
    made_up_run(tmp_path, [True, True], credit="rule_based", **trained)  # an oracle
    made_up_run(tmp_path, [False, False], credit="grpo", reward_channel="outcome", **trained)
    made_up_run(tmp_path, [True, False], credit="hcapo", reward_channel="outcome", **trained)
    made_up_run(tmp_path, [True, True], env="keydoor", model="expert", credit="none")
    table = leaderboard.build_table(records.load_runs(tmp_path), tmp_path)
    by_channel = {section.channel: section for section in table.sections}
    assert sorted(by_channel) == ["outcome", "return"]
    credits = {
        channel: (
            sorted(table.settings[m]["credit"] for m in section.methods),
            [table.settings[m]["credit"] for m in section.oracles],
        )
        for channel, section in by_channel.items()
    }
    # The expert (trained on nothing) sits in both; rule_based reads labels: apart.
    assert credits == {
        "return": (["grpo", "none"], ["rule_based"]),
        "outcome": (["grpo", "hcapo", "none"], []),
    }
    # The oracle's 100 % is never the best of its table.
    for line in leaderboard.comparisons(table, by_channel["return"]):
        assert "rule_based" not in line
    markdown = leaderboard.render_markdown(table, {})
    assert "trained on the outcome channel" in markdown and leaderboard.ORACLE_NOTE in markdown
    assert "| tiny | policy_gradient | hcapo | 8 | 2 | outcome |" in markdown
    assert "| expert | eval-only | none | – | – | – |" in markdown
    rows = leaderboard.csv_frame(table)
    oracle_rows = rows[rows["oracle"]]
    assert set(oracle_rows["credit"]) == {"rule_based"}
    assert set(oracle_rows["channel"]) == {"return"}


def test_the_study_compares_rows_on_one_channel_and_never_an_oracle():
    successes = {
        ("grpo", "grpo", "return", False): [0.2, 0.4, 0.3],
        ("hcapo", "hcapo", "return", False): [0.9, 1.0, 0.8],
        ("grpo on outcome", "grpo", "outcome", False): [0.5, 0.6, 0.7],
        ("hcapo on outcome", "hcapo", "outcome", False): [0.6, 0.5, 0.7],
        ("rule_based", "rule_based", "return", True): [1.0, 1.0, 1.0],
    }
    task = {"env": "KeyDoor-v0", "task": "KeyDoor-v0[delay=4]"}
    fields = ("method", "form", "channel", "oracle")
    frame = pd.DataFrame(
        [
            {**task, **dict(zip(fields, row, strict=True)), "seed": seed, "final_success": value}
            for row, values in successes.items()
            for seed, value in enumerate(values)
        ]
    )
    pairs = comparisons.improvement_pairs(frame, "final_success", reps=200)
    assert sorted(zip(pairs.x, pairs.y, strict=True)) == [
        ("grpo", "hcapo"),
        ("grpo on outcome", "hcapo on outcome"),
    ]
    assert pairs.confirmatory.all()  # each module against grpo on its own channel


def test_the_oracle_computes_on_the_mdp_of_its_channel():
    options = {"delay": 2, "variance": "high"}
    mdps, task_id = TaskMDPs(KEYDOOR, options), "keydoor-3"
    table = random_table(mdps(task_id), seed=4)
    env = gym.make(KEYDOOR, **options)
    agent = TableAgent({task_id: table}, seed=0)
    played = [play_episode(env, agent, seed=k, options={"task_id": task_id}) for k in range(24)]
    env.close()
    assert set(MDP_CHANNELS) == set(REWARD_CHANNELS)
    credit = {}
    for channel, on_channel in MDP_CHANNELS.items():
        batch = [REWARD_CHANNELS[channel](trajectory) for trajectory in played]
        mdp = on_channel(mdps(task_id))
        # The MDP pays each step what the channel pays the trajectory.
        for step in (step for trajectory in batch for step in trajectory.steps):
            paid = {
                t.reward
                for t in mdp.transitions(step.info["mdp_state"], step.action)
                if t.next_state == step.info["mdp_next_state"]
            }
            assert step.reward in paid
        output = Oracle(lambda task, f=on_channel: f(mdps(task)), lambda m: table)(batch)
        credit[channel] = [
            (step.info["mdp_state"], float(value))
            for trajectory, values in zip(batch, output.step_advantages, strict=True)
            for step, value in zip(trajectory.steps, values, strict=True)
        ]
    # Eating or waiting in the orchard leaves the door's outcome as it was: no credit on
    # the outcome channel, while the return channel credits the apples.
    orchard = {c: [v for s, v in credit[c] if s.startswith("orchard")] for c in credit}
    assert orchard["outcome"] and max(abs(v) for v in orchard["outcome"]) < 1e-9
    assert max(abs(v) for v in orchard["return"]) > 0.1
    room = [v for s, v in credit["outcome"] if s.startswith("room")]
    assert max(abs(v) for v in room) > 0.01  # the key step still gets its credit
