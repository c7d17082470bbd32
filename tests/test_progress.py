"""Signs of life in long phases: the rollout bar's steps and tokens/s, and the one line
`benchmarks.run` prints up front of what it will do."""

from __future__ import annotations

import re

from agents import rollout
from agents.base import RandomAgent
from agents.llm import LLMAgent
from agents.models import build_tiny
from benchmarks import run as run_module
from benchmarks.run import parse_config, plan_line

KEYDOOR = "creditgym/KeyDoor-v0"


def last_postfix(stderr: str) -> tuple[int, float]:
    """(steps, tokens/s) of the last refresh of a rollout bar."""
    steps, rate = re.findall(r"(\d+) steps, ([\d.]+) tok/s", stderr)[-1]
    return int(steps), float(rate)


def test_the_rollout_bar_counts_every_step_played(monkeypatch, capsys):
    monkeypatch.setattr(rollout, "PROGRESS_INTERVAL_S", 0.0)  # refresh on every step
    trajectories, _ = rollout.collect(
        KEYDOOR, RandomAgent(seed=3), [1, 2], group_size=2, env_workers="inline"
    )
    steps, rate = last_postfix(capsys.readouterr().err)
    assert steps == sum(t.length for t in trajectories) > 4
    assert rate == 0.0  # a scripted agent generates no tokens


def test_the_rollout_bar_shows_the_tokens_an_llm_generates(monkeypatch, capsys):
    monkeypatch.setattr(rollout, "PROGRESS_INTERVAL_S", 0.0)
    agent = LLMAgent(build_tiny(), max_new_tokens=4, history_len=0, seed=0)
    _, stats = rollout.collect(KEYDOOR, agent, [1], env_workers="inline")
    steps, rate = last_postfix(capsys.readouterr().err)
    assert steps == stats.num_steps and stats.tokens_generated > 0 and rate > 0


def test_the_plan_line_names_model_steps_rollouts_episodes_and_device():
    cfg = parse_config(["--env", "keydoor", "--model", "tiny", "--credit", "hp_rlvr"])
    line = plan_line(cfg, KEYDOOR, None)
    # hp_rlvr: G = 1 with 8x the tasks, so as many rollouts as GRPO's 1 task x G = 8.
    assert line == (
        "train tiny on creditgym/KeyDoor-v0 with policy_gradient + hp_rlvr: 1 step of 8 "
        "rollouts (G = 1), then evaluate 4 episodes, on cpu"
    )
    scripted = parse_config(["--env", "keydoor", "--model", "random", "--credit", "none"])
    assert plan_line(scripted, KEYDOOR, None) == (
        "evaluate random on creditgym/KeyDoor-v0: 4 episodes, on cpu"
    )


def test_the_plan_line_warns_of_tens_of_minutes_for_a_large_policy_on_a_cpu(monkeypatch):
    tiny = build_tiny()
    cfg = parse_config(["--env", "keydoor", "--model", "tiny", "--credit", "grpo"])
    assert "tens of minutes" not in plan_line(cfg, KEYDOOR, tiny)
    # The threshold at tiny's own size: tiny counts as large.
    monkeypatch.setattr(run_module, "SLOW_ON_CPU_PARAMETERS", tiny.model.num_parameters())
    assert plan_line(cfg, KEYDOOR, tiny).endswith("policy on a CPU: expect tens of minutes")
