"""The study report from a study's run folders: the library of `creditgym study`
(benchmarks/study.py), one module per concern, in the order a report is built.

- `rows`: runs.csv, one line per trained run: task, method, seed, final success, area under
  the learning curve, rollouts and training seconds to reach 50 % / 80 % success, the
  zero-gradient fraction and the zero-variance-group fraction with its p^G + (1 - p)^G
  prediction.
- `summary`: the table of statistics of one method's seeds on a task (`STATISTICS`: mean and
  interquartile mean of final success and of the curve's area with 95 % intervals, runs
  reaching 50 / 80 % and the median rollouts to it); a new statistic is one entry.
- `comparisons`: every pair of methods per env with its tests and verdict, the oracles
  against the baseline, the exact-hindsight formulas against each other, the trend over
  each instrument's horizon.
- `figures`: credit against the horizon, learning curves, zero-variance groups.
- `calibration`: calibration.md, each oracle row against the bar.
- `markdown`: study.md.
- `plan`: a study's seeds and cost from a pilot (`--plan`).
- `build`: reads the run folders, writes runs.csv, study.md (or calibration.md) and the
  figures.
"""
