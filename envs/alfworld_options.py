"""ALFWorld-v0's options: what a run may set with `--env-options` (`EnvInfo.options`).

Beside envs/alfworld/ rather than in it: importing any module of that package imports the
optional `alfworld` (envs/alfworld/__init__.py), and `import creditgym.envs`, which
registers these options, must not (tests/test_optional_imports.py).

The split is an evaluation split's (`EnvInfo.eval_splits`), the expert's plan the expert's
(`EnvInfo.expert_kwargs`); the generated set's sizes, task types and generation workers
are set from Python only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from creditgym.envs.options import EnvOptions, doc


@dataclass(frozen=True)
class ALFWorldOptions(EnvOptions):
    """The options of `creditgym/ALFWorld-v0` (envs/alfworld/env.py has their effects)."""

    data_dir: str | None = field(
        default=None,
        metadata=doc("a folder holding json_2.1.1/ (none: $ALFWORLD_DATA, else the generated set)"),
    )
    # envs/alfworld/data.py's DEFAULT_SEED reads this default.
    generated_seed: int = field(default=0, metadata=doc("seed of the generated default set"))
    num_games: int = field(default=0, metadata=doc("keep only the first N selected games (0: all)"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_games < 0:
            raise ValueError(f"num_games must be >= 0, got {self.num_games}")
