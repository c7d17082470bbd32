"""Hindsight credit's named options: golden block and prompt texts, option parsing, and each
scoring option moving the credit in its documented direction (hand-set scores, no forward)."""

import dataclasses

import numpy as np
import pytest
import torch

from creditgym.agents.prompts import INSTRUCTION, build_messages
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.hindsight_ablation import main
from creditgym.benchmarks.run import RunConfig, resolve
from creditgym.benchmarks.run.validate import validate
from creditgym.credit import REGISTRY
from creditgym.credit.base import CreditContext, build
from creditgym.credit.hcapo import HCAPO, HCAPOOptions, outcome_hindsight, self_normalised_ratio
from creditgym.credit.hindsight import HCAPO_WORDING, HP_RLVR_WORDING, hindsight_block
from creditgym.credit.hp_rlvr import HPRLVR, HPRLVROptions, future_hindsight
from creditgym.credit.options import parse_options
from creditgym.credit.views import action_span_mask, causal_view
from creditgym.measure.variants import VARIANTS
from creditgym.models.generation_cache import parameter_fingerprint
from creditgym.models.registry import build_tiny
from creditgym.models.scoring import PairedScores, ScoreMemo
from tests.credit_cases import scripted_trajectory, tokenised


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_tiny()


def three_steps():
    observations = ["boot log", "disk full on /var", "cleaned /var/tmp"]
    return scripted_trajectory("g", [0.0, 0.0, 1.0], True, observations)


# --- the block texts, exactly as docs/hindsight_ablation.md shows them -------------------

GOLDEN_HCAPO = {
    "outcome": "Outcome: task completed.",
    "feedback": "Outcome: task completed. Feedback: service restored",
    "final_action": ("Outcome: task completed. Feedback: service restored\nFinal action: check 2"),
    "final": (
        "Outcome: task completed. Feedback: service restored\n"
        "Final observation: cleaned /var/tmp\nFinal action: check 2"
    ),
    "future": (
        "Outcome: task completed. Feedback: service restored\n"
        "What happened after this action:\n"
        "[Result 1]: disk full on /var\n[Next action 1]: check 1\n"
        "[Result 2]: cleaned /var/tmp\n[Next action 2]: check 2"
    ),
}


@pytest.mark.parametrize("content", sorted(GOLDEN_HCAPO))
def test_each_hindsight_block_renders_its_golden_text(content):
    trajectory = three_steps()
    assert hindsight_block(content, trajectory, 0, HCAPO_WORDING) == GOLDEN_HCAPO[content]
    # HP-RLVR's words change the verdict line only.
    hp_text = GOLDEN_HCAPO[content].replace("task completed", "success")
    hp_text = hp_text.replace("Feedback:", "Verifier feedback:")
    assert hindsight_block(content, trajectory, 0, HP_RLVR_WORDING) == hp_text


def test_future_block_is_cut_to_k_steps_and_the_defaults_are_the_modules_old_texts():
    trajectory = three_steps()
    assert hindsight_block("future", trajectory, 0, HCAPO_WORDING, future_steps=1).endswith(
        "[Result 1]: disk full on /var\n[Next action 1]: check 1"
    )
    assert hindsight_block("future", trajectory, 2, HCAPO_WORDING) == GOLDEN_HCAPO["feedback"]
    assert outcome_hindsight(trajectory) == GOLDEN_HCAPO["final_action"]
    assert future_hindsight(trajectory, 1) == (
        "Outcome: success. Verifier feedback: service restored\n"
        "What happened after this action:\n"
        "[Result 1]: cleaned /var/tmp\n[Next action 1]: check 2"
    )


@pytest.mark.parametrize(
    ("position", "order"),
    [
        ("after_task", ["Your task is", "Hindsight", "Current observation", INSTRUCTION]),
        ("before_instruction", ["Your task is", "Current observation", "Hindsight", INSTRUCTION]),
        ("after_instruction", ["Your task is", "Current observation", INSTRUCTION, "Hindsight"]),
    ],
)
def test_hindsight_position_places_the_block_where_documented(position, order):
    content = build_messages(
        "creditgym/KeyDoor-v0",
        "open the door",
        (),
        "a room",
        ("take key",),
        "Outcome: x.",
        position,
    )[0]["content"]
    parts = content.split("\n\n")
    starts = [next(i for i, part in enumerate(parts) if part.startswith(p)) for p in order]
    assert starts == sorted(starts)
    assert "Hindsight (privileged information about this episode):\nOutcome: x." in parts
    with pytest.raises(ValueError, match="hindsight_position"):
        build_messages("e", "t", (), "o", (), "h", "nowhere")


# --- options by name ------------------------------------------------------------------------


