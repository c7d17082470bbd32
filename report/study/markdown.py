"""study.md: the per-task tables of the statistics (`summary.STATISTICS`), the pairs
with their verdicts, the oracles' ceilings, the exact-hindsight formulas, the horizon
trends and the zero-variance groups."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from creditgym.report.study import summary as statistics
from creditgym.report.study.comparisons import ALPHA, BASELINE, EQUIVALENCE_MARGIN
from creditgym.report.study.summary import value_text

# The row above a task's oracles (credit.base.is_oracle): listed apart, never compared.
ORACLE_HEADING = "*oracles (read ground truth; never ranked):*"


def p_text(value: float) -> str:
    """A p-value: two significant digits below 0.01, else two decimals; "–" for NaN."""
    return "–" if math.isnan(value) else f"{value:.2g}" if value < 0.01 else f"{value:.2f}"


def provenance(source: Path, out: Path, config: Path | None, calibration: bool = False) -> str:
    """The report's first sentence: the command that built it and where its runs came from."""
    command = f"creditgym study --runs {source} --out {out}"
    if config is not None:
        command += f" --config {config}"
    if calibration:
        command += " --calibration"
    origin = f"the sweep `{config}`" if config is not None else f"`{source}`"
    return f"Built by `{command}` from the run folders of {origin}; do not edit by hand."


def precision_sentence(frame: pd.DataFrame) -> str:
    """The arithmetic the runs of `frame` computed in (its `precision` column), said once:
    one precision for all, or each with its count where they differ (`name_budgets` then
    names the rows apart)."""
    counts = frame.precision.fillna("unrecorded").value_counts().sort_index()
    if len(counts) == 1:
        return f"Every run computed in {counts.index[0]} (`--dtype`, resolved)."
    spelled = ", ".join(f"{precision} ({count} runs)" for precision, count in counts.items())
    return (
        f"Runs computed in {spelled} (`--dtype`, resolved): rows of different precision are "
        "named apart and never pooled."
    )


def type_lines(by_type: pd.DataFrame) -> list[str]:
    """A task's final success per task type and method, mean over seeds (none without
    types): a policy stuck on one action (always take the umbrella) wins every episode of
    one type and none of the other, which the overall rate hides."""
    if by_type.empty:
        return []
    table = by_type.groupby(["method", "type"]).success.mean().unstack("type")
    lines = [
        "Final success per task type, % (mean over seeds):",
        "",
        "| method | " + " | ".join(table.columns) + " |",
        "|---|" + "---|" * len(table.columns),
    ]
    for method, row in table.iterrows():
        lines.append(f"| {method} | " + " | ".join(value_text(100 * v, 1) for v in row) + " |")
    return [*lines, ""]


