"""`oracle` (credit/oracle.py): the exact A of the current policy, and the registry
contract for the exact-MDP modules (`oracle`, `hca`) on KeyDoor.

The registry-wide tests tests/test_credit_properties.py and test_credit_contract.py hand
every module SysDiag cases, which carry no exact state (`tests.credit_cases.CASE_MODULES`
leaves the modules reading `mdp_state` out); those modules are checked here on the same
properties with trajectories of `small` on KeyDoor, built as the command line builds
them (env, its options, the rollout's sampling in the `CreditContext`). Their declared
reads are checked with every module's in tests/test_credit_reads.py.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import math

import numpy as np
import pytest
import torch

from creditgym import envs
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.benchmarks.credit_truth import main as credit_truth_main
from creditgym.benchmarks.run import main
from creditgym.credit import REGISTRY, CreditContext, NonFiniteError, build
from creditgym.credit.exact_hindsight import exact_hindsight
from creditgym.credit.exact_source import HCAPOExact, HCAPOSeedExact, HPRLVRExact
from creditgym.credit.hcapo import return_to_go_values
from creditgym.credit.oracle import Oracle
from creditgym.credit.policy_evaluation import evaluate_policy, true_advantages
from creditgym.measure.ground_truth import TaskMDPs, exact_sources, llm_policy_table
from creditgym.models.registry import LoadedModel, build_small
from creditgym.report import records
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)
from tests.test_credit_contract import one_error_line
from tests.test_credit_properties import check_contract
from tests.test_exact_hindsight import KEYDOOR, RiskyChain, chain_trajectory
from tests.test_learning import fisher_one_sided

EXACT_MODULES = sorted(name for name, cls in REGISTRY.items() if "mdp_state" in cls.reads)
# The registered exact-MDP modules and the exact-hindsight classes (named by path).
EXACT_CLASSES = [
    *(REGISTRY[name] for name in EXACT_MODULES),
    HCAPOExact,
    HCAPOSeedExact,
    HPRLVRExact,
]
SAMPLING = AgentConfig(constrained=True, max_new_tokens=8, history_len=0, temperature=1.0)
ENV_KWARGS = {"delay": 2}


@pytest.fixture(scope="module")
def small() -> LoadedModel:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return build_small()


def context(policy: LoadedModel, **changes) -> CreditContext:
    fields = {"env_id": KEYDOOR, "env_kwargs": ENV_KWARGS, "sampling": SAMPLING, **changes}
    fields = {"exact_sources": exact_sources, **fields}
    fields = {"history_len": SAMPLING.history_len, **fields}
    return CreditContext(policy=policy, **fields)


@pytest.fixture(scope="module")
def keydoor_batch(small) -> list:
    """Two groups of 4 rollouts of `small` on KeyDoor (two tasks), as a trainer samples."""
    agent = LLMAgent(small, seed=3, **vars(SAMPLING))
    trajectories, _ = collect(
        KEYDOOR, agent, [11, 12], group_size=4, num_envs=8, env_kwargs=ENV_KWARGS, progress=False
    )
    assert len({t.task_id for t in trajectories}) == 2
    return trajectories


def test_the_exact_modules_are_the_registered_oracles_on_mdp_state():
    assert EXACT_MODULES == ["hca", "oracle"]
    assert all(REGISTRY[name].needs_policy for name in EXACT_MODULES)


def test_oracle_on_the_chain_equals_the_hand_advantages():
    oracle = Oracle(
        lambda task_id: RiskyChain(),
        lambda mdp: {
            "s0": {"risky": 0.6, "safe": 0.4},
            "s1": {"go": 0.5, "stop": 0.5},
        },
    )
    batch = [
        chain_trajectory([("s0", "risky", 0.0), ("s1", "go", 1.0)]),
        chain_trajectory([("s0", "safe", 0.5)]),
        chain_trajectory([("s0", "risky", 0.0), ("s1", "stop", 0.0)]),
    ]
    output = oracle(batch)
    # Q(s1, go) = 0.5, Q(s1, stop) = 0, V(s1) = 0.25; Q(s0, risky) = V(s1) = 0.25,
    # Q(s0, safe) = 0.5, V(s0) = 0.6 * 0.25 + 0.4 * 0.5 = 0.35.
    np.testing.assert_allclose(output.step_advantages[0], [-0.1, 0.25], rtol=1e-6)
    np.testing.assert_allclose(output.step_advantages[1], [0.15], rtol=1e-6)
    np.testing.assert_allclose(output.step_advantages[2], [-0.1, -0.25], rtol=1e-6)
    assert output.metrics["exact_return"] == pytest.approx(0.35)


def test_oracle_follows_the_weights_of_each_call(small, keydoor_batch):
    policy = copy.deepcopy(small)
    oracle = build(REGISTRY["oracle"], context(policy))
    before = oracle(keydoor_batch).step_advantages
    with torch.no_grad():  # an optimiser step, in effect: the same object, new weights
        policy.model.get_output_embeddings().weight.mul_(3.0)
    after = oracle(keydoor_batch).step_advantages
    agent = LLMAgent(policy, **vars(SAMPLING))
    mdps = TaskMDPs(KEYDOOR, ENV_KWARGS)
    for trajectory, values in zip(keydoor_batch, after, strict=True):
        mdp = mdps(trajectory.task_id)
        truth = evaluate_policy(mdp, llm_policy_table(agent, KEYDOOR, mdp))
        np.testing.assert_allclose(values, true_advantages(trajectory, truth), atol=1e-6)
    assert any(not np.allclose(a, b) for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize("cls", EXACT_CLASSES, ids=lambda cls: cls.name)
def test_exact_modules_hold_the_registry_contract_on_keydoor(cls, small, keydoor_batch):
    def fresh():
        return build(cls, context(small))

    module = fresh()
    output = module(keydoor_batch)
    check_contract(keydoor_batch, output)
    assert any(np.any(values != 0) for values in output.step_advantages)
    check_contract([], fresh()([]))
    one_step = [t for t in keydoor_batch if t.length][:1]
    check_contract(one_step, fresh()(one_step))
    # Permuting the batch permutes the output.
    order = [5, 2, 7, 0, 1, 6, 3, 4]
    permuted = fresh()([keydoor_batch[i] for i in order]).step_advantages
    for k, i in enumerate(order):
        np.testing.assert_array_equal(permuted[k], output.step_advantages[i])
    # The state (HP-RLVR's baseline; none for the others) round-trips.
    restored = fresh()
    restored.load_state_dict(module.state_dict())
    assert restored.state_dict() == module.state_dict()


@pytest.mark.parametrize("cls", EXACT_CLASSES, ids=lambda cls: cls.name)
def test_exact_modules_refuse_a_non_finite_reward(cls, small, keydoor_batch):
    module = build(cls, context(small))
    trajectory = keydoor_batch[0]
    steps = list(trajectory.steps)
    steps[0] = dataclasses.replace(steps[0], reward=math.nan)
    with pytest.raises(NonFiniteError, match=r"trajectory 1 .*step 0: reward"):
        module([keydoor_batch[1], dataclasses.replace(trajectory, steps=tuple(steps))])


@pytest.mark.parametrize("cls", EXACT_CLASSES, ids=lambda cls: cls.name)
def test_exact_modules_need_the_exact_solution_a_finite_mdp_and_an_exact_policy(cls, small):
    name = cls.name
    with pytest.raises(ValueError, match=f"{name}: creditgym/SysDiag-v0 does not describe"):
        build(cls, context(small, env_id="creditgym/SysDiag-v0", env_kwargs={}))
    with pytest.raises(ValueError, match=f"{name} needs the run's env"):
        build(cls, CreditContext(policy=small, exact_sources=exact_sources))
    with pytest.raises(ValueError, match=f"{name} needs the exact MDP solution"):
        build(cls, context(small, exact_sources=None))
    with pytest.raises(
        ValueError, match=f"{name}: exact action distributions need constrained decoding"
    ):
        build(cls, context(small, sampling=dataclasses.replace(SAMPLING, constrained=False)))
    with pytest.raises(ValueError, match="history-free prompt"):
        build(cls, context(small, sampling=dataclasses.replace(SAMPLING, history_len=2)))


def verdict_probability(law, state, actions, past: float, success: bool) -> float:
    """P(verdict | s, a taken among `actions`), from the return-to-go law alone."""
    joint = sum(
        law.policy[state][a] * p
        for a in actions
        for z, p in law.action_outcomes[state][a].items()
        if (past + z > 0) == success
    )
    return joint / sum(law.policy[state][a] for a in actions)


def test_hcapo_seed_exact_ratio_is_the_exact_hindsight_ratio(small, keydoor_batch):
    # The seed ratio exp(log h(a_t) - log pi(a_t)) over the action's tokens telescopes to
    # h(a_t | s_t, V) / pi(a_t | s_t) = P(V | s_t, a_t) / P(V | s_t), V the channel's
    # verdict given the return so far: computed here from the outcome law alone.
    module = build(HCAPOSeedExact, context(small))
    output = module(keydoor_batch)
    mdps = TaskMDPs(KEYDOOR, ENV_KWARGS)
    agent = LLMAgent(small, **vars(SAMPLING))
    expected = []
    for trajectory in keydoor_batch:
        if not np.any(return_to_go_values(trajectory, module.options.gamma)):
            continue  # not scored: its Q is 0 whatever rho is
        mdp = mdps(trajectory.task_id)
        law = exact_hindsight(mdp, llm_policy_table(agent, KEYDOOR, mdp), "return")
        success = trajectory.total_return > 0
        for t, step in enumerate(trajectory.steps):
            state, past = step.info["mdp_state"], sum(s.reward for s in trajectory.steps[:t])
            taken = verdict_probability(law, state, [step.action], past, success)
            expected.append(
                taken / verdict_probability(law, state, law.policy[state], past, success)
            )
    assert output.metrics["num_hindsight_steps"] == len(expected)
    assert output.metrics["mean_rho"] == pytest.approx(np.mean(expected), rel=1e-5)
    scripted = dataclasses.replace(
        keydoor_batch[0],
        steps=tuple(
            dataclasses.replace(s, action_token_ids=(), action_logprobs=())
            for s in keydoor_batch[0].steps
        ),
    )
    with pytest.raises(ValueError, match="exact hindsight needs constrained decoding"):
        module([scripted])


def test_the_oracle_on_sysdiag_is_one_line_and_exit_2(capsys, tmp_path):
    argv = ["--env", "sysdiag", "--credit", "oracle", "--model", "small"]
    assert main([*argv, "--steps", "1", "--out", str(tmp_path)]) == 2
    line = one_error_line(capsys)
    assert "--credit oracle" in line and "does not describe itself as a finite MDP" in line
    assert not list(tmp_path.iterdir())  # the run folder left nothing behind


def test_the_oracle_trains_through_the_command_line_and_scores_the_samples(tmp_path):
    argv = ["--env", "keydoor", "--env-options", "delay=1", "--credit", "oracle"]
    argv += ["--model", "small", "--steps", "1", "--tasks-per-step", "1", "--group-size", "2"]
    assert (
        main([*argv, "--eval-episodes", "2", "--max-new-tokens", "8", "--out", str(tmp_path)]) == 0
    )
    (run_dir,) = tmp_path.iterdir()
    (metrics,) = records.read_metrics(run_dir)
    assert 0.0 < metrics["credit/exact_return"] <= 3.0  # at most the key, one apple, the door
    samples = list(records.iter_jsonl(run_dir / records.SAMPLES_FILE))
    assert samples and {"oracle", "hca", "grpo"} <= set(samples[0]["credit"])


@pytest.mark.slow  # the credit_truth command with `tiny` (16 s)
def test_credit_truth_scores_the_oracle_as_the_truth_itself(tmp_path):
    """Against `benchmarks.credit_truth`'s own ground truth (a policy table computed there,
    independently), the oracle's credit is the exact A: Pearson 1, every key-step sign."""
    argv = ["--env", "keydoor", "--model", "tiny", "--credit", "oracle,hca", "--sweep", "1"]
    argv += ["--pool", "8", "--group-size", "4", "--batch-sizes", "4", "8", "--tasks", "1"]
    argv += ["--max-new-tokens", "64", "--out", str(tmp_path), "--name", "exact"]
    assert credit_truth_main(argv) == 0
    with open(tmp_path / "exact.csv", encoding="utf-8") as handle:
        rows = {row["module"]: row for row in csv.DictReader(handle)}
    assert float(rows["oracle"]["pearson"]) == pytest.approx(1.0, abs=1e-6)
    assert float(rows["oracle"]["key_sign"]) == 1.0
    assert math.isfinite(float(rows["hca"]["pearson"]))


