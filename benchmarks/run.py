"""Train one (env, credit, model) configuration and evaluate it: `creditgym run`.

    creditgym run                                              # defaults, < 15 min on 2 CPU cores
    creditgym run --env alfworld --credit hp_rlvr              # one method on ALFWorld
    creditgym run --model expert --credit none                 # scripted baseline, eval only
    creditgym run --preset paper --device cuda                 # the papers' settings
    creditgym run --preset demo --population 8                 # seeds 0-7 in one process

Each run writes `results/local/runs/<run-name>/` (layout in `benchmarks/records.py`); the run
name is derived from the configuration, so the same command finds the same folder and
resumes a killed run without losing or repeating evaluation episodes.

This module parses the command line and orchestrates a run, or a population of runs (the
seeds of one configuration in one process, `--population`); each concern has its module:
`run_config` (the options), `run_settings` (what they resolve to), `run_identity` (the run
name and leaderboard row), `run_validate` (checks before any work), `run_build` (names
turned into objects, through dict registries), `run_train`, `run_eval`, `run_samples` and
`run_population` (a population's members, checks and outcomes).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import os
import shlex
import shutil
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from creditgym.agents.atomic import DamagedFileError
from creditgym.agents.models import LoadedModel, vocabulary
from creditgym.benchmarks import common, lock
from creditgym.benchmarks.cli import (
    UsageError,
    exit_on_usage_error,
    lookup,
    parse_arguments,
    prog_of,
)
from creditgym.benchmarks.run_build import SCRIPTED_AGENTS, load_policy, load_trained_policy
from creditgym.benchmarks.run_config import PRESETS, RunConfig
from creditgym.benchmarks.run_eval import (
    evaluate,
    format_summary,
    is_finished,
    missing_episodes,
    summarize,
)
from creditgym.benchmarks.run_identity import (
    method_config,
    method_fields,
    method_label,
    run_identity,
    run_name,
)
from creditgym.benchmarks.run_population import (
    BAD_INPUT_ERRORS,
    MemberOutcome,
    check_population,
    exit_status,
    failed_outcome,
    finished_outcome,
    held_outcome,
    member_configs,
    plan_prefix,
    population_record,
    progress_line,
)
from creditgym.benchmarks.run_samples import write_samples
from creditgym.benchmarks.run_settings import (
    canonical_credit_options,
    eval_splits,
    game_set,
    model_dtype,
    step_limit,
    trains,
)
from creditgym.benchmarks.run_train import train, trainer_configs
from creditgym.benchmarks.run_validate import validate
from creditgym.credit.base import NonFiniteError
from creditgym.report import records

REPO_ROOT = Path(__file__).resolve().parent.parent


# Named, not __name__: run as `python -m benchmarks.run` this module is __main__.
logger = logging.getLogger("benchmarks.run")


def parse_config(argv: Sequence[str] | None = None) -> RunConfig:
    """Parse the command line; `--preset` picks the defaults the other options start from."""
    args = list(sys.argv[1:] if argv is None else argv)
    preset = "default"
    for position, arg in enumerate(args):
        if arg == "--preset" and position + 1 < len(args):
            preset = args[position + 1]
        elif arg.startswith("--preset="):
            preset = arg.split("=", 1)[1]
    overrides = lookup("preset", preset, PRESETS)
    default = dataclasses.replace(RunConfig(), preset=preset, **overrides)
    return parse_arguments(
        RunConfig, args, prog_of("run"), default=default, description=__doc__.split("\n")[0]
    )


def command_line(cfg: RunConfig) -> str:
    """The `creditgym run` command that replays `cfg` (options off their defaults only),
    the same whether the run came from the shell or from a sweep."""
    words = ["creditgym", "run"]
    for spec in dataclasses.fields(RunConfig):
        value = getattr(cfg, spec.name)
        if value == spec.default:
            continue
        flag = "--" + spec.name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, tuple):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return shlex.join(words)


# What `run` (its lock) and `prepare_run_dir` write before any work: a folder holding only
# these is empty.
BOOKKEEPING_FILES = frozenset(
    {records.CONFIG_FILE, records.PROVENANCE_FILE, records.COMMANDS_FILE, lock.RUN_LOCK_FILE}
)


def prepare_run_dir(cfg: RunConfig, population: RunConfig | None = None) -> Path:
    """Create the run folder with config.json and provenance.json (kept on resume).

    `population`: the population `cfg` is a member of (benchmarks/run_population.py),
    whose command commands.txt records and whose seeds a fresh provenance.json names."""
    run_dir = cfg.out / run_name(cfg)
    played = game_set(cfg)
    config = {
        **json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
        "env_id": common.env_id(cfg.env),
        "max_episode_steps": step_limit(cfg),
        # Which data was played (the identity hashes it too).
        "game_set": None if played is None else played.description,
        # The vocabulary of a model whose tokenizer the repository builds (`small`): a
        # resume under another one is refused (`check_vocabulary`).
        "vocabulary": vocabulary(cfg.model),
        "run_name": run_dir.name,
        "identity": run_identity(cfg),
        "method_config": method_config(cfg),
        "method": method_label(cfg),
        **{f"method_{key}": value for key, value in method_fields(cfg).items()},
    }
    # Rewritten on resume: a rerun may extend the evaluation (more episodes, another
    # split), which the name's hash ignores; the latest request is what config.json shows.
    records.atomic_write_json(run_dir / records.CONFIG_FILE, config)
    # Every command that worked in this folder (a resume, a longer evaluation), in order.
    command = command_line(cfg if population is None else population)
    with open(run_dir / records.COMMANDS_FILE, "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {command}\n")
    if not (run_dir / records.PROVENANCE_FILE).exists():
        provenance = records.provenance(REPO_ROOT)
        if population is not None:
            provenance["population"] = population_record(population, command)
        records.atomic_write_json(run_dir / records.PROVENANCE_FILE, provenance)
    return run_dir


# Policies this large take tens of minutes per training step on a CPU (smollm2-135m,
# docs/running.md); `tiny` and `small` take seconds.
SLOW_ON_CPU_PARAMETERS = 50_000_000


def plan_line(cfg: RunConfig, env_id: str, policy: LoadedModel | None) -> str:
    """What the run will do, printed before it starts: model, steps, rollouts, evaluation
    episodes and device, and on a CPU with a large policy that it takes tens of minutes."""
    episodes = cfg.eval_episodes * len(eval_splits(cfg, env_id))
    if trains(cfg):
        settings = trainer_configs(cfg)[cfg.trainer][1]
        rollouts = settings.num_tasks * settings.group_size
        work = (
            f"train {cfg.model} on {env_id} with {cfg.trainer} + {cfg.credit}: "
            f"{records.plural(settings.iterations, 'step')} of {rollouts} rollouts "
            f"(G = {settings.group_size}), then evaluate {records.plural(episodes, 'episode')}"
        )
    else:
        work = f"evaluate {cfg.model} on {env_id}: {records.plural(episodes, 'episode')}"
    line = f"{work}, on {cfg.device}"
    if cfg.dtype == "fast":
        line += f", --dtype fast: {common.describe_precision(model_dtype(cfg))}"
    parameters = 0 if policy is None else policy.model.num_parameters()
    if torch.device(cfg.device).type == "cpu" and parameters >= SLOW_ON_CPU_PARAMETERS:
        line += f"; a {parameters / 1e6:.0f} M-parameter policy on a CPU: expect tens of minutes"
    return line


class IncompleteRunError(RuntimeError):
    """A run whose evaluation lost episodes: it is left unfinished, to be resumed."""


@contextlib.contextmanager
def removed_if_unstarted(run_dir: Path, fresh: bool) -> Iterator[None]:
    """Remove `run_dir` when it is `fresh` (absent before its lock was taken: entered
    inside the lock, so another writer's folder is never removed) and the block fails
    before producing anything (a bad model path): a folder holding only
    BOOKKEEPING_FILES would look like a started run to the leaderboard or a sweep."""
    try:
        yield
    except BaseException:
        if fresh and run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= BOOKKEEPING_FILES:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def run(cfg: RunConfig) -> Path:
    """Validate, train (or resume), evaluate, write samples and the summary; returns the
    run folder."""
    if cfg.population != 1:
        raise UsageError("run() trains one seed; run_population() trains a population")
    validate(cfg)
    # The options as parsed, in their one spelling, from here on: config.json, the
    # replay command and the study's row names show what the run identity hashes.
    cfg = dataclasses.replace(cfg, credit_options=canonical_credit_options(cfg))
    torch.set_num_threads(cfg.threads)
    env_id = common.env_id(cfg.env)
    run_dir = cfg.out / run_name(cfg)
    fresh = not run_dir.exists()
    # One writer per run folder, taken before any work: a second invocation of the same
    # run exits 2 naming this one (benchmarks/lock.py).
    with (
        lock.hold(lock.run_folder_lock(run_dir), str(run_dir)),
        removed_if_unstarted(run_dir, fresh),
    ):
        policy = starting_policy(cfg)
        print(plan_line(cfg, env_id, policy), flush=True)
        return run_in(cfg, env_id, prepare_run_dir(cfg), policy)


def starting_policy(cfg: RunConfig) -> LoadedModel | None:
    """The policy a run starts from (None for a scripted agent)."""
    if cfg.model in SCRIPTED_AGENTS:
        return None
    return load_policy(cfg.model, cfg.device, model_dtype(cfg))


def run_population(cfg: RunConfig, skip_held: bool = False) -> list[MemberOutcome]:
    """Train and evaluate the seeds seed..seed + population - 1 of `cfg` in this process
    (benchmarks/run_population.py), each into the run folder of its single run; returns
    each member's outcome, in seed order. A member that fails is reported in one line
    and the others go on; bad input common to all (an option) stops the population
    before any work, and so does a member's folder that another process holds, unless
    `skip_held` (a sweep's choice: that member is skipped, the others run)."""
    check_population(cfg)
    members = member_configs(cfg)
    for member in members:
        validate(member)
    # The options in their one spelling, as `run` does.
    members = [dataclasses.replace(m, credit_options=canonical_credit_options(m)) for m in members]
    torch.set_num_threads(cfg.threads)
    env_id = common.env_id(cfg.env)
    with contextlib.ExitStack() as held:
        # Every member's folder lock before any work: a population (or single run) covering
        # one of these seeds elsewhere is refused at once, naming its holder.
        fresh, elsewhere = {}, {}
        for member in members:
            run_dir = member.out / run_name(member)
            fresh[member.seed] = not run_dir.exists()
            try:
                held.enter_context(lock.hold(lock.run_folder_lock(run_dir), str(run_dir)))
            except lock.LockHeldError as error:
                if not skip_held:
                    raise
                elsewhere[member.seed] = held_outcome(member.seed, run_dir, error)
                continue
            held.enter_context(removed_if_unstarted(run_dir, fresh[member.seed]))
        # Built once; each member trains a copy, so every member starts from the weights
        # its single run loads (`small` is built from a fixed seed, not the run's).
        policy = starting_policy(cfg)
        print(plan_prefix(cfg) + plan_line(members[0], env_id, policy), flush=True)
        outcomes = []
        for member in members:
            outcome = elsewhere.get(member.seed) or run_member(
                member, cfg, env_id, policy, fresh[member.seed]
            )
            outcomes.append(outcome)
            print(progress_line(cfg, outcomes), flush=True)
    return outcomes


def run_member(
    member: RunConfig,
    population: RunConfig,
    env_id: str,
    policy: LoadedModel | None,
    fresh: bool,
) -> MemberOutcome:
    """One member of `population` (its folder lock held; `fresh`: the folder was absent
    before): skipped when finished, else its single run on a copy of `policy`; a failure
    becomes its outcome, not an error."""
    run_dir = member.out / run_name(member)
    try:
        if not is_finished(member):
            with removed_if_unstarted(run_dir, fresh):
                own_policy = copy.deepcopy(policy)
                run_in(member, env_id, prepare_run_dir(member, population), own_policy)
        return finished_outcome(member.seed, run_dir)
    except Exception as error:
        if not isinstance(error, (*BAD_INPUT_ERRORS, IncompleteRunError)):
            traceback.print_exc()  # a bug: the whole story, then the one line with the others
        return failed_outcome(member.seed, run_dir, error)


def run_in(cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel | None) -> Path:
    """Train (or resume), evaluate, write samples and the summary in `run_dir`."""
    # Every record file as its readers read it, before resuming over it: damage is named
    # (file and line) instead of ending in a done.json a report would count.
    records.check_run_records(run_dir)
    if policy is not None and trains(cfg):
        final_dir = run_dir / "final"
        trained = None
        if (run_dir / records.TRAINING_FILE).exists() and final_dir.is_dir():
            try:
                trained = load_trained_policy(policy, final_dir, cfg.device, model_dtype(cfg))
            # A damaged export (a disk error, a file cut short) fails in whichever reader
            # meets it first (safetensors, json, peft): any of them means unreadable. The
            # last checkpoint holds the same weights, so training resumes there and exports
            # them again.
            except Exception as error:
                logger.warning(
                    "the exported policy %s cannot be loaded (%s: %s); exporting it again "
                    "from the newest checkpoint",
                    final_dir,
                    type(error).__name__,
                    (str(error).splitlines() or [""])[0],
                )
                shutil.rmtree(final_dir)
                # peft wraps the base model in place before it reads the adapter.
                policy = load_policy(cfg.model, cfg.device, model_dtype(cfg))
        policy = trained if trained is not None else train(cfg, env_id, run_dir, policy)
    train_step = len(records.read_metrics(run_dir))
    evaluate(cfg, env_id, run_dir, policy, train_step)
    missing = missing_episodes(cfg, run_dir)
    if missing:  # dropped by a crashed or timed-out env: never summarise a partial set
        requested = cfg.eval_episodes * len(eval_splits(cfg, env_id))
        raise IncompleteRunError(
            f"{len(missing)} of {requested} evaluation episodes were dropped (the log above "
            f"says why); run the same command again to play them ({run_dir})"
        )
    write_samples(cfg, env_id, run_dir, policy)
    requested = {s.name for s in eval_splits(cfg, env_id)}
    episodes = [
        e
        for e in records.read_episodes(run_dir)
        if e.split in requested and e.index < cfg.eval_episodes
    ]
    rows = summarize(episodes)
    records.atomic_write_json(
        run_dir / records.DONE_FILE, {"summary": rows, "train_step": train_step}
    )
    print(format_summary(run_dir.name, method_label(cfg), rows))
    for row in rows:
        if row["truncated_pct"] > 50:
            print(
                f"warning: {row['truncated_pct']:.0f} % of {row['split']} episodes hit the step "
                f"limit T = {step_limit(cfg)} before ending; a longer --max-episode-steps "
                "may be needed to measure success"
            )
    print(f"run folder: {run_dir}")
    return run_dir


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym run`."""
    cfg = parse_config(argv)
    if cfg.population != 1:
        outcomes = run_population(cfg)
        for outcome in outcomes:
            if outcome.error is not None:
                print(f"error: seed {outcome.seed} stopped: {outcome.error}", file=sys.stderr)
        return exit_status(outcomes)
    try:
        run(cfg)
    except NonFiniteError as error:  # a NaN reward or loss is bad input: one line, exit 2
        raise UsageError(str(error)) from error
    except DamagedFileError as error:  # a corrupt record or checkpoint: one line, exit 2
        raise UsageError(str(error)) from error
    except IncompleteRunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
