"""Reset and step time of `creditgym/ALFWorld-v0` against alfworld's own `AlfredTWEnv`.

Both play the same games (the committed test set unless --data-dir is given) and the
same commands (each game's stored walkthrough). `AlfredTWEnv` is built as alfworld 0.4.2
builds it for evaluation (`init_env(batch_size=1)`, no expert wrapper), so its reset
loads and translates the game again; ours translates a game once per process.
Targets (docs/performance.md): step overhead under 5 %, reset at least 3x faster.

Usage: python -m creditgym.benchmarks.perf.bench_alfworld [--data-dir DIR] [--rounds 3]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import Stopwatch, machine_state, timed
from creditgym.envs.alfworld.env import ALFWorldEnv

COMMITTED = Path(__file__).resolve().parents[2] / "tests" / "data" / "alfworld"


@dataclass
class BenchArgs:
    """Time ALFWorld-v0 against AlfredTWEnv on the same games and commands."""

    data_dir: Path = COMMITTED
    """Folder holding json_2.1.1/."""
    rounds: int = 3
    """Episodes per game per env."""


def _alfred_config(data_dir: Path) -> dict:
    train = str(data_dir / "json_2.1.1" / "train")
    return {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6],
                "domain_randomization": False, "expert_type": "planner"},
        "dataset": {"data_path": train, "eval_id_data_path": train, "eval_ood_data_path": train,
                    "num_train_games": -1, "num_eval_games": -1},
        "general": {"training_method": "dqn"},
        "rl": {"training": {"max_nb_steps_per_episode": 100}},
    }  # fmt: skip


def main(args: BenchArgs) -> None:
    torch.set_num_threads(1)
    print(machine_state())
    ours = ALFWorldEnv(data_dir=str(args.data_dir))
    theirs_factory = AlfredTWEnv(_alfred_config(args.data_dir), train_eval="train")
    theirs = theirs_factory.init_env(batch_size=1)
    order = {str(Path(p).resolve()): i for i, p in enumerate(theirs_factory.game_files)}
    our_reset, our_step, their_reset, their_step = (Stopwatch() for _ in range(4))
    for game in ours.games:
        for _ in range(args.rounds):
            with our_reset:
                ours.reset(options={"task_id": game.task_id})
            walkthrough = list(ours._engine.translation.walkthrough)
            for command in walkthrough:
                with our_step:
                    ours.step(command)
        # AlfredTWEnv cycles through its game list; reset until it serves this game, and
        # count only that reset.
        target = order[str(game.game_file.resolve())]
        for _ in range(args.rounds):
            while True:
                (_, infos), one_reset = timed(theirs.reset)
                if order[str(Path(infos["extra.gamefile"][0]).resolve())] == target:
                    break
            their_reset.wall_s += one_reset.wall_s
            their_reset.blocks += 1
            for command in walkthrough:
                with their_step:
                    theirs.step([command])
    theirs.close()

    def mean_ms(watch: Stopwatch) -> float:
        return 1e3 * watch.wall_s / watch.blocks

    reset_ratio = mean_ms(their_reset) / mean_ms(our_reset)
    step_overhead = mean_ms(our_step) / mean_ms(their_step) - 1
    print(f"games: {len(ours.games)}, rounds: {args.rounds}, steps timed: {our_step.blocks}")
    print(f"reset  ALFWorld-v0 {mean_ms(our_reset):8.1f} ms   "
          f"AlfredTWEnv {mean_ms(their_reset):8.1f} ms   "
          f"speed-up {reset_ratio:.2f}x (target >= 3x)")  # fmt: skip
    print(f"step   ALFWorld-v0 {mean_ms(our_step):8.1f} ms   "
          f"AlfredTWEnv {mean_ms(their_step):8.1f} ms   "
          f"overhead {100 * step_overhead:+.1f} % (target < 5 %)")  # fmt: skip
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_alfworld"))
