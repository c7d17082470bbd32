"""calibration.md: per setting the oracle's final success with its interval against
`CALIBRATION_BAR`, success per task type (Umbrella's forecast), and GRPO on the same
channel beside it (docs/instruments.md, "Calibration")."""

from __future__ import annotations

import pandas as pd

from creditgym.report import stats
from creditgym.report.study.comparisons import BASELINE

# An instrument setting is calibrated when the oracle (credit/oracle.py: the exact advantage
# of the current policy) reaches this final success within the study's budget: below it,
# the setting measures what the policy and budget cannot learn, not credit assignment.
CALIBRATION_BAR = 0.8


def calibration_table(
    frame: pd.DataFrame, summary: pd.DataFrame, by_type: pd.DataFrame
) -> pd.DataFrame:
    """Per task and oracle row (credit.base.is_oracle): its final success with the headline
    interval, the verdict against `CALIBRATION_BAR`, its success per task type, and GRPO on
    the same reward channel (None where the folder has no such row).

    Verdict: "passes" when the interval's low end is at or above the bar; "passes on the
    mean" when only the mean is (few seeds: the interval reaches below); "fails" when the
    interval's high end is below it; else "below on the mean". One seed has no interval:
    its verdict is the mean's."""
    lines = []
    cells = summary.set_index(["task", "method"])
    oracle_rows = frame[frame.oracle][["task", "method", "channel", "steps", "learning_rate"]]
    for task, method, channel, steps, rate in oracle_rows.drop_duplicates().itertuples(index=False):
        mean = cells.loc[(task, method), "final_success_mean"]
        seeds = int(cells.loc[(task, method), "seeds"])
        if seeds > 1 and mean.low >= CALIBRATION_BAR:
            verdict = "passes"
        elif mean.value >= CALIBRATION_BAR:
            verdict = "passes on the mean"
        elif seeds > 1 and mean.high < CALIBRATION_BAR:
            verdict = "fails"
        else:
            verdict = "below on the mean"
        # GRPO on the same task, channel and budget.
        same = frame[
            (frame.task == task)
            & (frame.form == BASELINE)
            & (frame.channel == channel)
            & (frame.steps == steps)
            & ((frame.learning_rate == rate) | (frame.learning_rate.isna() & pd.isna(rate)))
        ]
        grpo = same.method.iloc[0] if not same.empty else None
        types = by_type[(by_type.task == task) & (by_type.method == method)]
        lines.append(
            {
                "task": task,
                "method": method,
                "seeds": seeds,
                "final_success": mean,
                "verdict": verdict,
                "by_type": types.groupby("type").success.mean().to_dict(),
                "baseline": cells.loc[(task, grpo), "final_success_mean"]
                if (task, grpo) in cells.index
                else None,
                "baseline_seeds": int(cells.loc[(task, grpo), "seeds"])
                if (task, grpo) in cells.index
                else 0,
            }
        )
    return pd.DataFrame(lines)


def _score(mean: stats.Interval, seeds: int) -> str:
    """A mean success in percent with its interval; one seed has none."""
    return mean.text(100) if seeds > 1 else f"{100 * mean.value:.1f} (one seed)"


def calibration_markdown(table: pd.DataFrame, header: str) -> str:
    """calibration.md: one line per setting and oracle row."""
    bar = f"{100 * CALIBRATION_BAR:.0f}"
    lines = [
        "# Calibration of the instruments",
        "",
        f"{header} A setting is calibrated when its oracle (credit that reads ground truth: "
        "`oracle`, the exact advantage of the current policy on the run's channel; on "
        "SysDiag, which has no exact MDP, `rule_based`, which reads the key-step labels) "
        f"reaches {bar} % final success within the study's budget. Final success: held-out "
        "evaluation after training, mean over seeds with the 95 % interval of "
        "`report/stats.py` (`mean_estimate`: the hull of BCa and Student-t, clipped to "
        "[0, 100]; at two seeds it is wide). "
        'Verdict: "passes" when the interval\'s low end is at or above '
        f'{bar} %, "passes on the mean" when only the mean is, "fails" when the '
        'interval\'s high end is below it, else "below on the mean". By type: final success '
        "per task type "
        "(Umbrella's forecast), mean over seeds. GRPO: the same setting, channel and budget.",
        "",
        f"| setting | oracle row | seeds | final success % (mean [95 % CI]) | ≥ {bar} %? | "
        "by type % | grpo seeds | grpo final success % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table.itertuples(index=False):
        types = " / ".join(f"{kind} {100 * value:.0f}" for kind, value in row.by_type.items())
        baseline = _score(row.baseline, row.baseline_seeds) if row.baseline is not None else "–"
        lines.append(
            f"| {row.task} | {row.method} | {row.seeds} | "
            f"{_score(row.final_success, row.seeds)} | "
            f"{row.verdict} | {types or '–'} | {row.baseline_seeds or '–'} | {baseline} |"
        )
    lines.append("")
    return "\n".join(lines)
