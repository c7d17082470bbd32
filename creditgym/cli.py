"""The `creditgym` console script: `creditgym <command> [args]` runs `python -m
benchmarks.<module> [args]` (the same entry point, the same arguments and exit codes).

    creditgym run --env alfworld --credit hp_rlvr
    creditgym sweep --config benchmarks/configs/study_fair.toml --shard 0/2
    creditgym leaderboard --runs results/runs
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys

# command -> module under creditgym.benchmarks, each with `main(argv) -> int`.
COMMANDS = {
    "run": "run",
    "sweep": "sweep",
    "leaderboard": "leaderboard",
    "study": "study",
    "credit-truth": "credit_truth",
    "credit-quality": "credit_quality",
    "hindsight-ablation": "hindsight_ablation",
    "decomposition": "decomposition",
    "trl-grpo": "trl_grpo",
    "gpu-check": "gpu_check",
}


def usage() -> str:
    return "usage: creditgym {" + ",".join(COMMANDS) + "} [args] (creditgym <command> --help)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        print(f"creditgym: unknown command {command!r}.{hint} {usage()}", file=sys.stderr)
        return 2
    # As `python -m benchmarks.run` does in its __main__ block: tokenizers' thread pool
    # would otherwise warn after the rollout workers fork.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.argv[0] = f"creditgym {command}"  # argparse's prog, for --help and usage lines
    module = importlib.import_module(f"creditgym.benchmarks.{COMMANDS[command]}")
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