def test_options_are_parsed_by_name_and_refused_with_the_valid_names(tiny):
    parsed = parse_options(
        HCAPOOptions, [("clip", "0,inf"), ("do_no_harm", "off"), ("temperature", "1")]
    )
    assert parsed == HCAPOOptions(clip=(0.0, float("inf")), do_no_harm=False, temperature=1.0)
    options = parse_options(HPRLVROptions, [("eligible_tokens", "action")])
    module = build(
        REGISTRY["hp_rlvr"], CreditContext(tiny, generation_cache_bytes=0, options=options)
    )
    assert module.options.eligible_tokens == "action"
    with pytest.raises(ValueError, match=r"valid: .*temperature"):
        parse_options(HCAPOOptions, [("temp", "1")])
    with pytest.raises(ValueError, match="expected one of"):
        parse_options(HCAPOOptions, [("hindsight", "everything")])
    with pytest.raises(ValueError, match="no option 'gamma'"):
        parse_options(REGISTRY["grpo"].Options, [("gamma", "1")])
    # Options of another module (or text not parsed) are refused before any model work.
    with pytest.raises(TypeError, match="takes HCAPOOptions"):
        build(REGISTRY["hcapo"], CreditContext(tiny, options=options))


# --- each scoring option moves the credit the documented way --------------------------------


def test_action_span_mask_marks_the_command_tokens_only(tiny):
    trajectory = tokenised(three_steps(), tiny)
    mask = action_span_mask(tiny.tokenizer, trajectory, 0)
    ids = np.array(trajectory.steps[0].action_token_ids)
    assert tiny.tokenizer.decode(list(ids[mask])) == "check 0"
    assert not mask[0] and not mask[-1]  # "<think>..." and "</action>" are formatting
    scripted = three_steps()  # a scripted step's scored ids are the command alone
    assert action_span_mask(tiny.tokenizer, scripted, 0).all()


def memo_for(tiny) -> ScoreMemo:
    memo = ScoreMemo()
    memo.fingerprint = parameter_fingerprint(tiny.model)  # hand-set scores, served as is
    return memo


def hand_scored(tiny, module, trajectory, hindsight_command, causal_command, formatting=0.0):
    """Fill the module's memo: per step, the command tokens' log-probs given, formatting ones
    `formatting`, in the hindsight view and (for the causal view) `causal_command`."""
    for t in range(trajectory.length):
        mask = action_span_mask(tiny.tokenizer, trajectory, t)
        for view, command in (
            (module.hindsight_view_of(trajectory, t), hindsight_command[t]),
            (causal_view(tiny.tokenizer, trajectory, t, module.history_len), causal_command[t]),
        ):
            module.score_memo.logprobs[view] = np.where(mask, command, formatting).astype(
                np.float32
            )


def test_gamma_one_removes_the_late_step_preference(tiny):
    batch = [three_steps(), scripted_trajectory("g", [0.0], False)]
    # clip (1, 1) pins rho = 1: Q = gamma^(T-t) R, rising with t, unless gamma = 1.
    discounted = HCAPO(tiny, HCAPOOptions(clip=(1.0, 1.0)))(batch).step_advantages[0]
    flat = HCAPO(tiny, HCAPOOptions(clip=(1.0, 1.0), gamma=1.0))(batch).step_advantages[0]
    assert discounted[0] < discounted[1] < discounted[2]
    np.testing.assert_allclose(flat, flat[0])


def test_lower_temperature_and_wider_clip_spread_rho():
    scores = [np.array([-1.0]), np.array([-4.0])]
    rho_t5 = self_normalised_ratio(scores, [], 5.0)
    rho_t1 = self_normalised_ratio(scores, [], 1.0)
    assert np.ptp(np.log(rho_t1)) == pytest.approx(5 * np.ptp(np.log(rho_t5)))
    assert np.ptp(np.clip(rho_t1, 0.5, 2.0)) > np.ptp(np.clip(rho_t1, 0.8, 1.2))


def test_action_length_normalisation_undilutes_and_causal_contrast_reranks(tiny):
    success = tokenised(three_steps(), tiny)
    # The command of step 1 is unlikely anyway (causal -6) but much likelier with the outcome
    # shown (-3); steps 0 and 2 are likely both ways (-1).
    hindsight, causal = [-1.0, -3.0, -1.0], [-1.0, -6.0, -1.0]
    rhos = {}
    for name, options in {
        "response": {},
        "action": {"length_normalisation": "action"},
        "contrast": {"length_normalisation": "action", "causal_contrast": True},
    }.items():
        module = HCAPO(
            tiny,
            HCAPOOptions(clip=(0.0, np.inf), gamma=1.0, **options),
            score_memo=memo_for(tiny),
        )
        hand_scored(tiny, module, success, hindsight, causal)
        q_values, _ = module.hindsight_q([success])
        rhos[name] = q_values[0] / success.total_return
    # The formatting tokens (log-prob 0) dilute the command's log-prob over the response.
    assert np.ptp(np.log(rhos["action"])) > np.ptp(np.log(rhos["response"]))
    # Without the contrast the step that is unlikely anyway ranks last; with it, first.
    assert np.argmin(rhos["action"]) == 1
    assert np.argmax(rhos["contrast"]) == 1


