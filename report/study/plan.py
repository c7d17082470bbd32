"""A study's plan from a pilot (`creditgym study --plan`, docs/study_plan.md): per
confirmatory pair the seeds for a 95 % half-width of 10 and of 5 points, their cost, and the
BCa resamples whose ends are stable to 0.1 point."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from creditgym.report import stats
from creditgym.report.study.comparisons import (
    BASELINE,
    EQUIVALENCE_MARGIN,
    MIN_SEEDS_FOR_VERDICT,
    confirmatory,
)
from creditgym.report.study.summary import value_text
from creditgym.report.tables import markdown_table

# The half-widths a plan sizes seeds for: the equivalence margin, and half of it.
PLAN_HALF_WIDTHS = (EQUIVALENCE_MARGIN, EQUIVALENCE_MARGIN / 2)

# The endpoints a plan sizes seeds for (runs.csv's columns).
PLAN_ENDPOINTS = {"final_success": "final", "auc": "AUC"}

# BCa ends must move by at most this between bootstrap seeds (0.1 point), and the
# resamples at which the plan measures how much they do (and the seeds it measures over).
BCA_END_TARGET = 0.001

BCA_PILOT_REPS = 2000

BCA_REPEATS = 8


def plan_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """Per confirmatory pair of a pilot (a registered module in its default form against
    `BASELINE` on one task and channel, over the seeds both ran) and endpoint: the SD of
    the per-seed differences, the rows' correlation over the seeds, and the seeds a 95 %
    Student-t half-width of each of `PLAN_HALF_WIDTHS` needs, from the SD and from its
    80 % upper confidence limit (`stats.seeds_for_half_width`, `stats.sd_upper_limit`)."""
    trained = frame[~frame.oracle]
    lines = []
    for (task, channel), rows in trained.groupby(["task", "channel"], sort=False):
        forms = set(rows.form)
        if BASELINE not in forms:
            continue
        base = rows[rows.form == BASELINE].set_index("seed")
        for form in sorted(forms - {BASELINE}):
            if not confirmatory(form, BASELINE):
                continue
            other = rows[rows.form == form].set_index("seed")
            seeds = sorted(set(base.index) & set(other.index))
            if len(seeds) < MIN_SEEDS_FOR_VERDICT:
                continue
            for column, endpoint in PLAN_ENDPOINTS.items():
                x = other.loc[seeds, column].to_numpy(float)
                y = base.loc[seeds, column].to_numpy(float)
                sd = float(np.std(x - y, ddof=1))
                upper = stats.sd_upper_limit(sd, len(seeds))
                line = {
                    "env": rows.env.iloc[0],
                    "task": task,
                    "channel": channel,
                    "x": form,
                    "endpoint": endpoint,
                    "pilot_seeds": len(seeds),
                    "difference": float(np.mean(x - y)),
                    "sd_difference": sd,
                    "correlation": stats.row_correlation(x[:, None], y[:, None]),
                }
                for width in PLAN_HALF_WIDTHS:
                    points = round(100 * width)
                    line[f"seeds_{points}"] = stats.seeds_for_half_width(sd, width)
                    line[f"seeds_{points}_upper"] = stats.seeds_for_half_width(upper, width)
                lines.append(line)
    return pd.DataFrame(lines)


def plan_costs(frame: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per task and channel: the seeds the plan needs (the most any of its pairs needs
    over both endpoints, for each half-width, and never fewer than the pilot ran: a pilot
    SD of 0 at a ceiling sizes nothing) and what they cost, the pilot's median training
    seconds per run of each row (the baseline and the compared modules) times the seeds,
    in run-hours."""
    lines = []
    for (task, channel), group in pairs.groupby(["task", "channel"], sort=False):
        rows = frame[(frame.task == task) & (frame.channel == channel) & ~frame.oracle]
        forms = [BASELINE, *sorted(set(group.x))]
        seconds = sum(float(rows[rows.form == form].train_seconds.median()) for form in forms)
        line = {"task": task, "channel": channel, "rows": len(forms)}
        for width in PLAN_HALF_WIDTHS:
            points = round(100 * width)
            seeds = int(max(group[f"seeds_{points}"].max(), group.pilot_seeds.max()))
            line[f"seeds_{points}"] = seeds
            line[f"hours_{points}"] = seeds * seconds / 3600
        lines.append(line)
    return pd.DataFrame(lines)


