"""Reports: what is derived from run folders, the library the commands of benchmarks/ call.

After `measure/` and `trainers/` in the flow (envs -> models -> agents -> credit -> measure
-> trainers -> report -> benchmarks): it reads run records and the folders before it, and
nothing before it reads it.

- `records`: the run folder's files (one fsynced record per episode), read back and checked;
- `stats`: few-seed statistics (intervals, tests, the probability of improvement), each a
  pure function tested by hand;
- `study`: the study report (runs.csv, the table of statistics, comparisons and verdicts,
  figures, calibration, study.md, a study's plan), one module per concern;
- `leaderboard`: the leaderboard's tables (markdown, csv, html); `plots`: its figures;
- `comparison`: a credit module's verdicts against `grpo` (`creditgym compare`);
- `tables`: markdown tables, written once for every report and command.
"""
