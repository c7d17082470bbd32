"""HCAPO and HP-RLVR in verl (integrations.verl_hindsight): the view pass and the estimators.

Real KeyDoor rollouts of the `small` model are laid out as verl's multi-turn batch (one
row per rollout; each turn's generated ids under response_mask 1, an env reply under 0,
a step's reward on its turn's last token). The hindsight views are built from that batch
alone, scored with `small` the way verl's actor scores a generation batch (verl's own
no-padding conversion, teacher-forced log-probs of the response tokens) or, for HP-RLVR,
by the library's divergence pass (`view_divergences`), attached, and the estimator verl
looks up by name must give each turn what creditgym's module gives that step of the
original trajectories, with the same model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

# verl 0.9.1 caps transformers below 5.11: `make test` runs this file in .venv-verl, built
# from verl's own lock (locks/verl.txt); an environment without verl skips it.
pytest.importorskip("verl", reason="verl is not installed here (make test runs it in .venv-verl)")

from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, register_adv_est
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import Trajectory
from creditgym.credit.hcapo import HCAPO, HCAPOOptions, HCAPOSeed, HCAPOSeedOptions
from creditgym.credit.hp_rlvr import HPRLVR
from creditgym.credit.views import causal_view
from creditgym.integrations.verl_credit import compute_advantage
from creditgym.integrations.verl_hindsight import (
    HCAPO_BLOCK,
    HP_RLVR_BLOCK,
    HCAPOEstimator,
    attach_view_values,
    causal_batch,
    divergence_output,
    hindsight_batch,
    pack_views,
    view_divergences,
)
from creditgym.models.registry import LoadedModel, build_small

KEYDOOR = "creditgym/KeyDoor-v0"
REPLY = (10, 11)  # two env-reply tokens after every turn but the last (mask 0)

# Bound: the module scores right-padded chunks of rows, the actor each sequence alone
# (verl's no-padding layout), so the same float32 log-probs come out of matrix products
# of other shapes: a few float32 ulps (1.2e-7) of values of order 1 to
# 10. rho is exp(score / 5) over the steps' mean and the micro term divides by the
# group's std of Q (0.1 to 1 here), which can scale that by ~10: 1e-5 on advantages of
# order 1 (3.6e-7 seen) covers rounding. Scoring the wrong prompt (the causal view in
# place of the hindsight one) moves these advantages by 6e-3, a misplaced turn by ~0.1.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module")
def rollout() -> tuple[LoadedModel, list[Trajectory]]:
    """Two KeyDoor tasks x 4 rollouts: one group with a single R = 1 among zeros, one
    with three successes and a failure (both groups have a non-zero std)."""
    torch.set_num_threads(1)
    small = build_small()
    agent = LLMAgent(small, constrained=True, seed=3)
    trajectories, _ = collect(
        KEYDOOR, agent, [0, 1], group_size=4, num_envs=8, env_kwargs={"delay": 1}, progress=False
    )
    assert 0 < sum(t.success for t in trajectories) < len(trajectories)
    return small, trajectories


def turn_spans(trajectory: Trajectory) -> list[tuple[int, int]]:
    """(start, end) of each turn in the row's response."""
    spans, position = [], 0
    for step in trajectory.steps:
        spans.append((position, position + len(step.action_token_ids)))
        position += len(step.action_token_ids) + len(REPLY)
    return spans