def bca_stability(frame: pd.DataFrame) -> dict[str, Any]:
    """The Monte-Carlo error of BCa's ends (`stats.bca_end_error`) at `BCA_PILOT_REPS`
    resamples on every trained cell of the pilot (task x method, each endpoint), its
    largest, the resamples that bring that to `BCA_END_TARGET`
    (`stats.reps_for_end_error`), and the largest error measured again at them."""
    cells = [
        (column, rows[column].to_numpy(float)[:, None])
        for (_task, _method), rows in frame[~frame.oracle].groupby(["task", "method"])
        for column in PLAN_ENDPOINTS
        if len(rows) >= MIN_SEEDS_FOR_VERDICT
    ]
    errors = [
        stats.bca_end_error(stats.mean_of_tasks, scores, BCA_PILOT_REPS, BCA_REPEATS)
        for _, scores in cells
    ]
    worst = int(np.argmax(errors))
    reps = stats.reps_for_end_error(errors[worst], BCA_PILOT_REPS, BCA_END_TARGET)
    checked = stats.bca_end_error(stats.mean_of_tasks, cells[worst][1], reps, BCA_REPEATS)
    return {"cells": len(cells), "error": errors[worst], "reps": reps, "checked": checked}


def plan_markdown(pairs: pd.DataFrame, costs: pd.DataFrame, bca: Mapping[str, Any]) -> str:
    """The plan's tables (docs/study_plan.md quotes them)."""
    widths = [round(100 * w) for w in PLAN_HALF_WIDTHS]
    header = ["env", "task", "channel", "X vs grpo", "endpoint", "seeds", "mean X − grpo"]
    header += ["SD of differences", "r"]
    header += [f"seeds ±{w} (SD's 80 % UCL)" for w in widths]
    body = [
        [
            row.env,
            row.task,
            row.channel,
            row.x,
            row.endpoint,
            str(row.pilot_seeds),
            f"{100 * row.difference:+.1f}",
            f"{100 * row.sd_difference:.1f}",
            value_text(row.correlation, 2) if math.isfinite(row.correlation) else "–",
            *(f"{getattr(row, f'seeds_{w}')} ({getattr(row, f'seeds_{w}_upper')})" for w in widths),
        ]
        for row in pairs.itertuples(index=False)
    ]
    cost_header = ["task", "channel", "rows"]
    cost_header += [c for w in widths for c in (f"seeds ±{w}", f"run-hours ±{w}")]
    cost_body = [
        [
            row.task,
            row.channel,
            str(row.rows),
            *(
                c
                for w in widths
                for c in (str(getattr(row, f"seeds_{w}")), f"{getattr(row, f'hours_{w}'):.1f}")
            ),
        ]
        for row in costs.itertuples(index=False)
    ]
    total = {w: costs[f"hours_{w}"].sum() for w in widths}
    return "\n".join(
        [
            "Per confirmatory pair and endpoint (differences and SD in points; seeds for a "
            "95 % Student-t half-width of the paired mean difference, from the SD and, in "
            "brackets, from its 80 % upper confidence limit):",
            "",
            markdown_table(header, body),
            "",
            "Per setting, the seeds the plan needs (the most over its pairs and both "
            "endpoints, at least the pilot's) and their cost at the pilot's median training "
            "seconds per run (one run at a time, the engine the pilot ran):",
            "",
            markdown_table(cost_header, cost_body),
            "",
            *(f"Total at ±{w} points: {total[w]:.1f} run-hours." for w in widths),
            "",
            f"BCa: over the pilot's {bca['cells']} cells (task x row x endpoint) the ends "
            f"move by at most {100 * bca['error']:.2f} points between bootstrap seeds at "
            f"{BCA_PILOT_REPS} resamples; {bca['reps']} resamples bring that to "
            f"{100 * BCA_END_TARGET:.1f} point (measured again there: "
            f"{100 * bca['checked']:.2f}).",
        ]
    )
