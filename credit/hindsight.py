"""The hindsight block: what a hindsight view shows the policy about the episode, and where.

HCAPO (Tan et al. 2026, arXiv 2603.08754) injects "s_final" into step t's prompt; HP-RLVR
(Chen et al. 2026, docs/methods.md) shows "the realized future of the trajectory and the
verifier's feedback". Neither paper gives the text, so the block is an option of both
modules, one of `CONTENTS` (each a superset of the one before, except that `future` and
`final` are alternatives):

- `outcome`:      "Outcome: <verdict>."
- `feedback`:     "Outcome: <verdict>. <label>: <the env's final feedback>"
- `final_action`: `feedback` + "\\nFinal action: <the episode's last action>"
                  (HCAPO's block so far, its default)
- `final`:        `feedback` + "\\nFinal observation: <the observation the last action was
                  taken in>" + "\\nFinal action: <last action>" (a trajectory does not keep
                  the observation after the last action; the env's feedback stands for it)
- `future`:       `feedback` + "\\nWhat happened after this action:" and, for the next k
                  steps, "[Result i]: <observation>" / "[Next action i]: <action>"
                  (HP-RLVR's block, its default; the last step shows `feedback` alone)

The verdict is read off the reward channel the module trains on (`credit.base.verdict`:
return > 0), never the env's own flag. Observations are cut to `max_observation_chars`.
The verdict words and the feedback label (`WORDINGS`) default to each module's own
(`hcapo`: "task completed" / "task failed", "Feedback"; `hp_rlvr`: "success" /
"failure", "Verifier feedback"), so each module's default text is the one it always
showed; either module can take the other's (the `wording` option), which makes their
views of one content identical.

Where the block sits (`agents.prompts.HINDSIGHT_POSITIONS`): `before_instruction`
(default: after the current observation and admissible actions, so the step's prompt
up to there is a shared prefix the generation cache can serve), `after_task` (before the
history and the current observation) or `after_instruction` (the last thing before the
response).

`HindsightBlock` holds these options together (what a module shows, and where; built from
a module's options by `HCAPOOptions.block` / `HPRLVROptions.block`), and `HindsightScorer`
is what HCAPO and HP-RLVR share on top of it: the policy they teacher-force, the views
they score, and the scoring engine's caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from transformers import PreTrainedTokenizerBase

from creditgym.agents.prompts import HINDSIGHT_POSITIONS
from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditContext, CreditModuleBase, options_of, verdict
from creditgym.credit.options import check_choices, doc
from creditgym.credit.views import hindsight_view
from creditgym.models.generation_cache import DEFAULT_GENERATION_CACHE_BYTES, GenerationCache
from creditgym.models.registry import LoadedModel
from creditgym.models.scoring import DEFAULT_MEMORY_BUDGET_BYTES, ScoreMemo, TeacherForced

HindsightContent = Literal["outcome", "feedback", "final_action", "final", "future"]
CONTENTS: tuple[str, ...] = get_args(HindsightContent)
# `agents.prompts.HINDSIGHT_POSITIONS` as a type (tests/test_credit_options.py: equal).
HindsightPosition = Literal["after_task", "before_instruction", "after_instruction"]
# The keys of `WORDINGS`.
WordingName = Literal["hcapo", "hp_rlvr"]
Scores = TypeVar("Scores")


@dataclass(frozen=True)
class Wording:
    """A module's words for the verdict line: "Outcome: <success|failure>. <label>: ..."."""

    success: str
    failure: str
    feedback_label: str


HCAPO_WORDING = Wording("task completed", "task failed", "Feedback")
HP_RLVR_WORDING = Wording("success", "failure", "Verifier feedback")
WORDINGS: dict[str, Wording] = {"hcapo": HCAPO_WORDING, "hp_rlvr": HP_RLVR_WORDING}


def hindsight_block(
    content: HindsightContent,
    trajectory: Trajectory,
    t: int,
    wording: Wording,
    future_steps: int = 8,
    max_observation_chars: int = 400,
) -> str:
    """The hindsight text of step t (0-based) of `trajectory` (see module docstring); its
    verdict is the one on the run's reward channel (`credit.base.verdict`)."""
    if content not in CONTENTS:
        raise ValueError(f"hindsight content must be one of {', '.join(CONTENTS)}, got {content!r}")
    words = wording.success if verdict(trajectory) else wording.failure
    if content == "outcome":
        return f"Outcome: {words}."
    lines = [f"Outcome: {words}. {wording.feedback_label}: {trajectory.feedback}"]
    last = trajectory.steps[-1] if trajectory.steps else None
    if content == "final" and last is not None:
        lines.append(f"Final observation: {last.observation[:max_observation_chars]}")
    if content in ("final", "final_action"):
        lines.append(f"Final action: {last.action if last is not None else ''}")
    if content == "future":
        future = trajectory.steps[t + 1 : t + 1 + future_steps]
        if future:
            lines.append("What happened after this action:")
        for offset, step in enumerate(future, start=1):
            lines.append(f"[Result {offset}]: {step.observation[:max_observation_chars]}")
            lines.append(f"[Next action {offset}]: {step.action}")
    return "\n".join(lines)


