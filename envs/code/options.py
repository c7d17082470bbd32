"""CodeExec-v1's options: what a run may set with `--env-options` (`EnvInfo.options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from creditgym.envs.options import EnvOptions, doc


@dataclass(frozen=True)
class CodeExecOptions(EnvOptions):
    """The options of `creditgym/CodeExec-v1` (envs/code/env.py has their effects)."""

    tasks_path: str | None = field(
        default=None,
        metadata=doc("JSONL task file in HumanEval's format (none: HumanEval's 164 tasks)"),
    )
    max_submissions: int = field(
        default=3, metadata=doc("failed submissions allowed before the episode ends (>= 1)")
    )
    max_output_chars: int = field(
        default=2000,
        metadata=doc("characters of each tool output shown, head and tail kept (>= 100)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_submissions < 1 or self.max_output_chars < 100:
            raise ValueError(
                "need max_submissions >= 1 and max_output_chars >= 100, got "
                f"{self.max_submissions}, {self.max_output_chars}"
            )