def test_do_no_harm_off_lets_a_success_step_fall_below_its_macro(tiny):
    # Two successes of one group, R = 1 each (macro 0): with rho = 1 the long one's early
    # steps have Q = 0.95^4 .. 0.95^2 below the pool mean 0.92, so a negative micro term.
    batch = [
        scripted_trajectory("g", [0.0] * 4 + [1.0], True),
        scripted_trajectory("g", [1.0], True),
    ]
    kept = HCAPO(tiny, HCAPOOptions(clip=(1.0, 1.0)))(batch).step_advantages[0]
    harmed = HCAPO(tiny, HCAPOOptions(clip=(1.0, 1.0), do_no_harm=False))(batch).step_advantages[0]
    np.testing.assert_array_equal(kept[:3], [0.0, 0.0, 0.0])
    assert (harmed[:3] < 0).all()
    np.testing.assert_allclose(kept[3:], harmed[3:])


def test_action_eligible_tokens_move_hp_rlvr_credit_off_formatting_tokens(tiny):
    success = tokenised(three_steps(), tiny)
    results = {}
    for eligible in ("response", "action"):
        module = HPRLVR(tiny, HPRLVROptions(eligible_tokens=eligible), score_memo=memo_for(tiny))
        for t in range(success.length):
            mask = action_span_mask(tiny.tokenizer, success, t)
            # Step 0: the formatting tokens diverge (0.5) but its command does not; step 1:
            # only its command diverges (0.2); step 2: nothing does.
            jsd = np.where(mask, [0.0, 0.2, 0.0][t], [0.5, 0.0, 0.0][t]).astype(np.float32)
            zeros = np.zeros(mask.size, dtype=np.float32)
            pair = (
                causal_view(tiny.tokenizer, success, t, module.history_len),
                module.hindsight_view_of(success, t),
            )
            module.score_memo.pairs[pair] = PairedScores(zeros, zeros, jsd)
        output = module([success])
        results[eligible] = output
    response, action = (results[k].step_advantages[0] for k in ("response", "action"))
    assert np.argmax(response) == 0 and np.argmax(action) == 1
    # Ineligible tokens get no credit at all.
    mask = action_span_mask(tiny.tokenizer, success, 1)
    tokens = results["action"].token_advantages[0][1]
    assert (tokens[~mask] == 0).all() and (tokens[mask] > 0).all()


def test_ablation_refuses_unknown_variants_and_bad_sizes_in_one_line(capsys):
    assert main(["--variants", "hcapo:T2"]) == 2
    assert "unknown variant 'hcapo:T2'" in capsys.readouterr().err
    assert main(["--env", "keydoor", "--pool", "12", "--group-size", "8"]) == 2
    assert "multiples of --group-size" in capsys.readouterr().err
    # Every named variant's options are valid options of its module.
    for variant in VARIANTS:
        parse_options(REGISTRY[variant.module].Options, variant.options)


def test_credit_options_enter_the_run_identity_in_any_order_and_bad_ones_are_refused():
    base = RunConfig(env="keydoor", credit="hcapo")
    named = dataclasses.replace(base, credit_options=("temperature=1", "clip=0.5,2"))
    reordered = dataclasses.replace(base, credit_options=("clip=0.5,2", "temperature=1"))
    assert resolve(named).name == resolve(reordered).name != resolve(base).name
    assert resolve(base).identity["credit_options"] == []  # none named: the module's defaults
    for bad, message in (
        (("temp=1",), "no option 'temp'"),
        (("temperature",), "key=value"),
        (("temperature=hot",), "expected a number"),
    ):
        with pytest.raises(UsageError, match=message):
            validate(resolve(dataclasses.replace(base, credit_options=bad)))


def test_weight_normalisation_makes_hp_rlvr_credit_blind_to_the_divergence_level(tiny):
    """normalise_weights=True: w = d / mean d, so a trajectory's credit does not move when
    every divergence is scaled; False: w = d, so the credit scales with it."""
    success = tokenised(three_steps(), tiny)

    def step_credit(normalise: bool, scale: float) -> np.ndarray:
        module = HPRLVR(tiny, HPRLVROptions(normalise_weights=normalise), score_memo=memo_for(tiny))
        for t in range(success.length):
            mask = action_span_mask(tiny.tokenizer, success, t)
            jsd = np.full(mask.size, scale * (0.1 + 0.1 * t), dtype=np.float32)
            zeros = np.zeros(mask.size, dtype=np.float32)
            pair = (
                causal_view(tiny.tokenizer, success, t, module.history_len),
                module.hindsight_view_of(success, t),
            )
            module.score_memo.pairs[pair] = PairedScores(zeros, zeros, jsd)
        return module([success]).step_advantages[0]

    normalised = step_credit(True, 1.0), step_credit(True, 0.1)
    raw = step_credit(False, 1.0), step_credit(False, 0.1)
    np.testing.assert_allclose(normalised[0], normalised[1], rtol=1e-5)
    np.testing.assert_allclose(raw[1], 0.1 * raw[0], rtol=1e-5)
    # Both rank the later (more divergent) steps higher; only the scale differs.
    assert (np.diff(normalised[0]) > 0).all() and (np.diff(raw[0]) > 0).all()
    assert not np.allclose(raw[0], normalised[0])
