"""KeyDoor-v0's options: what a run may set with `--env-options` (`EnvInfo.options`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from creditgym.envs.keydoor.dynamics import DISTRACTOR_POOL
from creditgym.envs.options import EnvOptions, doc

# Most rooms (keys) an episode may have.
MAX_KEYS = 4


# The field order is the order of the options in a run's name and identity: the order the
# runs and sweep configs spell them in (`delay=4 variance=high num_keys=3 num_objects=6
# verdict_feedback=false`).
@dataclass(frozen=True)
class KeyDoorOptions(EnvOptions):
    """The options of `creditgym/KeyDoor-v0` (envs/keydoor/env.py has their effects)."""

    delay: int = field(
        default=8, metadata=doc("orchard steps between the room and the door (>= 0)")
    )
    # The keys of `APPLE_REWARDS` (tests/test_keydoor.py checks that they agree).
    variance: Literal["low", "high"] = field(
        default="low",
        metadata=doc("apple rewards: low (each pays 1) or high (1 or 10, each with p 1/2)"),
    )
    num_keys: int = field(
        default=1,
        metadata=doc(f"rooms in a row, each with a key the door needs (1 to {MAX_KEYS})"),
    )
    num_objects: int = field(
        default=3,
        metadata=doc(
            f"distractor things on each room's table beside the key (1 to {len(DISTRACTOR_POOL)})"
        ),
    )
    verdict_feedback: bool = field(
        default=True,
        metadata=doc("the final feedback states the verdict (false: only what was seen)"),
    )
    causal_feedback: bool = field(
        default=False,
        metadata=doc("the final feedback names the step that mattered (needs the verdict)"),
    )

    disguised_keys: bool = field(
        default=False,
        metadata=doc(
            "each room's key is an everyday thing (room r's always the same, never named a "
            "key), so which thing opens the door is learnt room by room"
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.delay < 0:
            raise ValueError(f"delay must be a non-negative integer, got {self.delay!r}")
        if not 1 <= self.num_objects <= len(DISTRACTOR_POOL):
            raise ValueError(
                f"num_objects must be an integer in [1, {len(DISTRACTOR_POOL)}], got "
                f"{self.num_objects!r}"
            )
        if not 1 <= self.num_keys <= MAX_KEYS:
            raise ValueError(
                f"num_keys must be an integer in [1, {MAX_KEYS}], got {self.num_keys!r}"
            )
        if self.causal_feedback and not self.verdict_feedback:
            raise ValueError("causal_feedback states the verdict: it needs verdict_feedback=true")
        if self.disguised_keys and self.num_objects > len(DISTRACTOR_POOL) - 1:
            raise ValueError(
                "disguised_keys takes each room's key from the everyday things: num_objects "
                f"must be at most {len(DISTRACTOR_POOL) - 1}, got {self.num_objects!r}"
            )
        if self.causal_feedback and self.disguised_keys:
            raise ValueError("causal_feedback names the key: it needs disguised_keys=false")
        if self.causal_feedback and self.num_keys > 1:
            raise ValueError("causal_feedback names the one room's choice: it needs num_keys=1")
