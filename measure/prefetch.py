"""Score every view a set of modules will ask for, once, before they compute credit.

An evaluation scores many modules (or many options of one) on one fixed pool of
trajectories with weights that never change, so each distinct teacher-forced view is
worth scoring once: `prefetch_modules` collects every step's causal view and each
hindsight module's view of it and hands them to the scoring engine's `prefetch`
(`models.scoring`: the prompt prefix a step's views share runs once), which fills a
`models.scoring.ScoreMemo`; modules built with that memo (`CreditContext.score_memo`)
then compute from memo hits alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.views import causal_view
from creditgym.models.registry import LoadedModel
from creditgym.models.scoring import DEFAULT_MEMORY_BUDGET_BYTES, ScoreMemo, prefetch


def prefetch_modules(
    memo: ScoreMemo,
    loaded: LoadedModel,
    modules: Sequence[object],
    trajectories: Sequence[Trajectory],
    history_len: int,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
) -> int:
    """`prefetch` every step's causal view and each hindsight module's view of it.

    `modules` may mix kinds: those with `hindsight_view_of(trajectory, t)` (HCAPO,
    HP-RLVR: `credit.hindsight.HindsightScorer`) contribute their views, the others
    (group modules, a plug-in that scores its own way) nothing.
    Afterwards the modules, built with `memo` (`CreditContext.score_memo`), compute their
    credit on these trajectories from memo hits alone. Identical views (rollouts that
    repeated each other) are scored once. Returns the number of distinct views in `memo`.
    """
    hindsight_modules = [m for m in modules if hasattr(m, "hindsight_view_of")]
    if not hindsight_modules:
        return len(memo.logprobs)
    steps = []
    for trajectory in trajectories:
        for t in range(trajectory.length):
            causal = causal_view(loaded.tokenizer, trajectory, t, history_len)
            views = [m.hindsight_view_of(trajectory, t) for m in hindsight_modules]
            steps.append((causal, list(dict.fromkeys(views))))
    prefetch(memo, loaded, steps, memory_budget_bytes)
    return len(memo.logprobs)