@dataclass(frozen=True)
class HindsightBlock:
    """Which hindsight prompt a module scores: the options of `credit.hcapo.HCAPO` and
    `credit.hp_rlvr.HPRLVR` of the names in brackets.

    Attributes:
        content: what the block shows, one of `CONTENTS` (`hindsight`).
        wording: verdict words, a key of `WORDINGS` (`wording`).
        position: where it sits, one of `agents.prompts.HINDSIGHT_POSITIONS`
            (`hindsight_position`).
        future_steps: steps of realised future in a `future` block.
        max_observation_chars: characters kept of each observation in the block.
        history_len: steps of history in the rebuilt prompt (the rollout's K).
    """

    content: str
    wording: str
    position: str
    future_steps: int
    max_observation_chars: int
    history_len: int

    def __post_init__(self) -> None:
        if (
            self.content not in CONTENTS
            or self.wording not in WORDINGS
            or self.position not in HINDSIGHT_POSITIONS
        ):
            raise ValueError(
                f"hindsight, wording and hindsight_position must be one of {CONTENTS}, "
                f"{tuple(WORDINGS)}, {HINDSIGHT_POSITIONS}; got {self.content!r}, "
                f"{self.wording!r}, {self.position!r}"
            )

    def text(self, trajectory: Trajectory, t: int) -> str:
        """The hindsight text of step t (`hindsight_block`)."""
        return hindsight_block(
            self.content,
            trajectory,
            t,
            WORDINGS[self.wording],
            self.future_steps,
            self.max_observation_chars,
        )

    def view(
        self, tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int
    ) -> TeacherForced:
        """Step t's hindsight view: its prompt with the block, then its action ids."""
        return hindsight_view(
            tokenizer, trajectory, t, self.text(trajectory, t), self.history_len, self.position
        )


@dataclass(frozen=True)
class BlockOptions:
    """The hindsight block's options that HCAPO and HP-RLVR share (`credit.options`): the
    base of `credit.hcapo.HCAPOOptions` and `credit.hp_rlvr.HPRLVROptions`, each of which
    adds its future-steps option and its `block(history_len)`; HP-RLVR redeclares the
    defaults of `hindsight` and `wording` (`credit.options.doc_of`)."""

    hindsight: HindsightContent = field(
        default="final_action", metadata=doc("what the hindsight block shows (credit/hindsight.py)")
    )
    hindsight_position: HindsightPosition = field(
        default="before_instruction", metadata=doc("where the block sits in the step's prompt")
    )
    wording: WordingName = field(
        default="hcapo", metadata=doc("the block's verdict words (credit/hindsight.py)")
    )
    max_observation_chars: int = field(
        default=400, metadata=doc("characters kept of each observation in the block, >= 0")
    )

    def __post_init__(self) -> None:
        check_choices(self)  # every `Literal` field, the subclass's too
        if self.max_observation_chars < 0:
            raise ValueError(
                f"max_observation_chars must be >= 0, got {self.max_observation_chars}"
            )

    def block(self, history_len: int = 2) -> HindsightBlock:
        """The hindsight prompt these options choose, with `history_len` history steps."""
        raise NotImplementedError  # each module's options say how many future steps


class HindsightScorer(CreditModuleBase):
    """Base of the modules that re-score the policy's own actions under a hindsight prompt.

    Args:
        model: the policy that generated the trajectories (`LoadedModel`).
        options: the module's `Options` (a `BlockOptions`); None: the class's defaults.
        history_len: steps of history in rebuilt prompts (2, as the rollout prompts).
        memory_budget_bytes: scoring chunk budget (`models.scoring`).
        generation_cache_bytes: budget of `generation_cache` (`models.generation_cache`),
            which a trainer hands to its rollout agent: prompts' keys and values and
            responses' hidden states kept from generation, so scoring runs only what
            generation did not; 0 disables it (scoring recomputes everything).
        score_memo: scores kept across calls (`models.scoring.ScoreMemo`), shared by
            modules that score the same views with the same weights (an ablation over
            options that only post-process the scores); None keeps nothing.
    """

    needs_policy = True
    model: LoadedModel
    block: HindsightBlock
    history_len: int
    memory_budget_bytes: int
    generation_cache: GenerationCache | None
    score_memo: ScoreMemo | None

    def __init__(
        self,
        model: LoadedModel,
        options: BlockOptions | None = None,
        history_len: int = 2,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
        generation_cache_bytes: int = DEFAULT_GENERATION_CACHE_BYTES,
        score_memo: ScoreMemo | None = None,
    ) -> None:
        self.options = self.Options() if options is None else options
        self.model = model
        self.block = self.options.block(history_len)
        self.history_len = history_len
        self.memory_budget_bytes = memory_budget_bytes
        self.generation_cache = (
            GenerationCache(model.model, generation_cache_bytes) if generation_cache_bytes else None
        )
        self.score_memo = score_memo

    @classmethod
    def from_context(cls, context: CreditContext) -> HindsightScorer:
        """Scores with `context.policy`, prompts rebuilt with its history length, its memo,
        and the options the run names (`credit.base.options_of`)."""
        return cls(
            context.policy,
            options_of(cls, context),
            history_len=context.history_len,
            memory_budget_bytes=context.memory_budget_bytes,
            generation_cache_bytes=context.generation_cache_bytes,
            score_memo=context.score_memo,
        )

    def score(self, scorer: Callable[..., Scores], *views: Sequence[Any]) -> Scores:
        """`scorer(model, *views, memory budget, generation cache, memo)`, a function of
        `models.scoring`; the generation cache is cleared after, whether or not scoring
        succeeded (this batch's prompts are used up: free them before the update)."""
        try:
            return scorer(
                self.model, *views, self.memory_budget_bytes, self.generation_cache, self.score_memo
            )
        finally:
            if self.generation_cache is not None:
                self.generation_cache.clear()

    def hindsight_text(self, trajectory: Trajectory, t: int) -> str:
        """The hindsight block of step t, as the options choose it."""
        return self.block.text(trajectory, t)

    def hindsight_view_of(self, trajectory: Trajectory, t: int) -> TeacherForced:
        """The view scored for step t: its prompt with the hindsight block."""
        return self.block.view(self.model.tokenizer, trajectory, t)
