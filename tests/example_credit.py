"""The README's third-party credit module, run by tests/test_credit_contract.py through
`python -m benchmarks.run --credit tests.example_credit:ReturnToGo`."""

import numpy as np

from creditgym.credit.base import CreditModuleBase, CreditOutput, broadcast_to_tokens
from creditgym.credit.gigpo import discounted_returns


class ReturnToGo(CreditModuleBase):
    """Step credit G_t - b: discounted return-to-go (gamma 0.95) minus a running mean b of
    returns (REINFORCE with a baseline, Williams 1992); needs no group, so G = 1."""

    name = "return_to_go"
    reads = frozenset({"return", "step_rewards"})
    default_group_size = 1

    def __init__(self) -> None:
        self.baseline = 0.0

    def compute(self, trajectories):
        rewards = [[step.reward for step in t.steps] for t in trajectories]
        steps = [(discounted_returns(r, 0.95) - self.baseline).astype(np.float32) for r in rewards]
        if trajectories:  # moved after the credit, so a batch is not judged by itself
            returns = [t.total_return for t in trajectories]
            self.baseline = 0.9 * self.baseline + 0.1 * float(np.mean(returns))
        return CreditOutput(steps, broadcast_to_tokens(trajectories, steps))

    def state_dict(self):  # saved in every checkpoint, restored on resume
        return {"baseline": self.baseline}

    def load_state_dict(self, state):
        self.baseline = float(state["baseline"])
