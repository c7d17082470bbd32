"""Exact ground-truth credit (credit.policy_evaluation, measure/) against hand values."""

from __future__ import annotations

import csv
import math
from collections import Counter
from types import SimpleNamespace
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch

from creditgym import envs  # noqa: F401  (registers the creditgym ids)
from creditgym.agents.base import AgentInput
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import LLMAgent
from creditgym.benchmarks.credit_truth import main as credit_truth_main
from creditgym.credit.base import CreditContext
from creditgym.credit.policy_evaluation import evaluate_policy, reachable_states
from creditgym.envs.mdp import StateView, Transition
from creditgym.measure.ground_truth import (
    llm_policy_table,
    state_prompt_ids,
    trie_action_logprobs,
    uniform_policy,
)
from creditgym.measure.pools import (
    PoolSettings,
    batch_credits,
    sample_pool,
    score_module,
    task_truth,
)
from creditgym.measure.truth_metrics import (
    CREDIT_SIGN_TOL,
    GradientStats,
    TruthSet,
    gradient_stats,
    pearson,
    ranks,
    sign_agreement,
    small_credit_count,
    spearman,
)
from creditgym.models.registry import build_tiny
from tests.credit_cases import scripted_trajectory

CHAIN_ENV_ID = "tests/Chain-v0"


class ChainMDP:
    """Three states, hand-sized:

    s0: "go" -> s1 with reward 1; "stop" -> end, reward 0.
    s1: "go" -> s2 (p 0.5, reward 0) or end (p 0.5, reward 2); "stop" -> end, reward 0.
    s2: "finish" -> end, reward 3 (one action: A = 0, gradient 0).
    """

    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "s0": ("go", "stop"),
        "s1": ("go", "stop"),
        "s2": ("finish",),
    }

    def initial_states(self):
        return [(1.0, "s0")]

    def actions(self, state):
        return self.ACTIONS[state]

    def view(self, state):
        return StateView(
            observation=f"You are at {state}.",
            task="Collect as much reward as you can.",
            admissible_commands=self.ACTIONS[state],
        )

    def transitions(self, state, action):
        table = {
            ("s0", "go"): [Transition(1.0, "s1", 1.0)],
            ("s0", "stop"): [Transition(1.0, None, 0.0, terminated=True)],
            ("s1", "go"): [
                Transition(0.5, "s2", 0.0),
                Transition(0.5, None, 2.0, terminated=True),
            ],
            ("s1", "stop"): [Transition(1.0, None, 0.0, terminated=True)],
            ("s2", "finish"): [Transition(1.0, None, 3.0, terminated=True)],
        }
        return table[(state, action)]


CHAIN_POLICY = {
    "s0": {"go": 0.75, "stop": 0.25},
    "s1": {"go": 0.5, "stop": 0.5},
    "s2": {"finish": 1.0},
}


def test_chain_values_advantages_and_gradient_match_hand_values():
    truth = evaluate_policy(ChainMDP(), CHAIN_POLICY)
    # V(s2) = 3; Q(s1, go) = 0.5 * 3 + 0.5 * 2 = 2.5, V(s1) = 1.25;
    # Q(s0, go) = 1 + 1.25 = 2.25, V(s0) = 0.75 * 2.25 = 1.6875.
    assert truth.states == ("s0", "s1", "s2")
    assert truth.values == pytest.approx({"s0": 1.6875, "s1": 1.25, "s2": 3.0})
    assert truth.q_values["s1"] == pytest.approx({"go": 2.5, "stop": 0.0})
    assert truth.q_values["s0"] == pytest.approx({"go": 2.25, "stop": 0.0})
    assert truth.advantage("s0", "go") == pytest.approx(0.5625)
    assert truth.advantage("s0", "stop") == pytest.approx(-1.6875)
    assert truth.advantage("s1", "go") == pytest.approx(1.25)
    assert truth.advantage("s2", "finish") == 0.0
    # d(s1) = 0.75, d(s2) = 0.75 * 0.5 * 0.5.
    assert truth.visits == pytest.approx({"s0": 1.0, "s1": 0.75, "s2": 0.1875})
    assert truth.expected_return == pytest.approx(1.6875)
    # d pi A: s0 go 1 * 0.75 * 0.5625; s1 go 0.75 * 0.5 * 1.25.
    assert truth.gradient("s0", "go") == pytest.approx(0.421875)
    assert truth.gradient("s0", "stop") == pytest.approx(-0.421875)
    assert truth.gradient("s1", "go") == pytest.approx(0.46875)
    assert truth.gradient("s2", "finish") == 0.0


