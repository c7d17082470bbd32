"""HCAPO, HP-RLVR and the scoring engine: hand-computed oracles on the `tiny` model."""

import copy
import math

import numpy as np
import pytest
import torch

from creditgym.credit.base import CreditContext, build
from creditgym.credit.hcapo import HCAPO, HCAPOOptions, HCAPOSeed, self_normalised_ratio
from creditgym.credit.hp_rlvr import HPRLVR, HPRLVROptions, divergence_weights, future_hindsight
from creditgym.credit.views import causal_view
from creditgym.measure.prefetch import prefetch_modules
from creditgym.models.registry import build_tiny
from creditgym.models.scoring import (
    ScoreMemo,
    TeacherForced,
    jensen_shannon,
    score_divergence,
    score_logprobs,
)
from creditgym.trainers.core import peft_quietly
from tests.credit_cases import scripted_trajectory, tokenised


@pytest.fixture(scope="module")
def tiny(device):
    torch.set_num_threads(1)
    loaded = build_tiny()
    loaded.model.to(device)
    return loaded


# --- scoring engine -------------------------------------------------------------------


def test_batched_scoring_equals_one_full_forward_per_sequence(tiny):
    views = [
        TeacherForced(tuple(range(5, 5 + p)), tuple(range(40, 40 + a)))
        for p, a in [(30, 4), (7, 9), (18, 1), (3, 0), (12, 6)]
    ]
    # A tiny budget forces one row per chunk; a large one puts all rows in one chunk.
    for budget in (1, 1 << 30):
        batched = score_logprobs(tiny, views, memory_budget_bytes=budget)
        for view, scores in zip(views, batched, strict=True):
            ids = torch.tensor([view.context_ids + view.action_ids])
            with torch.no_grad():
                log_probs = torch.log_softmax(tiny.model(input_ids=ids).logits[0], -1)
            p = len(view.context_ids)
            expected = [log_probs[p + j - 1, y].item() for j, y in enumerate(view.action_ids)]
            np.testing.assert_allclose(scores, expected, atol=1e-5)


