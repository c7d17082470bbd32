"""Time of the exact ground truth of an LLM policy on KeyDoor (target: delay 8, smollm2-135m,
under 5 minutes on a 2-core CPU).

Times the two parts of `measure.ground_truth` separately: the policy's exact action table
(one teacher-forced view per (state, command), the scoring engine's batched forwards,
then the trie renormalisation) and the dynamic programming (V, Q, A, visit counts, the
exact gradient). Prints states, views, scored tokens, wall-clock and CPU seconds; CPU
seconds are steadier when other jobs share the machine.

    .venv/bin/python -m creditgym.benchmarks.perf.bench_ground_truth [--env-options delay=8] \\
        [--model smollm2-135m]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import gymnasium as gym
import torch

from creditgym import envs
from creditgym.agents.constrained import action_token_sequences
from creditgym.agents.llm import LLMAgent
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, timed
from creditgym.credit.policy_evaluation import evaluate_policy, reachable_states
from creditgym.measure.ground_truth import llm_policy_table, state_prompt_ids
from creditgym.models.registry import load_model

ENV_ID = "creditgym/KeyDoor-v0"
TARGET_SECONDS = 300.0


@dataclass(frozen=True)
class BenchArgs:
    """Time the exact action table and dynamic program of an LLM policy on KeyDoor."""

    env_options: tuple[str, ...] = ()
    """KeyDoor's options as key=value (envs/keydoor/options.py; its default delay is 8)."""
    model: str = "smollm2-135m"
    """Policy model name or folder."""
    seed: int = 0
    """Task seed."""
    threads: int = 2
    """torch CPU threads."""


def main(args: BenchArgs) -> None:
    torch.set_num_threads(args.threads)
    print(machine_state())
    loaded = load_model(args.model)
    agent = LLMAgent(loaded, temperature=1.0, history_len=0, constrained=True, max_new_tokens=48)
    options = envs.parse_env_options(ENV_ID, args.env_options)
    env = gym.make(ENV_ID, **options.kwargs())
    env.reset(seed=args.seed)
    mdp = env.unwrapped.finite_mdp()
    states = reachable_states(mdp)
    views = sum(len(mdp.actions(state)) for state in states)
    tokens = sum(
        len(state_prompt_ids(agent, ENV_ID, mdp, state)) * len(mdp.actions(state))
        + sum(map(len, action_token_sequences(loaded.tokenizer, mdp.actions(state))))
        for state in states
    )
    table, table_time = timed(llm_policy_table, agent, ENV_ID, mdp, states)
    truth, dp_time = timed(evaluate_policy, mdp, table)
    total = table_time.wall_s + dp_time.wall_s
    print(
        f"KeyDoor delay {options.delay}, {args.model}: {len(states)} states, {views} views, "
        f"{tokens} scored tokens"
    )
    print(f"  action table     {table_time.wall_s:7.1f} s wall  {table_time.cpu_s:7.1f} s CPU")
    print(f"  dynamic program  {dp_time.wall_s:7.3f} s wall  {dp_time.cpu_s:7.3f} s CPU")
    print(f"  expected return of the policy {truth.expected_return:.4f}")
    verdict = "within" if total <= TARGET_SECONDS else "OVER"
    print(f"  total {total:.1f} s: {verdict} the {TARGET_SECONDS:.0f} s target")
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_ground_truth"))