def test_chain_discounted_values_match_hand_values():
    truth = evaluate_policy(ChainMDP(), CHAIN_POLICY, gamma=0.5)
    # Q(s1, go) = 0.5 * (0 + 0.5 * 3) + 0.5 * 2 = 1.75, V(s1) = 0.875;
    # Q(s0, go) = 1 + 0.5 * 0.875 = 1.4375, V(s0) = 1.078125.
    assert truth.values == pytest.approx({"s0": 1.078125, "s1": 0.875, "s2": 3.0})
    # Discounted visits: d(s1) = 0.5 * 0.75, d(s2) = 0.5 * 0.375 * 0.5 * 0.5.
    assert truth.visits == pytest.approx({"s0": 1.0, "s1": 0.375, "s2": 0.046875})


@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_exact_gradient_is_the_finite_difference_gradient_of_the_return(gamma):
    mdp = ChainMDP()
    logits = {s: {a: math.log(p) for a, p in row.items()} for s, row in CHAIN_POLICY.items()}

    def expected_return(shifted):
        policy = {}
        for state, row in shifted.items():
            norm = math.log(sum(math.exp(v) for v in row.values()))
            policy[state] = {a: math.exp(v - norm) for a, v in row.items()}
        return evaluate_policy(mdp, policy, gamma).expected_return

    truth = evaluate_policy(mdp, CHAIN_POLICY, gamma)
    step = 1e-6
    for (state, action), _ in truth.index.items():
        plus = {s: dict(row) for s, row in logits.items()}
        minus = {s: dict(row) for s, row in logits.items()}
        plus[state][action] += step
        minus[state][action] -= step
        numeric = (expected_return(plus) - expected_return(minus)) / (2 * step)
        assert truth.gradient(state, action) == pytest.approx(numeric, abs=1e-7)


def test_reachable_states_rejects_a_cycle():
    class Loop(ChainMDP):
        def transitions(self, state, action):
            return [Transition(1.0, "s0" if state == "s1" else "s1", 0.0)]

    with pytest.raises(ValueError, match="cycle"):
        reachable_states(Loop())


def test_policy_rows_must_cover_exactly_the_admissible_commands():
    with pytest.raises(ValueError, match="admissible"):
        evaluate_policy(ChainMDP(), {**CHAIN_POLICY, "s1": {"go": 1.0}})
    assert uniform_policy(ChainMDP(), ["s0", "s2"]) == {
        "s0": {"go": 0.5, "stop": 0.5},
        "s2": {"finish": 1.0},
    }


def test_trie_renormalises_over_the_admissible_continuations_at_each_token():
    # Sequences [1, 2], [1, 3], [4]: at the root tokens 1 and 4 compete, after 1 tokens 2 and
    # 3 do. Raw log-probs (over a larger vocabulary) log 0.2, log 0.1 / log 0.3, log 0.2.
    sequences = [[1, 2], [1, 3], [4]]
    raw = [np.log([0.2, 0.1]), np.log([0.2, 0.3]), np.log([0.2])]
    probabilities = np.exp(trie_action_logprobs(sequences, raw, temperature=1.0, top_p=1.0))
    # Root: 0.2 / 0.4 each; after 1: 0.25 / 0.75.
    np.testing.assert_allclose(probabilities, [0.125, 0.375, 0.5], rtol=1e-6)
    # Temperature 0.5 squares the odds at each node: after 1, 0.1^2 : 0.3^2 = 1 : 9.
    tempered = np.exp(trie_action_logprobs(sequences, raw, temperature=0.5, top_p=1.0))
    np.testing.assert_allclose(tempered, [0.05, 0.45, 0.5], rtol=1e-6)


