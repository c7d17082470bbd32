"""Rule-based hindsight credit (docs/methods.md), generalised through labels.

The original rules scored each step after the episode: its own reward, plus a bonus for a
step that revealed a key clue (larger when the episode succeeded), and a penalty for
irrelevant commands (`ls`, `pwd`, `whoami` that revealed nothing). Here the environment's own
ground truth replaces the command strings: `step.key_step` (the env says this step
revealed the root cause / made progress the solution needs) and the step reward. A step
is irrelevant when it is not a key step and the env gave it no positive reward -- the
label-based reading of "revealed nothing". No model, no group: works for G = 1.

credit_t = r_t + (SUCCESS_BONUS if success else FAILURE_BONUS) * key_t
               + IRRELEVANT_PENALTY * [not key_t and r_t <= 0]

with success the verdict on the run's reward channel (`credit.base.verdict`: return > 0).
Reading the env's labels makes it an oracle: listed apart, never ranked with the rest.

The three values are the method's (docs/methods.md), not options: a variant with other
values is a subclass that overrides them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditModuleBase, CreditOutput, broadcast_to_tokens, verdict


class RuleBased(CreditModuleBase):
    """Per-step hindsight rules on the env's `key_step` labels and step rewards.

    Metrics: `frac_key_steps`.
    """

    name = "rule_based"
    # The env's key-step labels: an oracle (`credit.base.is_oracle`).
    reads = frozenset({"return", "step_rewards", "env_labels"})
    # Added to key steps of successful episodes.
    SUCCESS_BONUS = 2.0
    # Added to key steps of failed episodes: finding the clue was right even if the
    # episode failed later.
    FAILURE_BONUS = 1.0
    # Added to non-key steps without positive reward.
    IRRELEVANT_PENALTY = -0.5

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        step_advantages = []
        key_steps = total_steps = 0
        for traj in trajectories:
            bonus = self.SUCCESS_BONUS if verdict(traj) else self.FAILURE_BONUS
            values = np.zeros(traj.length, dtype=np.float32)
            for t, step in enumerate(traj.steps):
                if step.key_step:
                    values[t] = step.reward + bonus
                elif step.reward <= 0:
                    values[t] = step.reward + self.IRRELEVANT_PENALTY
                else:
                    values[t] = step.reward
            key_steps += sum(step.key_step for step in traj.steps)
            total_steps += traj.length
            step_advantages.append(values)
        return CreditOutput(
            step_advantages=step_advantages,
            token_advantages=broadcast_to_tokens(trajectories, step_advantages),
            metrics={"frac_key_steps": key_steps / total_steps if total_steps else 0.0},
        )
