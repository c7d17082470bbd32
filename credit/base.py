"""The credit-module contract.

A credit module turns a batch of trajectories with sparse rewards into dense advantages:

    module(trajectories) -> CreditOutput

Contract (checked for every registered module by tests/test_credit_properties.py):
- `step_advantages[i]` has shape [T_i] (one value per step of trajectory i);
- `token_advantages[i][t]` has one value per action token of step t (shape [A_{i,t}]);
  `TokenBatch.scatter` places them into the trainer's [N_rows, L] layout, so they are
  exactly zero off the action mask by construction;
- all values float32 and finite; empty and one-step trajectories are valid input;
- permuting the input trajectories permutes the output the same way.
A module that needs a model (HCAPO, HP-RLVR) receives it in its constructor. A module
with state across batches (HP-RLVR's reward baseline) exposes `state_dict` /
`load_state_dict` so trainers can checkpoint it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from agents.trajectory import Trajectory


@dataclass(frozen=True)
class CreditOutput:
    """Advantages for a batch of trajectories.

    Attributes:
        step_advantages: per trajectory, float32 array of shape [T_i].
        token_advantages: per trajectory, per step, float32 array of shape [A_{i,t}].
        metrics: scalar diagnostics (e.g. `frac_reward_zero_std`), stable names.
    """

    step_advantages: list[np.ndarray]
    token_advantages: list[list[np.ndarray]]
    metrics: Mapping[str, float] = field(default_factory=dict)


@runtime_checkable
class CreditModule(Protocol):
    """A callable from trajectories to advantages (see module docstring)."""

    name: str

    def __call__(self, trajectories: Sequence[Trajectory]) -> CreditOutput: ...


def broadcast_to_tokens(
    trajectories: Sequence[Trajectory], step_advantages: Sequence[np.ndarray]
) -> list[list[np.ndarray]]:
    """Give every action token of step t the advantage of step t (GRPO-style broadcast)."""
    return [
        [
            np.full(len(step.action_token_ids), float(values[t]), dtype=np.float32)
            for t, step in enumerate(traj.steps)
        ]
        for traj, values in zip(trajectories, step_advantages, strict=True)
    ]