def test_trie_applies_top_p_at_every_node_among_the_admissible_continuations():
    # Root: tokens 1 / 4 at 0.75 / 0.25; after 1: tokens 2 / 3 at 0.05 / 0.95. A token is
    # dropped when the more likely ones before it already hold top_p of the mass.
    sequences = [[1, 2], [1, 3], [4]]
    raw = [np.log([0.3, 0.01]), np.log([0.3, 0.19]), np.log([0.1])]
    # top-p 0.8 keeps both root tokens (0.75 < 0.8) but only token 3 after 1 (0.95).
    nucleus = np.exp(trie_action_logprobs(sequences, raw, temperature=1.0, top_p=0.8))
    np.testing.assert_allclose(nucleus, [0.0, 0.75, 0.25], atol=1e-7)
    # top-p 0.7 keeps one token at each node.
    narrow = np.exp(trie_action_logprobs(sequences, raw, temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(narrow, [0.0, 1.0, 0.0], atol=1e-7)


def test_ranks_average_ties_and_correlations_match_hand_values():
    np.testing.assert_allclose(ranks(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1.0, 3.5, 2.0])
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert spearman(x, x**3) == pytest.approx(1.0)
    assert spearman(x, -np.exp(x)) == pytest.approx(-1.0)
    assert math.isnan(pearson(x, np.ones(4)))
    # Credit 0 agrees with neither sign; |A| = 0 steps are not counted.
    assert sign_agreement(np.array([1.0, -1.0, 0.0, 5.0]), np.array([2.0, 1.0, -1.0, 0.0])) == (
        pytest.approx(1 / 3)
    )


def test_credit_below_the_tolerance_is_left_out_of_sign_agreement_and_counted_apart():
    credit = np.array([1.0, -1.0, 0.0, -1e-17, 2e-7, 5.0])
    advantage = np.array([2.0, 1.0, -1.0, 1.0, -3.0, 0.0])
    # Signed steps (|A| > 0): the first five; credit above 1e-6 at the first two, one of
    # which agrees: 1/2. Without a tolerance -1e-17 and 2e-7 count as signs: 1/5 agree.
    assert sign_agreement(credit, advantage, CREDIT_SIGN_TOL) == pytest.approx(1 / 2)
    assert small_credit_count(credit, advantage, CREDIT_SIGN_TOL) == 3
    assert sign_agreement(credit, advantage) == pytest.approx(1 / 5)
    assert math.isnan(sign_agreement(np.zeros(2), np.ones(2), CREDIT_SIGN_TOL))


def test_gradient_stats_on_known_estimates():
    exact = np.array([1.0, 0.0])
    estimates = np.array([[1.0, 1.0], [1.0, -1.0]])
    stats = gradient_stats(estimates, exact)
    # Mean (1, 0): cosine of the mean 1; each batch at 45 degrees; noise 2 * 1 / (2 - 1).
    assert stats == GradientStats(
        batches=2, cosine=pytest.approx(math.sqrt(0.5)), cosine_of_mean=1.0, snr=0.5
    )


def test_truth_set_weights_each_tasks_gradient_by_its_probability():
    truth = evaluate_policy(ChainMDP(), CHAIN_POLICY)
    truths = TruthSet({"a": truth, "b": truth}, {"a": 0.25, "b": 0.75})
    exact = truths.exact_gradient()
    size = len(truth.index)
    np.testing.assert_allclose(exact[:size], 0.25 * truth.gradient_vector())
    np.testing.assert_allclose(exact[size:], 0.75 * truth.gradient_vector())


# Commands that share their first tokens (the trie branches inside "take ..."), so the
# renormalisation at inner nodes is exercised, not only at the first token.
BRANCHING_COMMANDS = ("take key", "take apple", "take a nap", "open door")


class BranchingMDP(ChainMDP):
    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"s0": BRANCHING_COMMANDS}

    def transitions(self, state, action):
        return [Transition(1.0, None, 0.0, terminated=True)]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_tiny()


def _sample(agent: LLMAgent, mdp: BranchingMDP, count: int, first: int = 0):
    """`count` responses at s0, each from its own episode's sampling RNG."""
    view = mdp.view("s0")
    inputs = [
        AgentInput(
            CHAIN_ENV_ID,
            view.task,
            (),
            view.observation,
            view.admissible_commands,
            episode_key=f"episode{k}",
        )
        for k in range(first, first + count)
    ]
    return agent.act(inputs)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.5, 1.0), (1.0, 0.53)])
