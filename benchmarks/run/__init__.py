"""Train one (env, credit, model) configuration and evaluate it: `creditgym run`.

    creditgym run                                              # defaults, < 15 min on 2 CPU cores
    creditgym run --env alfworld --credit hp_rlvr              # one method on ALFWorld
    creditgym run --model expert --credit none                 # scripted baseline, eval only
    creditgym run --preset paper --device cuda                 # the papers' settings
    creditgym run --preset demo --population 8                 # seeds 0-7 in one process

Each run writes `results/local/runs/<run-name>/` (layout in `report/records.py`); the run
name is derived from the configuration, so the same command finds the same folder and
resumes a killed run without losing or repeating evaluation episodes.

The modules, in the order a run happens:

- `config`: the options (`RunConfig`, the presets), parsed from the command line;
- `build`: names turned into objects (envs, policies, credit modules, trainers), through
  dict registries;
- `plan`: what the options resolve to, resolved once (`resolve` -> `RunPlan`: env, its
  options, step limit, group size, prompt history, dtype, credit options, data, splits,
  seeds); everything below reads the plan and parses nothing;
- `identity`: the plan's run name and leaderboard row;
- `validate`: the checks before any work;
- `train`, `evaluate`, `samples`: the run's three phases;
- `population`: the members, checks and outcomes of `--population`;
- `command`: a run from start to end, and `main`.
"""

from creditgym.benchmarks.run.command import main, run, run_population
from creditgym.benchmarks.run.config import RunConfig, parse_config
from creditgym.benchmarks.run.plan import RunPlan, resolve

__all__ = ["RunConfig", "RunPlan", "main", "parse_config", "resolve", "run", "run_population"]
