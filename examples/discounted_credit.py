"""A user's credit module kept outside creditgym, for `creditgym compare`
(docs/extending.md, "Comparing your module with the study's verdicts").

    creditgym compare --credit examples.discounted_credit:DiscountedGroupReturn

Group-relative return, discounted by each step's distance from the end: the step t of a
trajectory of T steps gets gamma^(T - 1 - t) (R - mean_g R), R its return and mean_g over
the rollouts of its task in the batch (GRPO's group baseline without the division by the
spread, Shao et al. 2024, arXiv 2402.03300; the discount of REINFORCE's return-to-go,
Williams 1992). Early steps get less of the outcome than late ones: a guess that credit
lies near the end, which the study's instruments test (KeyDoor's key lies at the start).
"""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditModuleBase, CreditOutput, broadcast_to_tokens
from creditgym.credit.options import doc


@dataclass(frozen=True)
class DiscountedGroupReturnOptions:
    """The options of `DiscountedGroupReturn` (credit/options.py)."""

    gamma: float = field(default=0.9, metadata=doc("discount per step from the end, in [0, 1]"))

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")


class DiscountedGroupReturn(CreditModuleBase):
    """Step credit gamma^(T - 1 - t) (R - mean of R over the trajectory's group)."""

    name = "discounted_group_return"
    reads = frozenset({"return"})  # credit.base.READS: only the trajectory's return
    Options = DiscountedGroupReturnOptions

    def __init__(self, options: DiscountedGroupReturnOptions | None = None) -> None:
        self.options = DiscountedGroupReturnOptions() if options is None else options

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        returns = defaultdict(list)
        for trajectory in trajectories:
            returns[trajectory.group_id].append(trajectory.total_return)
        steps = []
        for trajectory in trajectories:
            centred = trajectory.total_return - float(np.mean(returns[trajectory.group_id]))
            distance = np.arange(trajectory.length - 1, -1, -1, dtype=np.float64)
            steps.append((centred * self.options.gamma**distance).astype(np.float32))
        return CreditOutput(steps, broadcast_to_tokens(trajectories, steps))