def test_exact_table_is_the_probability_the_sampler_records(tiny, temperature, top_p):
    agent = LLMAgent(
        tiny, temperature=temperature, top_p=top_p, history_len=0, constrained=True, seed=3
    )
    mdp = BranchingMDP()
    table = llm_policy_table(agent, CHAIN_ENV_ID, mdp)["s0"]
    assert sum(table.values()) == pytest.approx(1.0, abs=1e-5)
    for action in _sample(agent, mdp, 40):
        # The sampler records each token's log-prob under the distribution it drew from.
        assert action.prompt_token_ids == state_prompt_ids(agent, CHAIN_ENV_ID, mdp, "s0")
        assert sum(action.action_logprobs) == pytest.approx(
            math.log(table[action.action]), abs=1e-4
        )


# Chi-square critical value for 3 degrees of freedom at p = 0.001: a correct table fails
# this one time in a thousand.
CHI2_CRITICAL_3DF_P001 = 16.27


@pytest.mark.slow  # 3000 sampled responses of the tiny model
def test_exact_table_matches_sampled_action_frequencies(tiny):
    agent = LLMAgent(tiny, temperature=0.7, history_len=0, constrained=True, seed=11)
    mdp = BranchingMDP()
    table = llm_policy_table(agent, CHAIN_ENV_ID, mdp)["s0"]
    counts: Counter[str] = Counter()
    for batch in range(10):
        counts.update(action.action for action in _sample(agent, mdp, 300, first=300 * batch))
    total = sum(counts.values())
    assert set(counts) <= set(BRANCHING_COMMANDS)
    chi2 = sum((counts[a] - total * p) ** 2 / (total * p) for a, p in table.items())
    assert chi2 < CHI2_CRITICAL_3DF_P001, (dict(counts), table)


def keydoor_mdp(**kwargs):
    """The finite MDP of KeyDoor task seed 0 (with `kwargs`), and its task id."""
    env = gym.make("creditgym/KeyDoor-v0", **kwargs)
    _, info = env.reset(seed=0)
    return env.unwrapped.finite_mdp(), info["task_id"]


def test_uniform_keydoor_delay_1_advantages_match_hand_values():
    mdp, _ = keydoor_mdp(delay=1, num_objects=3, variance="low")
    states = reachable_states(mdp)
    truth = evaluate_policy(mdp, uniform_policy(mdp, states))
    # Step limit delay + 4 = 5: room (t=0), orchard (t=1), door (t=2, 3, 4); every apple 1.
    # Door holding the key: V4 = 1/2 (open 1, wait 0); V3 = (1 + V4)/2 = 3/4; V2 = 7/8.
    # Orchard holding the key: Q(eat) = 1 + 7/8, Q(wait) = 7/8, V = 11/8; without: 1/2.
    # Room: Q(take key) = 11/8, Q(take other) = 1/2, V = (11/8 + 3/2) / 4 = 23/32.
    room = "room|t=0|holding=nothing"
    assert truth.values[room] == pytest.approx(23 / 32)
    assert truth.advantage(room, "take the key") == pytest.approx(11 / 8 - 23 / 32)
    others = [a for a in mdp.actions(room) if a != "take the key"]
    assert len(others) == 3
    for action in others:
        assert truth.advantage(room, action) == pytest.approx(1 / 2 - 23 / 32)
    assert truth.advantage("orchard|t=1|holding=key", "eat the apple") == pytest.approx(1 / 2)
    assert truth.advantage("door|t=2|holding=key", "open the door") == pytest.approx(1 / 8)
    assert truth.advantage("door|t=4|holding=key", "open the door") == pytest.approx(1 / 2)
    thing = others[0].removeprefix("take the ")
    # Without the key the door pays nothing: opening or waiting is the same.
    assert truth.advantage(f"door|t=2|holding={thing}", "open the door") == 0.0
    assert truth.visits["door|t=4|holding=key"] == pytest.approx(1 / 16)
    # Gradient at the key: d = 1, pi = 1/4, A = 21/32.
    assert truth.gradient(room, "take the key") == pytest.approx(21 / 128)