def pair_table(pairs: pd.DataFrame, scope: str = "env") -> list[str]:
    """The markdown table of compared pairs (`compare_pair` rows with their verdicts);
    `scope` heads the first column."""
    margin = f"{100 * EQUIVALENCE_MARGIN:.0f}"
    lines = [
        f"| {scope} | X | Y | tasks | seeds | P(X > Y) [95 % CI] | X - Y, points [95 % CI] | "
        f"p diff | p equiv (±{margin}) | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in pairs.itertuples(index=False):
        difference = row.difference.text(100) if row.difference is not None else "–"
        lines.append(
            f"| {row.env} | {row.x} | {row.y} | {row.tasks} | {row.seeds} | "
            f"{row.p_x_beats_y.text(digits=2)} | {difference} | {p_text(row.p_difference)} | "
            f"{p_text(row.p_equivalence)} | {row.verdict} |"
        )
    return lines


def paired_table(pairs: pd.DataFrame) -> list[str]:
    """The markdown table of `compare_pair`'s seed-by-seed readings."""
    lines = [
        "| env | X | Y | seeds | X - Y seed by seed, points [95 % CI] | r over seeds |",
        "|---|---|---|---|---|---|",
    ]
    for row in pairs.itertuples(index=False):
        paired = row.paired.text(100) if row.paired is not None else "–"
        r = "–" if math.isnan(row.seed_correlation) else f"{row.seed_correlation:.2f}"
        lines.append(f"| {row.env} | {row.x} | {row.y} | {row.seeds} | {paired} | {r} |")
    return lines


def markdown(
    frame: pd.DataFrame,
    summary: pd.DataFrame,
    pairs: pd.DataFrame,
    ceilings: pd.DataFrame,
    formulas: pd.DataFrame,
    trends: pd.DataFrame,
    untrained: Mapping[str, float],
    header: str,
    by_type: pd.DataFrame,
) -> str:
    """study.md."""
    shown = [column for entry in statistics.STATISTICS for column in entry.shown]
    headers = ["method", "seeds", *(column.header for column in shown)]
    lines = [
        "# The reference study",
        "",
        f"{header} Final success: held-out "
        "evaluation after training; AUC: area under the held-out learning curve over rollouts "
        "(1.0 = perfect from the start). Intervals of a mean: 95 % over seeds, the hull of a "
        "BCa bootstrap interval (Efron 1987) and a Student-t interval, clipped to [0, 100] "
        "(each printed in the BCa / t column: at 5 seeds the percentile bootstrap is too "
        "narrow); of the IQM: BCa (Agarwal et al. 2021, arXiv 2108.13264; "
        "`report/stats.py`). Rows train on the env's return unless named `on outcome` "
        "(`--reward-channel`); pairs are compared on one channel only, and oracles (credit "
        'that reads ground truth) are listed apart and never ranked (the section "Oracles '
        f'against {BASELINE}" sets each against {BASELINE}, as an exploratory ceiling).',
        "",
    ]
    for task, rows in summary.groupby("task", sort=False):
        baseline = untrained.get(task)
        lines += [
            f"## {task}",
            "",
            *(
                [f"Untrained policy: {100 * baseline:.1f} % success.", ""]
                if baseline is not None
                else []
            ),
            "| " + " | ".join(headers) + " |",
            "|" + "---|" * len(headers),
        ]
        # Oracles read ground truth: listed after the rest, under their own heading row.
        oracle = rows.method.isin(set(frame.method[frame.oracle]))
        for heading, group in ((None, rows[~oracle]), (ORACLE_HEADING, rows[oracle])):
            if heading is not None and not group.empty:
                lines.append(f"| {heading} |" + " |" * (len(headers) - 1))
            for row in group.itertuples(index=False):
                cells = [row.method, str(row.seeds), *(column.text(row) for column in shown)]
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines += type_lines(by_type[by_type.task == task])
    if not pairs.empty:
        family = int(pairs.confirmatory.sum())
        margin = f"{100 * EQUIVALENCE_MARGIN:.0f}"
        lines += [
            "## Pairwise comparisons (final success), per env over its tasks",
            "",
            "P(X > Y): the chance that a run of X ends with higher held-out success than a "
            "run of Y on the same task, with its stratified percentile-bootstrap 95 % interval "
            "(descriptive: the tests decide). X - Y: the difference of mean final success in "
            "points with its Welch 95 % interval. p diff: a stratified permutation test of "
            "P(X > Y) = 1/2; p equiv: TOST (Schuirmann 1987) that |X - Y| < "
            f"{margin} points, the equivalence margin stated before the re-run. Verdict: "
            f'"better" when p diff < {ALPHA}; else "tie" when p equiv < {ALPHA}; else '
            '"inconclusive" (a difference not shown is not a tie). The confirmatory family, '
            f"every credit module in its default form against {BASELINE} per env ({family} "
            "pairs), carries Holm-adjusted p-values (Holm 1979; differences and equivalences "
            "each a family); every other pair is exploratory: unadjusted, a lead for the next "
            "study, not a finding.",
            "",
            *pair_table(pairs.sort_values("confirmatory", ascending=False, kind="stable")),
            "",
            "### Seed by seed (exploratory)",
            "",
            "The runs of one seed share its random streams (methods of one group size train "
            "on the same tasks), so a pair can also be read seed by seed: X - Y as the mean "
            "of the per-seed differences with its Student-t 95 % interval over the seeds "
            "(n - 1 degrees of freedom), and r, the correlation of the two rows over the "
            "seeds. Where r is high the paired interval is narrower than the Welch interval "
            "above; where it is not, wider. Not part of the verdicts: the analysis above is "
            "the one stated before the runs; this is a lead for a study that states a paired "
            "analysis first.",
            "",
            *paired_table(pairs),
            "",
        ]
    if not ceilings.empty:
        lines += [
            f"## Oracles against {BASELINE}: what credit read off the exact MDP buys",
            "",
            f"Each oracle row against {BASELINE} on the channel both trained on, with the "
            "tests above: the exact advantage shows what perfect credit reaches at the same "
            "rollouts; a hindsight formula fed exact hindsight (`*_exact`, `hca`) shows what "
            "the formula does when the model's read of the outcome is perfect. Exploratory "
            "(unadjusted): a ceiling, not a ranking.",
            "",
            *pair_table(ceilings, scope="env or task"),
            "",
        ]
    if not formulas.empty:
        lines += [
            "## Exact hindsight, formula against formula",
            "",
            "The exact-hindsight rows against each other on the channel both trained on, "
            "with the tests above: HP-RLVR's divergence weights against HCAPO's ratio when "
            "both read the exact hindsight distribution. Exploratory (unadjusted): oracles "
            "both.",
            "",
            *pair_table(formulas, scope="env or task"),
            "",
        ]
    if not trends.empty:
        lines += [
            "## Trend of final success over the horizon",
            "",
            "Jonckheere-Terpstra test (permutation p-value, two-sided) of a monotone trend of "
            "each method's final success over KeyDoor's delay or Umbrella's length; J counts "
            "the (shorter, longer) seed pairs where the longer horizon scored higher (ties one "
            "half), E[J] its mean under no trend. p: Holm-adjusted over the "
            f'{len(trends)} tests of this table. A method "falls with the horizon" only '
            f"where the verdict says so (adjusted p < {ALPHA}).",
            "",
            "| env | method | horizons | seeds | final success % per horizon | J (E[J]) | "
            "p | p (Holm) | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in trends.itertuples(index=False):
            lines.append(
                f"| {row.env} | {row.method} | {', '.join(f'{h:g}' for h in row.levels)} | "
                f"{', '.join(map(str, row.seeds))} | "
                f"{' → '.join(f'{100 * m:.1f}' for m in row.means)} | "
                f"{row.trend.statistic:g} ({row.trend.expected:g}) | {p_text(row.trend.p_value)} | "
                f"{p_text(row.p_holm)} | "
                f"{row.verdict} |"
            )
        lines.append("")
    zero = frame.dropna(subset=["zero_std_groups", "predicted_zero_std"])
    if not zero.empty:
        lines += [
            "## Zero-variance groups: observed against p^G + (1 - p)^G",
            "",
            "| env | method | runs | observed (mean) | predicted (mean) | zero-gradient steps |",
            "|---|---|---|---|---|---|",
        ]
        for (env, method), rows in zero.groupby(["env", "method"]):
            lines.append(
                f"| {env} | {method} | {len(rows)} | {rows.zero_std_groups.mean():.3f} | "
                f"{rows.predicted_zero_std.mean():.3f} | {rows.zero_grad_fraction.mean():.3f} |"
            )
        lines.append("")
    return "\n".join(lines)
