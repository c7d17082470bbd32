"""Leaderboard from run folders: `creditgym leaderboard [--runs FOLDER]`.

Reads the run folders under `--runs` (default `results/runs/`, the committed reference set)
and writes `leaderboard.md`, `.csv`, `.html` and `plots/` into `--out` (default: the folder
above `--runs`), then prints each table. What the tables hold: report/leaderboard.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from creditgym.benchmarks.cli import exit_on_usage_error, parse_arguments, prog_of
from creditgym.report.leaderboard import (
    ORACLE_NOTE,
    section_table,
    section_title,
    source_text,
    write_leaderboard,
)


@dataclass(frozen=True)
class LeaderboardConfig:
    """Build the leaderboard tables and plots from one set of run folders."""

    runs: Path = Path("results/runs")
    """Folder holding the run folders: the committed reference set by default; your own
    runs are in results/local/runs."""
    out: Path | None = None
    """Folder that receives leaderboard.md/.csv/.html and plots/; unset: the folder above
    --runs (results/ for the reference set, results/local/ for results/local/runs)."""


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym leaderboard`."""
    config = parse_arguments(LeaderboardConfig, argv, prog_of("leaderboard"))
    out = config.runs.parent if config.out is None else config.out
    table = write_leaderboard(config.runs, out)
    for section in table.sections:
        shown = section_table(table, section, section.columns, section.methods)
        print(f"\n{section_title(section)}\n{shown}")
        if section.oracles:
            oracles = section_table(table, section, section.columns, section.oracles)
            print(f"{ORACLE_NOTE}\n{oracles}")
    print(f"\nbuilt from the {source_text(table)}; wrote {out / 'leaderboard.md'}, .csv, .html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