def umbrella_grpo_cosine(length: int, seed: int) -> float:
    """Mean cosine of GRPO's batch gradient (B = 32, G = 8) with the exact one, uniform
    policy on Umbrella of `length`, every rollout its own seed (i.i.d. noise)."""
    args = PoolSettings(
        tasks=1,
        pool=256,
        group_size=8,
        noise="independent",
        temperature=1.0,
        gamma=1.0,
        max_new_tokens=48,
        num_envs=8,
        seed=seed,
    )
    env = gym.make("creditgym/Umbrella-v0", length=length, num_distractors=0)
    truth = task_truth(env, "creditgym/Umbrella-v0", seed, None, args)
    env.close()
    pool = sample_pool(
        "creditgym/Umbrella-v0",
        {"length": length, "num_distractors": 0},
        [truth.task_id],
        {truth.task_id: truth.table},
        None,
        args,
        seed=1000 + seed,
    )
    truths = TruthSet({truth.task_id: truth.truth}, {truth.task_id: 1.0})
    return score_module("grpo", CreditContext(), pool, truths, (32,))["cos@32"]


def test_grpo_gradient_cosine_on_umbrella_falls_as_length_grows():
    cosines = {
        length: [umbrella_grpo_cosine(length, seed) for seed in range(4)] for length in (2, 6, 18)
    }
    means = {length: float(np.mean(values)) for length, values in cosines.items()}
    # The trajectory-level signal-to-noise of the first action is about 2 / sqrt(L - 1)
    # (docs/instruments.md; bsuite, arXiv 1908.03568): every seed's cosine at L = 18 lies
    # below every seed's at L = 2.
    assert means[2] > means[6] > means[18], cosines
    assert max(cosines[18]) < min(cosines[2]), cosines