# --- learning KeyDoor at delay 4 with perfect credit -------------------------------
# Measured by this test on the 2-core machine: untrained 15/64, trained 56/64 after 10
# iterations (exact expected return 2.02 -> 4.78), 58 s.
LEARN_KWARGS = {"delay": 4}
LEARN_ITERATIONS = 10
EVAL_SEEDS = list(range(900_000, 900_064))
MIN_TRAINED_SUCCESS = 0.8
MAX_P_VALUE = 0.01


def success_count(loaded: LoadedModel) -> int:
    agent = LLMAgent(loaded, seed=12345, **vars(SAMPLING))
    trajectories, _ = collect(
        KEYDOOR, agent, EVAL_SEEDS, num_envs=8, env_kwargs=LEARN_KWARGS, progress=False
    )
    assert len(trajectories) == len(EVAL_SEEDS), "an evaluation episode was dropped"
    return sum(trajectory.success for trajectory in trajectories)


@pytest.mark.slow
def test_small_trained_with_the_oracle_learns_keydoor_at_delay_4(tmp_path):
    assert envs.ENVS[KEYDOOR].markov  # history 0 is the env's own prompt length
    torch.manual_seed(0)
    untrained = success_count(build_small())
    loaded = build_small()
    oracle = build(
        REGISTRY["oracle"],
        CreditContext(
            policy=loaded,
            env_id=KEYDOOR,
            env_kwargs=LEARN_KWARGS,
            sampling=SAMPLING,
            exact_sources=exact_sources,
        ),
    )
    config = PolicyGradientConfig(
        steps=LEARN_ITERATIONS,
        group_size=8,
        tasks_per_step=4,
        learning_rate=3e-3,
        micro_batch_trajectories=8,
        finetune="full",
        checkpoint_every=LEARN_ITERATIONS,
        seed=0,
    )
    trainer = PolicyGradientTrainer(
        loaded, oracle, KEYDOOR, LEARN_KWARGS, SAMPLING, config, tmp_path
    )
    records = trainer.train()
    assert len(records) == LEARN_ITERATIONS
    trained = success_count(trainer.policy)
    n = len(EVAL_SEEDS)
    p_value = fisher_one_sided(untrained, trained, n)
    first, last = records[0]["credit/exact_return"], records[-1]["credit/exact_return"]
    summary = (
        f"small + oracle on KeyDoor delay 4: untrained {untrained}/{n}, trained {trained}/{n} "
        f"after {LEARN_ITERATIONS} iterations (one-sided Fisher p = {p_value:.2g}); exact "
        f"return {first:.3f} -> {last:.3f}"
    )
    print(summary)
    assert trained / n >= MIN_TRAINED_SUCCESS, summary
    assert p_value <= MAX_P_VALUE, summary