def full_forward_log_softmax(tiny, view):
    ids = torch.tensor([view.context_ids + view.action_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(tiny.model(input_ids=ids).logits[0], -1)
    start = len(view.context_ids) - 1
    return log_probs[start : start + len(view.action_ids)]


def test_paired_scoring_with_shared_prefix_equals_separate_full_forwards(tiny):
    action = (60, 61, 62)
    shared = tuple(range(5, 25))
    causal = [
        TeacherForced((*shared, 90, 91), action),  # prefix of 20 shared tokens
        TeacherForced((*shared[:3], 92), action[:1]),  # short prefix, one action token
        TeacherForced((7, 8, 9), action),  # no shared prefix: plain forwards
        TeacherForced(shared, ()),  # nothing to score
    ]
    hindsight = [
        TeacherForced(shared + tuple(range(100, 130)) + (90, 91), action),
        TeacherForced((*shared[:3], 93, 94, 95, 92), action[:1]),
        TeacherForced((8, 9, 10, 11), action),
        TeacherForced((*shared, 1), ()),
    ]
    for budget in (1, 1 << 30):
        scores = score_divergence(tiny, causal, hindsight, memory_budget_bytes=budget)
        for c, h, score in zip(causal, hindsight, scores, strict=True):
            log_p, log_q = full_forward_log_softmax(tiny, c), full_forward_log_softmax(tiny, h)
            targets = torch.tensor(c.action_ids, dtype=torch.long)[:, None]
            np.testing.assert_allclose(
                score.causal_logprobs, log_p.gather(1, targets).squeeze(1), atol=1e-5
            )
            np.testing.assert_allclose(
                score.hindsight_logprobs, log_q.gather(1, targets).squeeze(1), atol=1e-5
            )
            np.testing.assert_allclose(score.jsd, jensen_shannon(log_p, log_q), atol=1e-5)
    assert all(score.jsd.size == len(c.action_ids) for c, score in zip(causal, scores, strict=True))


def test_scoring_restores_training_mode(tiny):
    model = copy.deepcopy(tiny)
    model.model.train()
    score_logprobs(model, [TeacherForced((1, 2, 3), (4, 5))])
    assert model.model.training


def test_scoring_works_on_a_lora_wrapped_model(tiny):
    from peft import LoraConfig, get_peft_model

    base = copy.deepcopy(tiny)
    with peft_quietly():
        wrapped = get_peft_model(base.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    for name, parameter in wrapped.named_parameters():
        if "lora_B" in name:  # fresh adapters are zero; make them change the output
            parameter.data.normal_(0.0, 0.5)
    lora = type(tiny)(name="tiny-lora", model=wrapped, tokenizer=tiny.tokenizer)
    view = TeacherForced((1, 2, 3, 4), (5, 6, 7))
    with torch.no_grad():
        logits = wrapped(input_ids=torch.tensor([view.context_ids + view.action_ids])).logits
    log_probs = torch.log_softmax(logits[0], -1)
    expected = [log_probs[3 + j, y].item() for j, y in enumerate(view.action_ids)]
    scores = score_logprobs(lora, [view])[0]
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    assert not np.allclose(scores, score_logprobs(tiny, [view])[0], atol=1e-3)
    # The paired path (shared-prefix KV cache) goes through the wrapper too.
    hindsight = TeacherForced((1, 2, 9, 3, 4), view.action_ids)
    paired = score_divergence(lora, [view], [hindsight])[0]
    np.testing.assert_allclose(paired.causal_logprobs, expected, atol=1e-5)


def test_jensen_shannon_known_values():
    p = torch.log(torch.tensor([[1.0, 0.0], [0.3, 0.7], [1.0, 0.0]]))
    q = torch.log(torch.tensor([[0.5, 0.5], [0.3, 0.7], [0.0, 1.0]]))
    # p=(1,0), q=(.5,.5): m=(.75,.25); JS = (.5 ln(4/3) + .25 ln(2/3) + .25 ln 2) / ln 2.
    by_hand = (0.5 * math.log(4 / 3) + 0.25 * math.log(2 / 3) + 0.25 * math.log(2)) / math.log(2)
    np.testing.assert_allclose(jensen_shannon(p, q).numpy(), [by_hand, 0.0, 1.0], atol=1e-6)


def test_scoring_rejects_mismatched_views_and_cuts_too_long_contexts(tiny):
    with pytest.raises(ValueError, match="action ids differ"):
        score_divergence(tiny, [TeacherForced((1,), (2,))], [TeacherForced((1,), (3,))])
    limit = tiny.model.config.max_position_embeddings
    too_long = TeacherForced(tuple(range(3, 200)) * 50, (2, 4))
    assert too_long.length > limit
    cut = TeacherForced(too_long.context_ids[-(limit - 2) :], (2, 4))
    np.testing.assert_allclose(
        score_logprobs(tiny, [too_long])[0], score_logprobs(tiny, [cut])[0], atol=1e-5
    )
    with pytest.raises(ValueError, match="does not fit"):
        score_logprobs(tiny, [TeacherForced((1,), tuple([2] * limit))])


# --- HCAPO ----------------------------------------------------------------------------


def test_hcapo_ratio_is_self_normalised_then_clipped_by_hand():
    # Mean token log-probs -1 and -11, T_temp 5: pi_hind = e^-0.2, e^-2.2.
    rho = self_normalised_ratio([np.array([-1.0, -1.0]), np.array([-11.0])], [], 5.0)
    mean = (math.exp(-0.2) + math.exp(-2.2)) / 2
    np.testing.assert_allclose(rho, [math.exp(-0.2) / mean, math.exp(-2.2) / mean])
    assert np.clip(rho, 0.8, 1.2).tolist() == [1.2, 0.8]


def test_hcapo_with_unit_ratio_matches_hand_values(tiny):
    # clip (1, 1) pins rho = 1, so Q = gamma^(T-t) R is known without the model.
    batch = [
        scripted_trajectory("g", [0.0, 1.0], True),
        scripted_trajectory("g", [0.0], False),
    ]
    output = HCAPO(tiny, HCAPOOptions(clip=(1.0, 1.0)))(batch)
    q = np.array([0.95, 1.0, 0.0])
    micro = (q - q.mean()) / q.std(ddof=1)
    macro = 0.5 / math.sqrt(0.5)
    np.testing.assert_allclose(output.step_advantages[0], macro + micro[:2], rtol=1e-5)
    np.testing.assert_allclose(output.step_advantages[1], -macro + micro[2:], rtol=1e-5)
    # Only the success is scored: a failure's Q is 0 whatever rho is.
    assert output.metrics["num_hindsight_steps"] == 2.0


def test_hcapo_do_no_harm_zeroes_negative_micro_in_successes(tiny):
    batch = [scripted_trajectory("g", [0.0, 0.0, 1.0], True) for _ in range(2)]
    batch.append(scripted_trajectory("g", [0.0, 1.0], True))
    # All returns equal: macro = 0, so the advantage is the micro term alone.
    harmful = HCAPO(tiny, HCAPOOptions(do_no_harm=False))(batch)
    assert np.concatenate(harmful.step_advantages).min() < 0
    safe = HCAPO(tiny)(batch)
    for unsafe_values, values in zip(harmful.step_advantages, safe.step_advantages, strict=True):
        np.testing.assert_allclose(values, np.maximum(unsafe_values, 0.0), atol=1e-6)


def test_hcapo_ratio_stays_in_the_clip_range(tiny):
    success = tokenised(scripted_trajectory("g", [0.0, 0.0, 1.0], True), tiny)
    q_values, stats = HCAPO(tiny).hindsight_q([success])
    rho = q_values[0] / (0.95 ** np.arange(2, -1, -1))
    assert np.all((rho >= 0.8 - 1e-9) & (rho <= 1.2 + 1e-9))
    assert 0.8 <= stats["mean_rho"] <= 1.2


def test_hcapo_seed_variant_uses_return_to_go_and_its_weights(tiny):
    batch = [scripted_trajectory("g", [0.0, 1.0], True), scripted_trajectory("g", [0.0], False)]
    seed = HCAPOSeed(tiny)
    options = seed.options
    assert (options.macro_weight, options.omega, options.variant) == (0.6, 0.4, "seed")
    q_values, _ = seed.hindsight_q(batch)
    rho = q_values[0] / np.array([0.95, 1.0])
    assert np.all((rho >= math.exp(-5)) & (rho <= math.exp(5)))


# --- HP-RLVR --------------------------------------------------------------------------


def test_identical_views_give_zero_divergence_and_zero_weight(tiny):
    trajectory = tokenised(scripted_trajectory("g", [0.0, 1.0], True), tiny)
    views = [causal_view(tiny.tokenizer, trajectory, t) for t in range(2)]
    scores = score_divergence(tiny, views, views)
    divergences = [s.jsd for s in scores]
    assert max(float(d.max()) for d in divergences) < 1e-6
    weights = divergence_weights([np.zeros(3), np.zeros(2)], normalise=True, max_weight=5.0)
    assert all(not np.any(w) for w in weights)


def test_divergence_weights_are_mean_normalised_and_capped():
    weights = divergence_weights([np.array([0.1, 0.3]), np.array([0.0])], True, max_weight=2.0)
    # mean d = 0.4 / 3; 0.1 / mean = 0.75, 0.3 / mean = 2.25 -> capped at 2.
    np.testing.assert_allclose(weights[0], [0.75, 2.0])
    np.testing.assert_allclose(weights[1], [0.0])


def test_divergence_weights_unnormalised_are_the_divergences():
    weights = divergence_weights([np.array([0.1, 0.3]), np.array([0.0])], False, max_weight=2.0)
    np.testing.assert_allclose(weights[0], [0.1, 0.3])
    np.testing.assert_allclose(weights[1], [0.0])


def test_future_hindsight_shows_the_outcome_and_a_bounded_future():
    observations = ["start", "x" * 10, "second result", "third result"]
    trajectory = scripted_trajectory("g", [0.0, 0.0, 0.0, 1.0], True, observations)
    block = future_hindsight(trajectory, 0, future_steps=2, max_observation_chars=4)
    assert block == (
        "Outcome: success. Verifier feedback: service restored\n"
        "What happened after this action:\n"
        "[Result 1]: xxxx\n"
        "[Next action 1]: check 1\n"
        "[Result 2]: seco\n"
        "[Next action 2]: check 2"
    )
    # The last step has no future: the outcome alone.
    outcome_only = "Outcome: success. Verifier feedback: service restored"
    assert future_hindsight(trajectory, 3) == outcome_only


def test_hp_rlvr_sign_follows_reward_minus_baseline_and_failures_get_credit(tiny):
    success = tokenised(scripted_trajectory("a", [0.0, 1.0], True, task_id="t1"), tiny)
    failure = tokenised(scripted_trajectory("b", [0.0, 0.0], False, task_id="t2"), tiny)
    module = HPRLVR(tiny, HPRLVROptions(initial_baseline=0.5))
    output = module([success, failure])
    success_credit = np.concatenate(output.token_advantages[0])
    failure_credit = np.concatenate(output.token_advantages[1])
    assert success_credit.min() >= 0 and success_credit.max() > 0
    assert failure_credit.max() <= 0 and failure_credit.min() < 0
    # Bounded: |A| <= max_weight * |R - b|.
    assert np.abs(np.concatenate([success_credit, failure_credit])).max() <= 5.0 * 0.5 + 1e-6
    # JSD over the full vocabulary is in [0, 1].
    assert 0.0 < output.metrics["mean_jsd"] <= 1.0


def test_hp_rlvr_uniform_control_pays_reward_minus_baseline_at_every_token(tiny):
    """The control without hindsight: A_j = R - b on every token, the same baseline as the
    divergence's, no scoring pass (nothing kept from generation for it)."""
    batch = [
        tokenised(scripted_trajectory("a", [0.0, 1.0], True, task_id="t1"), tiny),
        tokenised(scripted_trajectory("b", [0.0, 0.0], False, task_id="t2"), tiny),
    ]
    uniform = HPRLVR(tiny, HPRLVROptions(initial_baseline=0.25, weights="uniform"))
    divergence = HPRLVR(tiny, HPRLVROptions(initial_baseline=0.25))
    assert uniform.generation_cache is None and divergence.generation_cache is not None
    control, scored = uniform(batch), divergence(batch)
    for traj, steps, scored_steps in zip(
        batch, control.token_advantages, scored.token_advantages, strict=True
    ):
        for step, credit, scored_credit in zip(traj.steps, steps, scored_steps, strict=True):
            assert credit.shape == (len(step.action_token_ids),) == scored_credit.shape
            np.testing.assert_array_equal(credit, np.float32(traj.total_return - 0.25))
        np.testing.assert_allclose(
            np.concatenate(steps).mean(), np.concatenate(scored_steps).mean(), rtol=0.25
        )
    assert "mean_jsd" not in control.metrics and "mean_jsd" in scored.metrics
    assert uniform.state_dict() == divergence.state_dict()


def test_hp_rlvr_baseline_is_an_ema_kept_across_batches_and_checkpointed(tiny):
    module = HPRLVR(tiny, HPRLVROptions(baseline_momentum=0.9))
    batch = [
        scripted_trajectory("a", [1.0], True, task_id="t1"),
        scripted_trajectory("b", [0.0], False, task_id="t2"),
    ]
    module(batch)
    assert module.global_baseline == pytest.approx(0.9 * 0.0 + 0.1 * 0.5)
    assert module.task_baselines == {"creditgym/SysDiag-v0/t1": 1.0, "creditgym/SysDiag-v0/t2": 0.0}
    module([scripted_trajectory("a", [0.0], False, task_id="t1")])
    assert module.task_baselines["creditgym/SysDiag-v0/t1"] == pytest.approx(0.9)
    restored = HPRLVR(tiny)
    restored.load_state_dict(module.state_dict())
    assert restored.state_dict() == module.state_dict()
    # A seen task uses its own baseline; an unseen one the global baseline.
    assert restored.baseline(batch[0]) == pytest.approx(0.9)
    unseen = scripted_trajectory("c", [1.0], True, task_id="t9")
    assert restored.baseline(unseen) == pytest.approx(module.global_baseline)


def test_prefetched_memo_scores_each_distinct_view_once_and_serves_the_modules_credit(tiny):
    """A pool whose rollouts repeat each other (a group that took the same actions) is
    scored once per distinct view, and modules built with the shared memo give the credit
    of modules that score afresh."""
    a = tokenised(scripted_trajectory("a", [0.0, 1.0], True, task_id="t1"), tiny)
    b = tokenised(scripted_trajectory("b", [0.0, 0.0], False, task_id="t1"), tiny)
    rows = []
    hook = tiny.model.register_forward_hook(
        lambda _m, _args, kwargs, _o: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:

        def prefetched(pool):
            rows.clear()
            memo = ScoreMemo()
            context = CreditContext(
                policy=tiny, history_len=2, generation_cache_bytes=0, score_memo=memo
            )
            modules = [build(cls, context) for cls in (HCAPO, HPRLVR)]
            views = prefetch_modules(memo, tiny, modules, pool, history_len=2)
            return views, sum(rows), context

        distinct_views, distinct_rows, _ = prefetched([a, b])
        views, scored_rows, context = prefetched([a, b, a, a, b])
    finally:
        hook.remove()
    # Per step: the causal view, HCAPO's and HP-RLVR's hindsight views.
    assert distinct_views == views == 3 * (a.length + b.length)
    assert scored_rows == distinct_rows > 0
    pool = [a, b, a, a, b]
    fresh = CreditContext(policy=tiny, history_len=2, generation_cache_bytes=0)
    for cls in (HCAPO, HPRLVR):
        rows.clear()
        served = build(cls, context)(pool).step_advantages
        assert not rows  # every view a memo hit: no forward
        for got, want in zip(served, build(cls, fresh)(pool).step_advantages, strict=True):
            # Prefetch chunks rows differently (one shared prefix for three views), so
            # float32 sums differ in the last bits only.
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
