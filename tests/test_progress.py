"""Signs of life in long phases: the rollout bar's steps and tokens/s, hindsight scoring's
views scored, bars redrawn while a long call runs, and the one line `benchmarks.run`
prints up front of what it will do."""

from __future__ import annotations

import re
import time

from creditgym.agents import rollout
from creditgym.agents.base import RandomAgent
from creditgym.agents.llm import LLMAgent
from creditgym.benchmarks.run import command as run_module
from creditgym.benchmarks.run import parse_config, resolve
from creditgym.benchmarks.run.command import plan_line
from creditgym.models import progress, scoring
from creditgym.models.progress import LiveBar
from creditgym.models.registry import build_tiny
from creditgym.models.scoring import TeacherForced

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
    line = plan_line(resolve(cfg), None)
    # hp_rlvr: G = 1 with 8x the tasks, so as many rollouts as GRPO's 1 task x G = 8.
    assert line == (
        "train tiny on creditgym/KeyDoor-v0 with policy_gradient + hp_rlvr: 1 step of 8 "
        "rollouts (G = 1), then evaluate 4 episodes, on cpu"
    )
    scripted = parse_config(["--env", "keydoor", "--model", "random", "--credit", "none"])
    assert plan_line(resolve(scripted), None) == (
        "evaluate random on creditgym/KeyDoor-v0: 4 episodes, on cpu"
    )


def test_the_plan_line_warns_of_tens_of_minutes_for_a_large_policy_on_a_cpu(monkeypatch):
    tiny = build_tiny()
    cfg = parse_config(["--env", "keydoor", "--model", "tiny", "--credit", "grpo"])
    assert "tens of minutes" not in plan_line(resolve(cfg), tiny)
    # The threshold at tiny's own size: tiny counts as large.
    monkeypatch.setattr(run_module, "SLOW_ON_CPU_PARAMETERS", tiny.model.num_parameters())
    assert plan_line(resolve(cfg), tiny).endswith("policy on a CPU: expect tens of minutes")


def test_hindsight_scoring_counts_the_views_scored_of_the_total(monkeypatch, capsys):
    monkeypatch.setattr(scoring, "SHOW_AFTER_S", 0.0)  # show the bar from the start
    counted: list[tuple[int, int]] = []
    update = LiveBar.update

    def counting_update(bar: LiveBar, n: int = 1) -> bool | None:
        counted.append((bar.total, n))
        return update(bar, n)

    monkeypatch.setattr(LiveBar, "update", counting_update)
    causal = [TeacherForced((1, 2, 3 + k), (5, 6)) for k in range(5)]
    hindsight = [TeacherForced((1, 2, 9, 3 + k), (5, 6)) for k in range(5)]
    hindsight[0] = TeacherForced((7,), (5, 6))  # shares no prefix: the unshared path
    scoring.score_divergence(build_tiny(), causal, hindsight, memory_budget_bytes=1)
    # One row per chunk under a 1-byte budget: the bar moves view by view up to the total.
    assert counted == [(5, 1)] * 5
    assert "hindsight scoring:   0%|" in capsys.readouterr().err


def test_a_short_scoring_call_prints_no_bar(capsys):
    views = [TeacherForced((1, 2, 3), (4,))]
    scoring.score_logprobs(build_tiny(), views)
    assert "hindsight scoring" not in capsys.readouterr().err


def test_a_live_bar_redraws_its_elapsed_time_while_the_count_stands_still(monkeypatch, capsys):
    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_S", 0.05)
    with LiveBar(total=2, desc="phase", unit="step", leave=False):
        time.sleep(1.0)  # one long call: no update
    drawn = [part for part in capsys.readouterr().err.split("\r") if part.startswith("phase")]
    # The ticker's redraws, every 0.05 s (about 20; a loaded machine delays some).
    assert len(drawn) >= 4
