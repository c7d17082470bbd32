"""SysDiag-v0's options: what a run may set with `--env-options` (`EnvInfo.options`); the
fault families are `--faults` (`EnvInfo.task_families`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from creditgym.envs.options import EnvOptions, doc

# What fixing the root cause pays: the most a reboot may pay.
SUCCESS_REWARD = 1.0


@dataclass(frozen=True)
class SysDiagOptions(EnvOptions):
    """The options of `creditgym/SysDiag-v0` (envs/sysdiag/env.py has their effects)."""

    reboot_reward: float = field(
        default=0.3,
        metadata=doc(
            f"what a reboot that clears a transient fault's symptoms pays (0 to {SUCCESS_REWARD})"
        ),
    )
    causal_feedback: bool = field(
        default=False, metadata=doc("the final feedback names the root cause")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.reboot_reward <= SUCCESS_REWARD:
            raise ValueError(
                f"reboot_reward must be a number in [0, {SUCCESS_REWARD}], "
                f"got {self.reboot_reward!r}"
            )