def verl_batch(trajectories: list[Trajectory], pad_token_id: int) -> DataProto:
    """The batch verl's multi-turn rollout builds (right-padded responses), with the
    per-turn text a verl-agent-style rollout carries in its non-tensor data."""
    width = max(turn_spans(t)[-1][1] for t in trajectories) + 1
    responses = torch.full((len(trajectories), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(responses.shape, dtype=torch.long)
    rewards = torch.zeros(responses.shape)
    for row, trajectory in enumerate(trajectories):
        for t, (step, (start, end)) in enumerate(
            zip(trajectory.steps, turn_spans(trajectory), strict=True)
        ):
            responses[row, start:end] = torch.tensor(step.action_token_ids)
            if t + 1 < trajectory.length:
                responses[row, end : end + len(REPLY)] = torch.tensor(REPLY)
            mask[row, start:end] = 1
            rewards[row, end - 1] = step.reward

    def per_row(values: list) -> np.ndarray:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array

    return DataProto.from_dict(
        tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards},
        non_tensors={
            "uid": per_row([t.group_id for t in trajectories]),
            "task_id": per_row([f"{t.env_id}/{t.task_id}" for t in trajectories]),
            "env_id": per_row([t.env_id for t in trajectories]),
            "task": per_row([t.task for t in trajectories]),
            "feedback": per_row([t.feedback for t in trajectories]),
            "success": per_row([t.success for t in trajectories]),
            "turn_observations": per_row([[s.observation for s in t.steps] for t in trajectories]),
            "turn_actions": per_row([[s.action for s in t.steps] for t in trajectories]),
            "turn_admissible_commands": per_row(
                [[list(s.admissible_commands) for s in t.steps] for t in trajectories]
            ),
        },
    )


def actor_log_softmax(loaded: LoadedModel, views: DataProto) -> torch.Tensor:
    """[K, R, V] next-token log-softmax at each response position, computed as verl's
    actor does: verl's own conversion to its no-padding layout (each sequence its
    prompt and response tokens only, positions from 0), logits / the batch's temperature,
    and verl's own slicing of the response positions back out."""
    data = left_right_2_no_padding(views.to_tensordict())
    temperature = data["temperature"]
    loaded.model.eval()
    values = []
    with torch.no_grad():
        for sequence in data["input_ids"].unbind():
            logits = loaded.model(input_ids=sequence[None]).logits[0]
            values.append(torch.log_softmax(logits.float() / temperature, dim=-1))
    return no_padding_2_padding(torch.cat(values), data)


def actor_log_probs(loaded: LoadedModel, views: DataProto) -> torch.Tensor:
    """[K, R] teacher-forced log-probs of the response tokens (verl's compute_log_prob)."""
    log_softmax = actor_log_softmax(loaded, views)
    return log_softmax.gather(-1, views.batch["responses"][..., None]).squeeze(-1)


def causal_views(loaded: LoadedModel, trajectories: list[Trajectory], like: DataProto) -> DataProto:
    """Each turn as the policy saw it (its recorded prompt), in the rows of `like`."""
    views = [causal_view(loaded.tokenizer, t, i) for t in trajectories for i in range(t.length)]
    return DataProto.from_dict(
        tensors=pack_views(views, loaded.tokenizer.pad_token_id),
        non_tensors=dict(like.non_tensor_batch),
        meta_info={"temperature": 1.0},
    )


def by_turn(trajectories: list[Trajectory], values: list, like: torch.Tensor) -> torch.Tensor:
    """Per step (a scalar) or per token ([A_t]) values on each turn's positions."""
    expected = torch.zeros(like.shape)
    for row, trajectory in enumerate(trajectories):
        for value, (start, end) in zip(values[row], turn_spans(trajectory), strict=True):
            expected[row, start:end] = torch.as_tensor(value, dtype=torch.float32)
    return expected


def test_views_are_the_module_prompts_and_scored_views_give_hcapo_advantages(rollout) -> None:
    small, trajectories = rollout
    batch = verl_batch(trajectories, small.tokenizer.pad_token_id)
    views = hindsight_batch(batch, small.tokenizer, HCAPO_BLOCK)
    module = HCAPO(small, generation_cache_bytes=0)
    expected_views = [module.hindsight_view_of(t, i) for t in trajectories for i in range(t.length)]
    for k, view in enumerate(expected_views):  # token for token what the module scores
        prompt = views.batch["prompts"][k][
            views.batch["attention_mask"][k, : -views.batch["responses"].shape[1]] > 0
        ]
        response = views.batch["responses"][k][views.batch["response_mask"][k] > 0]
        assert tuple(prompt.tolist()) == view.context_ids
        assert tuple(response.tolist()) == view.action_ids
    attach_view_values(batch, views, actor_log_probs(small, views), "hindsight_log_probs")
    assert isinstance(get_adv_estimator_fn("creditgym_hcapo"), HCAPOEstimator)
    computed = compute_advantage(batch, "creditgym_hcapo").batch["advantages"]
    output = module(trajectories)
    expected = by_turn(trajectories, output.step_advantages, computed)
    torch.testing.assert_close(computed, expected, **TOLERANCE)
    # The check can tell: the turn's own prompt in place of the hindsight one is off.
    causal = causal_views(small, trajectories, views)
    attach_view_values(batch, views, actor_log_probs(small, causal), "hindsight_log_probs")
    wrong = compute_advantage(batch, "creditgym_hcapo").batch["advantages"]
    assert (wrong - expected).abs().max() > 100 * TOLERANCE["atol"]


def test_seed_variant_takes_the_causal_view_from_old_log_probs(rollout) -> None:
    small, trajectories = rollout
    batch = verl_batch(trajectories, small.tokenizer.pad_token_id)
    views = hindsight_batch(batch, small.tokenizer, HCAPO_BLOCK)
    attach_view_values(batch, views, actor_log_probs(small, views), "hindsight_log_probs")
    register_adv_est("test_creditgym_hcapo_seed")(HCAPOEstimator(HCAPOSeedOptions()))
    with pytest.raises(ValueError, match="old_log_probs"):
        compute_advantage(batch, "test_creditgym_hcapo_seed")
    causal = causal_views(small, trajectories, views)
    attach_view_values(batch, causal, actor_log_probs(small, causal), "old_log_probs")
    computed = compute_advantage(batch, "test_creditgym_hcapo_seed").batch["advantages"]
    expected = by_turn(
        trajectories,
        HCAPOSeed(small, generation_cache_bytes=0)(trajectories).step_advantages,
        computed,
    )
    torch.testing.assert_close(computed, expected, **TOLERANCE)


def test_hp_rlvr_views_and_divergences_from_them_give_the_module_token_credit(rollout) -> None:
    small, trajectories = rollout
    batch = verl_batch(trajectories, small.tokenizer.pad_token_id)
    views = hindsight_batch(batch, small.tokenizer, HP_RLVR_BLOCK)
    module = HPRLVR(small, generation_cache_bytes=0)  # the registered estimator's defaults
    for k, view in enumerate(
        module.hindsight_view_of(t, i) for t in trajectories for i in range(t.length)
    ):
        width = views.batch["responses"].shape[1]
        assert tuple(
            views.batch["input_ids"][k][views.batch["attention_mask"][k] > 0].tolist()
        ) == (view.context_ids + view.action_ids), k
        assert views.batch["response_mask"][k].sum() == len(view.action_ids) <= width
    # The worker's pass: 5 rows per chunk, so chunks mix turns of other lengths and the
    # last one is partial.
    causal = causal_views(small, trajectories, views)
    scored = divergence_output(small.model, causal, views, chunk_rows=5)
    attach_view_values(batch, views, scored.batch["hindsight_divergence"], "hindsight_divergence")
    # Bound: both sides reduce float32 log-softmaxes with models.scoring.jensen_shannon, the
    # module over right-padded rows without position ids, this pass over left-padded
    # prompts with them, so the logits differ by float32 rounding of other matrix shapes
    # (a few ulps of values of order 1 to 10). d_j of two nearly equal distributions
    # (here ~1e-4) is a sum of cancelling terms over the vocabulary whose error is near
    # 1e-8 (1.5e-8 seen): 1e-7 covers it; a turn scored under another turn's prompt is
    # off by about d itself.
    divergence = batch.batch["hindsight_divergence"]
    expected_divergence = by_turn(trajectories, module.divergences(trajectories), divergence)
    torch.testing.assert_close(divergence, expected_divergence, rtol=0, atol=1e-7)
    # creditgym_hp_rlvr as verl looks it up, from fresh baselines (it keeps them across
    # calls: HP-RLVR's historical baseline), and left fresh for other callers.
    estimator = get_adv_estimator_fn("creditgym_hp_rlvr")
    estimator.reset()
    try:
        computed = compute_advantage(batch, "creditgym_hp_rlvr").batch["advantages"]
        second = compute_advantage(batch, "creditgym_hp_rlvr").batch["advantages"]
        estimator.reset()
        after_reset = compute_advantage(batch, "creditgym_hp_rlvr").batch["advantages"]
    finally:
        estimator.reset()
    expected = by_turn(trajectories, module(trajectories).token_advantages, computed)
    # Bound: A_j = (R - b) d_j / mean d, so the divergences' rounding (1e-7 above) is
    # divided by the trajectory's mean d (the untrained policy barely reacts to the block:
    # mean d ~ 1e-4): 1e-7 / min mean d x max |R - b| (about 1.3e-3 here, 2.4e-4 seen)
    # covers it; a misplaced turn moves A_j by ~|R - b|.
    mask = batch.batch["response_mask"] > 0
    mean_d = min(float(row[m].mean()) for row, m in zip(divergence, mask, strict=True))
    scale = max(abs(t.total_return) for t in trajectories)
    torch.testing.assert_close(computed, expected, rtol=0, atol=1e-7 / mean_d * scale)
    assert computed.abs().max() > 0.1
    assert (second - computed).abs().max() > 0.1  # the first batch moved the baselines
    torch.testing.assert_close(after_reset, computed, rtol=0, atol=0)


def test_divergence_pass_needs_the_same_response_tokens_in_both_views(rollout) -> None:
    small, trajectories = rollout
    batch = verl_batch(trajectories, small.tokenizer.pad_token_id)
    views = hindsight_batch(batch, small.tokenizer, HP_RLVR_BLOCK)
    causal = causal_views(small, trajectories, views)
    causal.batch["responses"][0, 0] += 1
    with pytest.raises(ValueError, match="different response tokens"):
        view_divergences(small.model, causal, views)


def test_causal_batch_is_each_turn_as_verls_policy_saw_it(rollout) -> None:
    small, trajectories = rollout
    pad = small.tokenizer.pad_token_id
    batch = verl_batch(trajectories, pad)
    # verl's rollout prompt: the first turn's, left-padded; attention on every real token.
    prompt_ids = [t.steps[0].prompt_token_ids for t in trajectories]
    width = max(map(len, prompt_ids))
    prompts = torch.full((len(trajectories), width), pad, dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        prompts[row, width - len(ids) :] = torch.tensor(ids)
    response_attended = torch.zeros(batch.batch["responses"].shape, dtype=torch.long)
    for row, trajectory in enumerate(trajectories):
        response_attended[row, : turn_spans(trajectory)[-1][1]] = 1
    batch.batch["prompts"] = prompts
    batch.batch["attention_mask"] = torch.cat([(prompts != pad).long(), response_attended], 1)
    causal = causal_batch(batch, pad)
    views = hindsight_batch(batch, small.tokenizer, HP_RLVR_BLOCK)
    for key in ("source_row", "source_start"):
        np.testing.assert_array_equal(causal.non_tensor_batch[key], views.non_tensor_batch[key])
    k = 0
    for row, trajectory in enumerate(trajectories):
        for t, (start, _) in enumerate(turn_spans(trajectory)):
            real = causal.batch["input_ids"][k][causal.batch["attention_mask"][k] > 0].tolist()
            context = tuple(prompt_ids[row]) + tuple(batch.batch["responses"][row, :start].tolist())
            assert tuple(real) == context + trajectory.steps[t].action_token_ids
            if t == 0:  # no history yet: creditgym's causal view is the same
                assert context == causal_view(small.tokenizer, trajectory, 0).context_ids
            k += 1
    assert k == len(causal)


def test_estimator_takes_the_modules_options_and_refuses_what_it_cannot_compute() -> None:
    # One declaration, one check: the options class refuses for the module and the estimator.
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        HCAPOOptions(gamma=1.5)
    assert HCAPOEstimator().needs == ("hindsight_log_probs",)
    assert HCAPOEstimator(HCAPOSeedOptions()).needs == ("hindsight_log_probs", "old_log_probs")
    assert HCAPOEstimator(HCAPOOptions(causal_contrast=True)).needs[-1] == "old_log_probs"
    with pytest.raises(ValueError, match="length_normalisation"):
        HCAPOEstimator(HCAPOOptions(length_normalisation="action"))


def test_views_need_the_turn_text_fields(rollout) -> None:
    small, trajectories = rollout
    batch = verl_batch(trajectories, small.tokenizer.pad_token_id)
    batch.non_tensor_batch.pop("turn_actions")
    with pytest.raises(ValueError, match="turn_actions"):
        hindsight_batch(batch, small.tokenizer, HCAPO_BLOCK)
