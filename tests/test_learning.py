"""Evidence that training improves the policy.

`tiny` (random weights, byte-level tokenizer) with constrained decoding on SysDiag's
`memory_leak` family with one step per episode: the fix, `systemctl restart <unit>`, is
admissible from the first observation, so a policy can learn it without diagnosis. The
untrained policy is close to uniform per character and picks the fix about 1-3 % of the
time. `reboot` is removed from the admissible commands (`tests/learning_envs.py`): it
clears the leak for now (+0.3, not a success); with it in, an earlier version of this
test gave HP-RLVR 36/64 and then 9/64 after a numerically equivalent change (its verdict
hung on float rounding), and one reference-run seed in three collapsed onto it (0/64).
The trap is measured in the reference results instead.

Both methods get the same budget (32 rollouts per iteration: GRPO 4 tasks x G = 8,
HP-RLVR 32 tasks x G = 1, the equal-rollout comparison), the same learning rate and
iterations, and are evaluated on the same 64 held-out tasks (seeds the training never
draws) at the training temperature. The assertion is a one-sided Fisher exact test
against the untrained policy on those tasks, plus a floor on the trained success rate,
so a change that breaks the trainer, the credit modules or the log-prob bookkeeping
fails it.

Measured by this test on the 2-core machine: untrained 1/64, GRPO 63/64, HP-RLVR 62/64
(2 min 9 s for the file).
"""

from __future__ import annotations

import math

import pytest
import torch

from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.credit.grpo import GRPO
from creditgym.credit.hp_rlvr import HPRLVR
from creditgym.models.registry import LoadedModel, build_tiny
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)

ENV_ID = "tests.learning_envs:creditgym-test/SysDiagNoReboot-v0"
ENV_KWARGS = {"faults": ["memory_leak"], "max_steps": 1}
AGENT = AgentConfig(constrained=True, max_new_tokens=128, history_len=0, temperature=1.0)
ITERATIONS = 30
EVAL_SEEDS = list(range(900_000, 900_064))  # training seeds come from derive_seed, < 2**31
MIN_TRAINED_SUCCESS = 0.5
MAX_P_VALUE = 0.01


def success_count(loaded: LoadedModel) -> int:
    """Successes of `loaded` on the held-out tasks (sampling seed fixed: deterministic)."""
    agent = LLMAgent(loaded, seed=12345, **vars(AGENT))
    trajectories, _ = collect(
        ENV_ID, agent, EVAL_SEEDS, num_envs=8, env_kwargs=ENV_KWARGS, progress=False
    )
    assert len(trajectories) == len(EVAL_SEEDS), "an evaluation episode was dropped"
    return sum(traj.success for traj in trajectories)


def fisher_one_sided(before: int, after: int, n: int) -> float:
    """P(trained >= `after` successes | the two samples share one success rate).

    One-sided Fisher exact test on the 2x2 table [[after, n - after], [before, n - before]]:
    the hypergeometric tail over the first row's successes.
    """
    total = before + after
    denominator = math.comb(2 * n, n)
    return (
        sum(
            math.comb(total, k) * math.comb(2 * n - total, n - k)
            for k in range(after, min(total, n) + 1)
        )
        / denominator
    )


def test_fisher_one_sided_matches_hand_values():
    # 3 vs 0 out of 3: only the observed table is as extreme, 1 / C(6, 3) = 0.05.
    assert fisher_one_sided(0, 3, 3) == pytest.approx(1 / 20)
    # Equal counts: the tail holds at least half the mass.
    assert fisher_one_sided(5, 5, 20) > 0.5


@pytest.fixture(scope="module")
def untrained_successes() -> int:
    return success_count(build_tiny())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "hp_rlvr"])
def test_short_cpu_training_beats_the_untrained_policy(method, untrained_successes, tmp_path):
    torch.manual_seed(0)
    loaded = build_tiny()
    if method == "grpo":
        credit, group_size = GRPO(), 8
    else:
        credit, group_size = HPRLVR(loaded, history_len=AGENT.history_len), 1
    config = PolicyGradientConfig(
        steps=ITERATIONS,
        group_size=group_size,
        tasks_per_step=4,  # x 8 / G: 32 rollouts per iteration for both methods
        learning_rate=3e-3,
        micro_batch_trajectories=8,
        checkpoint_every=ITERATIONS,
        seed=0,
    )
    trainer = PolicyGradientTrainer(loaded, credit, ENV_ID, ENV_KWARGS, AGENT, config, tmp_path)
    records = trainer.train()
    assert len(records) == ITERATIONS
    assert all(r["rollout/num_trajectories"] == 32 for r in records)

    trained = success_count(trainer.policy)
    n = len(EVAL_SEEDS)
    p_value = fisher_one_sided(untrained_successes, trained, n)
    summary = (
        f"{method}: untrained {untrained_successes}/{n}, trained {trained}/{n} after "
        f"{ITERATIONS} iterations (one-sided Fisher p = {p_value:.2g})"
    )
    print(summary)
    assert trained / n >= MIN_TRAINED_SUCCESS, summary
    assert p_value <= MAX_P_VALUE, summary
