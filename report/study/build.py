"""A study's report from its run folders: runs.csv, study.md and the figures, or
calibration.md (the modules of report/study/, called in order)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from creditgym.cli import UsageError
from creditgym.report import records
from creditgym.report.study.calibration import calibration_markdown, calibration_table
from creditgym.report.study.comparisons import (
    ceiling_pairs,
    exact_pairs,
    horizon_trends,
    improvement_pairs,
)
from creditgym.report.study.figures import curve_figure, horizon_figure, zero_variance_figure
from creditgym.report.study.markdown import markdown, precision_sentence, provenance
from creditgym.report.study.rows import baselines, runs_table, type_success
from creditgym.report.study.summary import task_summary


def build(
    runs_dir: Path, out: Path, reps: int, config: Path | None, calibration: bool = False
) -> pd.DataFrame:
    """Write the report of the run folders under `runs_dir` into `out`: runs.csv, then
    study.md and the figures, or calibration.md (`calibration`); `config` is the sweep
    config named in the header. Returns runs.csv's frame.

    Raises:
        UsageError: no finished training run with a learning curve, or (`calibration`) no
            oracle run.
    """
    runs = records.load_runs(runs_dir)
    frame = runs_table(runs)
    summary = task_summary(frame, reps)
    header = provenance(runs_dir, out, config, calibration)
    header += " " + precision_sentence(frame)
    if calibration:
        table = calibration_table(frame, summary, type_success(runs, frame))
        if table.empty:
            raise UsageError(f"no oracle run in {runs_dir}: nothing to calibrate against")
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "runs.csv", index=False)
        (out / "calibration.md").write_text(calibration_markdown(table, header), encoding="utf-8")
        return frame
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "runs.csv", index=False)
    pairs = improvement_pairs(frame, "final_success", reps)
    ceilings = ceiling_pairs(frame, "final_success", reps)
    formulas = exact_pairs(frame, "final_success", reps)
    trends = horizon_trends(frame)
    report = markdown(
        frame,
        summary,
        pairs,
        ceilings,
        formulas,
        trends,
        baselines(runs),
        header,
        type_success(runs, frame),
    )
    (out / "study.md").write_text(report, encoding="utf-8")
    horizon_figure(frame, summary, out / "credit_vs_horizon.png")
    curve_figure(runs, frame, "rollouts", out / "learning_curves.png")
    curve_figure(runs, frame, "train_seconds", out / "learning_curves_wallclock.png")
    zero_variance_figure(frame, out / "zero_variance_groups.png")
    return frame
