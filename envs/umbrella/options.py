"""Umbrella-v0's options: what a run may set with `--env-options` (`EnvInfo.options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from creditgym.envs.options import EnvOptions, doc
from creditgym.envs.umbrella.dynamics import FACT_POOL


# The field order is the order of the options in a run's name and identity: the order the
# committed runs spelled them in (`length=1 forecast_per_replica=true`).
@dataclass(frozen=True)
class UmbrellaOptions(EnvOptions):
    """The options of `creditgym/Umbrella-v0` (envs/umbrella/env.py has their effects)."""

    length: int = field(default=10, metadata=doc("steps of the walk L (>= 1)"))
    num_distractors: int = field(
        default=2, metadata=doc(f"random facts shown every step (0 to {len(FACT_POOL)})")
    )
    forecast_per_replica: bool = field(
        default=False,
        metadata=doc("each of a group's G rollouts draws its own forecast (else one per task)"),
    )
    forecast_visible: bool = field(
        default=False, metadata=doc("every observation shows the forecast, not only home's")
    )
    verdict_feedback: bool = field(
        default=True,
        metadata=doc("the final feedback states the verdict (false: only what was seen)"),
    )
    causal_feedback: bool = field(
        default=False,
        metadata=doc("the final feedback says the first choice decided (needs the verdict)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.length < 1:
            raise ValueError(f"length must be a positive integer, got {self.length!r}")
        if not 0 <= self.num_distractors <= len(FACT_POOL):
            raise ValueError(
                f"num_distractors must be an integer in [0, {len(FACT_POOL)}], got "
                f"{self.num_distractors!r}"
            )
        if self.causal_feedback and not self.verdict_feedback:
            raise ValueError("causal_feedback states the verdict: it needs verdict_feedback=true")