@pytest.mark.slow  # the command end to end with its plot (18 s)
def test_credit_truth_command_writes_table_and_plot(tmp_path, capsys):
    argv = [
        "--env",
        "keydoor",
        "--model",
        "uniform",
        "--credit",
        "grpo,rule_based",
        "--sweep",
        "1",
        "2",
        "--pool",
        "32",
        "--batch-sizes",
        "8",
        "16",
        "--tasks",
        "1",
        "--out",
        str(tmp_path),
        "--name",
        "smoke",
    ]
    assert credit_truth_main(argv) == 0
    with open(tmp_path / "smoke.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["delay"], row["module"]) for row in rows] == [
        ("1", "grpo"),
        ("1", "rule_based"),
        ("2", "grpo"),
        ("2", "rule_based"),
    ]
    assert all(float(row["batches@8"]) == 4 and float(row["batches@16"]) == 2 for row in rows)
    assert "Produced by `creditgym credit-truth --env keydoor" in (
        (tmp_path / "smoke.md").read_text()
    )
    assert (tmp_path / "smoke.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "argv",
    [
        ["--env", "keydor"],
        ["--credit", "grpo,nope"],
        ["--env", "umbrella", "--sweep-kwarg", "delay"],
        ["--sweep", "-1"],
        ["--pool", "12"],
    ],
)
def test_credit_truth_usage_errors_are_one_line_exit_2(argv, capsys):
    assert credit_truth_main([*argv, "--model", "uniform", "--out", "/tmp/unused"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1


def test_exact_table_matches_what_an_llm_rollout_records_on_keydoor(tiny):
    """End to end: the env's observation at each true state is the view the table used."""
    env = gym.make("creditgym/KeyDoor-v0", delay=1)
    _, info = env.reset(seed=0)
    mdp = env.unwrapped.finite_mdp()
    agent = LLMAgent(tiny, history_len=0, constrained=True, max_new_tokens=64, seed=5)
    table = llm_policy_table(agent, "creditgym/KeyDoor-v0", mdp)
    for episode in range(2):
        trajectory = play_episode(env, agent, seed=episode, options={"task_id": info["task_id"]})
        for step in trajectory.steps:
            exact = table[step.info["mdp_state"]][step.action]
            assert sum(step.action_logprobs) == pytest.approx(math.log(exact), abs=1e-4)
    env.close()


@pytest.mark.slow  # the command with `tiny` scoring hindsight views (25 s)
def test_credit_truth_scores_the_hindsight_modules_of_an_llm_policy(tmp_path, capsys):
    """With a model: the views are prefetched into one memo, then every module gets a
    finite row at each batch size (the path `--model smollm2-135m` runs)."""
    argv = ["--env", "keydoor", "--model", "tiny", "--credit", "grpo,hp_rlvr", "--sweep", "1"]
    argv += ["--pool", "8", "--group-size", "4", "--batch-sizes", "4", "8", "--tasks", "1"]
    argv += ["--max-new-tokens", "64", "--out", str(tmp_path), "--name", "tiny"]
    assert credit_truth_main(argv) == 0
    assert " distinct views scored in " in capsys.readouterr().out
    with open(tmp_path / "tiny.csv", encoding="utf-8") as handle:
        rows = {row["module"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"grpo", "hp_rlvr"}
    for row in rows.values():
        assert all(math.isfinite(float(row[k])) for k in ("pearson", "cos@4", "cos@8"))


def _resume_argv(tmp_path, *extra):
    argv = ["--env", "keydoor", "--model", "uniform", "--credit", "grpo,rule_based"]
    argv += ["--pool", "16", "--batch-sizes", "8", "--tasks", "1", "--out", str(tmp_path)]
    return [*argv, "--name", "resume", *extra]


def _rows(path):
    with open(path, encoding="utf-8") as handle:
        return {(row["delay"], row["module"]): row for row in csv.DictReader(handle)}


@pytest.mark.slow  # the command run three times (28 s)
def test_credit_truth_resumes_keeping_the_values_its_csv_holds(tmp_path, capsys):
    """A rerun skips the finished values (read back, not recomputed); --fresh recomputes."""
    assert credit_truth_main(_resume_argv(tmp_path, "--sweep", "1")) == 0
    table = tmp_path / "resume.csv"
    first = _rows(table)
    # Mark a kept row: a recomputed one would lose the mark.
    text = table.read_text(encoding="utf-8").replace(first["1", "grpo"]["pearson"], "0.123", 1)
    table.write_text(text, encoding="utf-8")
    capsys.readouterr()
    assert credit_truth_main(_resume_argv(tmp_path, "--sweep", "1", "2")) == 0
    assert "delay=1: kept from the csv" in capsys.readouterr().out
    resumed = _rows(table)
    assert list(resumed) == [("1", "grpo"), ("1", "rule_based"), ("2", "grpo"), ("2", "rule_based")]
    assert resumed["1", "grpo"]["pearson"] == "0.123"
    assert resumed["1", "rule_based"] == first["1", "rule_based"]
    assert "--sweep 1 2" in (tmp_path / "resume.md").read_text(encoding="utf-8")
    assert credit_truth_main(_resume_argv(tmp_path, "--sweep", "1", "2", "--fresh")) == 0
    fresh = _rows(table)
    assert fresh["1", "grpo"]["pearson"] == first["1", "grpo"]["pearson"]
    timeless = [k for k in fresh["2", "grpo"] if k != "seconds"]
    assert [fresh["2", "grpo"][k] for k in timeless] == [resumed["2", "grpo"][k] for k in timeless]


@pytest.mark.parametrize(
    ("extra", "damage", "message"),
    [
        (["--sweep", "1", "--pool", "32"], None, "written with other --pool"),
        (["--sweep", "2"], None, "holds delay [1] outside --sweep"),
        (["--sweep", "1", "2"], "csv", "cannot be resumed"),
        (["--sweep", "1", "2"], "md", "records no command"),
    ],
)
def test_credit_truth_refuses_to_resume_a_file_it_cannot_trust(
    tmp_path, capsys, extra, damage, message
):
    """Another configuration, a dropped value or corrupt files: one line, exit 2, and the
    files are left as they were."""
    assert credit_truth_main(_resume_argv(tmp_path, "--sweep", "1")) == 0
    if damage == "csv":
        table = tmp_path / "resume.csv"
        table.write_text(table.read_text(encoding="utf-8").replace("grpo,", "grpo,oops", 1))
    elif damage == "md":
        (tmp_path / "resume.md").write_text("# a table without its command\n", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    assert credit_truth_main(_resume_argv(tmp_path, *extra)) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and message in error, error
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_batch_credits_calls_the_module_on_whole_batches_in_order():
    # A module that records each batch and credits every step with its batch's number: a
    # pool of 5 in batches of 2 is called twice ([0, 1], [2, 3]), the partial batch left out.
    calls: list[list[str]] = []

    def module(batch):
        calls.append([traj.group_id for traj in batch])
        number = float(len(calls))
        return SimpleNamespace(step_advantages=[np.full(traj.length, number) for traj in batch])

    pool = [scripted_trajectory(f"g{i}", [0.0, 1.0], True) for i in range(5)]
    credits = batch_credits(module, pool, 2)
    assert calls == [["g0", "g1"], ["g2", "g3"]]
    assert [c.tolist() for c in credits] == [[1.0, 1.0], [1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]
