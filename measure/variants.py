"""The hindsight ablation's variants, as data: each a registered module with options named.

HCAPO (arXiv 2603.08754) and HP-RLVR (Chen et al. 2026) leave choices open
(docs/hindsight_ablation.md): what the hindsight block shows and where it sits, HCAPO's
temperature, clip, gamma^(T-t) factor, do-no-harm, length normalisation and whether the
ratio is taken against the causal view, HP-RLVR's weight normalisation and eligible
tokens. Each row changes one choice (or a named combination) from the module's defaults;
`benchmarks.hindsight_ablation` scores every row on the same trajectories.

HCAPO's block variants name `wording=hp_rlvr`, so their hindsight views are HP-RLVR's and
are scored once for both methods.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One row of the ablation: a registered module with some options named.

    Attributes:
        name: the row's label (`module` alone for the defaults).
        module: registered credit module.
        options: `--credit-options` pairs (`credit.options`), empty for the defaults.
        what: the choice it changes, in words.
    """

    name: str
    module: str
    options: tuple[tuple[str, str], ...]
    what: str


VARIANTS: tuple[Variant, ...] = (
    Variant("grpo", "grpo", (), "trajectory-level reference (one value per trajectory)"),
    Variant("gigpo", "gigpo", (), "anchor-state step term"),
    Variant(
        "hcapo", "hcapo", (), "default: paper form (final_action block, T 5, clip 0.8-1.2, gamma)"
    ),
    Variant("hcapo:T1", "hcapo", (("temperature", "1"),), "temperature 1"),
    Variant("hcapo:clip0.5-2", "hcapo", (("clip", "0.5,2"),), "clip [0.5, 2]"),
    Variant("hcapo:noclip", "hcapo", (("clip", "0,inf"),), "no clip"),
    Variant("hcapo:gamma1", "hcapo", (("gamma", "1"),), "no gamma^(T-t) factor"),
    Variant("hcapo:harm", "hcapo", (("do_no_harm", "false"),), "do-no-harm off"),
    Variant(
        "hcapo:action_tokens",
        "hcapo",
        (("length_normalisation", "action"),),
        "|a_t| = command tokens",
    ),
    Variant(
        "hcapo:contrast", "hcapo", (("causal_contrast", "true"),), "log pi_hind - log pi_causal"
    ),
    Variant(
        "hcapo:block_outcome",
        "hcapo",
        (("hindsight", "outcome"), ("wording", "hp_rlvr")),
        "block: outcome only",
    ),
    Variant(
        "hcapo:block_feedback",
        "hcapo",
        (("hindsight", "feedback"), ("wording", "hp_rlvr")),
        "block: + feedback",
    ),
    Variant(
        "hcapo:block_final_action_hpw",
        "hcapo",
        (("hindsight", "final_action"), ("wording", "hp_rlvr")),
        "default block in HP-RLVR's words",
    ),
    Variant(
        "hcapo:block_final",
        "hcapo",
        (("hindsight", "final"), ("wording", "hp_rlvr")),
        "block: + final observation",
    ),
    Variant(
        "hcapo:block_future",
        "hcapo",
        (("hindsight", "future"), ("wording", "hp_rlvr")),
        "block: + realised future",
    ),
    Variant(
        "hcapo:after_task",
        "hcapo",
        (("hindsight_position", "after_task"),),
        "block after the task line",
    ),
    Variant(
        "hcapo:after_instruction",
        "hcapo",
        (("hindsight_position", "after_instruction"),),
        "block after the instruction",
    ),
    Variant(
        "hcapo:gamma1+noclip",
        "hcapo",
        (("gamma", "1"), ("clip", "0,inf")),
        "no gamma factor, no clip",
    ),
    Variant(
        "hcapo:gamma1+noclip+T1",
        "hcapo",
        (("gamma", "1"), ("clip", "0,inf"), ("temperature", "1")),
        "no gamma factor, no clip, T 1",
    ),
    Variant(
        "hcapo:gamma1+noclip+contrast",
        "hcapo",
        (("gamma", "1"), ("clip", "0,inf"), ("causal_contrast", "true")),
        "no gamma factor, no clip, causal contrast",
    ),
    Variant(
        "hcapo:gamma1+noclip+T1+contrast",
        "hcapo",
        (("gamma", "1"), ("clip", "0,inf"), ("temperature", "1"), ("causal_contrast", "true")),
        "no gamma factor, no clip, T 1, causal contrast",
    ),
    Variant("hcapo_seed", "hcapo_seed", (), "seed variant: importance ratio x return-to-go"),
    Variant("hp_rlvr", "hp_rlvr", (), "default: future block, mean-normalised JSD, every token"),
    Variant(
        "hp_rlvr:unnormalised",
        "hp_rlvr",
        (("normalise_weights", "false"),),
        "w = d (no normalisation)",
    ),
    Variant(
        "hp_rlvr:action_tokens",
        "hp_rlvr",
        (("eligible_tokens", "action"),),
        "eligible: command tokens",
    ),
    Variant("hp_rlvr:block_outcome", "hp_rlvr", (("hindsight", "outcome"),), "block: outcome only"),
    Variant("hp_rlvr:block_feedback", "hp_rlvr", (("hindsight", "feedback"),), "block: + feedback"),
    Variant(
        "hp_rlvr:block_final_action",
        "hp_rlvr",
        (("hindsight", "final_action"),),
        "block: + final action",
    ),
    Variant(
        "hp_rlvr:block_final", "hp_rlvr", (("hindsight", "final"),), "block: + final observation"
    ),
    Variant(
        "hp_rlvr:after_task",
        "hp_rlvr",
        (("hindsight_position", "after_task"),),
        "block after the task line",
    ),
    Variant(
        "hp_rlvr:after_instruction",
        "hp_rlvr",
        (("hindsight_position", "after_instruction"),),
        "block after the instruction",
    ),
    Variant(
        "hp_rlvr:action_tokens+unnormalised",
        "hp_rlvr",
        (("eligible_tokens", "action"), ("normalise_weights", "false")),
        "command tokens, w = d",
    ),
)
VARIANTS_BY_NAME = {variant.name: variant for variant in VARIANTS}
# Not a module: the reference row every table starts with (credit = the step's index).
POSITION = Variant("position", "-", (), "reference: credit = step index t (later = more)")
