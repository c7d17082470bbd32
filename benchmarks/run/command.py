"""A run from start to end, and `main`, the entry point of `creditgym run`: the command
line parsed (`config.parse_config`) and resolved once into a plan (`plan.resolve`), then
checked, trained, evaluated, sampled and summarised (`run`, `run_in`), or the same for
each member of a population (`run_population`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch

from creditgym.agents.atomic import DamagedFileError
from creditgym.benchmarks import common, lock
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error
from creditgym.benchmarks.run.build import SCRIPTED_AGENTS, load_run_policy, load_trained_policy
from creditgym.benchmarks.run.config import command_line, parse_config
from creditgym.benchmarks.run.evaluate import (
    evaluate,
    format_summary,
    is_finished,
    missing_episodes,
    summarize,
)
from creditgym.benchmarks.run.identity import method_config, method_fields, method_label
from creditgym.benchmarks.run.plan import RunPlan, resolve
from creditgym.benchmarks.run.population import (
    BAD_INPUT_ERRORS,
    MemberOutcome,
    check_population,
    exit_status,
    failed_outcome,
    finished_outcome,
    held_outcome,
    member_plans,
    plan_prefix,
    population_record,
    progress_line,
)
from creditgym.benchmarks.run.samples import write_samples
from creditgym.benchmarks.run.train import train, trainer_configs
from creditgym.benchmarks.run.validate import validate
from creditgym.credit.base import NonFiniteError
from creditgym.models.registry import LoadedModel, vocabulary
from creditgym.report import records

REPO_ROOT = Path(__file__).resolve().parents[2]


# The command's name, not this module's, heads its log lines (`benchmarks.run: ...`).
logger = logging.getLogger("benchmarks.run")


# What `run` (its lock) and `prepare_run_dir` write before any work: a folder holding only
# these is empty.
BOOKKEEPING_FILES = frozenset(
    {records.CONFIG_FILE, records.PROVENANCE_FILE, records.COMMANDS_FILE, lock.RUN_LOCK_FILE}
)


def prepare_run_dir(plan: RunPlan, population: RunPlan | None = None) -> Path:
    """Create the run folder with config.json and provenance.json (kept on resume).

    `population`: the population `plan` is a member of (benchmarks/run/population.py),
    whose command commands.txt records and whose seeds a fresh provenance.json names."""
    run_dir = plan.run_dir
    config = {
        **json.loads(json.dumps(dataclasses.asdict(plan.config), default=str)),
        "env_id": plan.env_id,
        "max_episode_steps": plan.step_limit,
        # Which data was played (the identity hashes it too).
        "game_set": None if plan.game_set is None else plan.game_set.description,
        # The vocabulary of a model whose tokenizer the repository builds (`small`): a
        # resume under another one is refused (`check_vocabulary`).
        "vocabulary": vocabulary(plan.config.model),
        "run_name": run_dir.name,
        "identity": plan.identity,
        "method_config": method_config(plan),
        "method": method_label(plan),
        **{f"method_{key}": value for key, value in method_fields(plan).items()},
    }
    # Rewritten on resume: a rerun may extend the evaluation (more episodes, another
    # split), which the name's hash ignores; the latest request is what config.json shows.
    records.atomic_write_json(run_dir / records.CONFIG_FILE, config)
    # Every command that worked in this folder (a resume, a longer evaluation), in order.
    command = command_line((plan if population is None else population).config)
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


def plan_line(plan: RunPlan, policy: LoadedModel | None) -> str:
    """What the run will do, printed before it starts: model, steps, rollouts, evaluation
    episodes and device, and on a CPU with a large policy that it takes tens of minutes."""
    cfg, env_id = plan.config, plan.env_id
    episodes = cfg.eval_episodes * len(plan.splits)
    if plan.trains:
        settings = trainer_configs(plan)[cfg.trainer][1]
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
        line += f", --dtype fast: {common.describe_precision(plan.dtype)}"
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


def run(plan: RunPlan) -> Path:
    """Validate, train (or resume), evaluate, write samples and the summary; returns the
    run folder."""
    if plan.config.population != 1:
        raise UsageError("run() trains one seed; run_population() trains a population")
    validate(plan)
    torch.set_num_threads(plan.config.threads)
    run_dir = plan.run_dir
    fresh = not run_dir.exists()
    # One writer per run folder, taken before any work: a second invocation of the same
    # run exits 2 naming this one (benchmarks/lock.py).
    with (
        lock.hold(lock.run_folder_lock(run_dir), str(run_dir)),
        removed_if_unstarted(run_dir, fresh),
    ):
        policy = starting_policy(plan)
        print(plan_line(plan, policy), flush=True)
        return run_in(plan, prepare_run_dir(plan), policy)


def starting_policy(plan: RunPlan) -> LoadedModel | None:
    """The policy a run starts from (None for a scripted agent)."""
    if plan.config.model in SCRIPTED_AGENTS:
        return None
    return load_run_policy(plan.config.model, plan.config.device, plan.dtype)


def run_population(plan: RunPlan, skip_held: bool = False) -> list[MemberOutcome]:
    """Train and evaluate the seeds seed..seed + population - 1 of `plan` in this process
    (benchmarks/run/population.py), each into the run folder of its single run; returns
    each member's outcome, in seed order. A member that fails is reported in one line
    and the others go on; bad input common to all (an option) stops the population
    before any work, and so does a member's folder that another process holds, unless
    `skip_held` (a sweep's choice: that member is skipped, the others run)."""
    check_population(plan.config)
    members = member_plans(plan)
    for member in members:
        validate(member)
    torch.set_num_threads(plan.config.threads)
    with contextlib.ExitStack() as held:
        # Every member's folder lock before any work: a population (or single run) covering
        # one of these seeds elsewhere is refused at once, naming its holder.
        fresh, elsewhere = {}, {}
        for member in members:
            run_dir = member.run_dir
            fresh[member.config.seed] = not run_dir.exists()
            try:
                held.enter_context(lock.hold(lock.run_folder_lock(run_dir), str(run_dir)))
            except lock.LockHeldError as error:
                if not skip_held:
                    raise
                elsewhere[member.config.seed] = held_outcome(member.config.seed, run_dir, error)
                continue
            held.enter_context(removed_if_unstarted(run_dir, fresh[member.config.seed]))
        # Built once; each member trains a copy, so every member starts from the weights
        # its single run loads (`small` is built from a fixed seed, not the run's).
        policy = starting_policy(plan)
        print(plan_prefix(plan) + plan_line(members[0], policy), flush=True)
        outcomes = []
        for member in members:
            seed = member.config.seed
            outcome = elsewhere.get(seed) or run_member(member, plan, policy, fresh[seed])
            outcomes.append(outcome)
            print(progress_line(plan, outcomes), flush=True)
    return outcomes


def run_member(
    member: RunPlan, population: RunPlan, policy: LoadedModel | None, fresh: bool
) -> MemberOutcome:
    """One member of `population` (its folder lock held; `fresh`: the folder was absent
    before): skipped when finished, else its single run on a copy of `policy`; a failure
    becomes its outcome, not an error."""
    run_dir = member.run_dir
    try:
        if not is_finished(member):
            with removed_if_unstarted(run_dir, fresh):
                own_policy = copy.deepcopy(policy)
                run_in(member, prepare_run_dir(member, population), own_policy)
        return finished_outcome(member.config.seed, run_dir)
    except Exception as error:
        if not isinstance(error, (*BAD_INPUT_ERRORS, IncompleteRunError)):
            traceback.print_exc()  # a bug: the whole story, then the one line with the others
        return failed_outcome(member.config.seed, run_dir, error)


def run_in(plan: RunPlan, run_dir: Path, policy: LoadedModel | None) -> Path:
    """Train (or resume), evaluate, write samples and the summary in `run_dir`."""
    cfg = plan.config
    # Every record file as its readers read it, before resuming over it: damage is named
    # (file and line) instead of ending in a done.json a report would count.
    records.check_run_records(run_dir)
    if policy is not None and plan.trains:
        final_dir = run_dir / "final"
        trained = None
        if (run_dir / records.TRAINING_FILE).exists() and final_dir.is_dir():
            try:
                trained = load_trained_policy(policy, final_dir, cfg.device, plan.dtype)
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
                policy = load_run_policy(cfg.model, cfg.device, plan.dtype)
        policy = trained if trained is not None else train(plan, run_dir, policy)
    train_step = len(records.read_metrics(run_dir))
    evaluate(plan, run_dir, policy, train_step)
    missing = missing_episodes(plan, run_dir)
    if missing:  # dropped by a crashed or timed-out env: never summarise a partial set
        requested = cfg.eval_episodes * len(plan.splits)
        raise IncompleteRunError(
            f"{len(missing)} of {requested} evaluation episodes were dropped (the log above "
            f"says why); run the same command again to play them ({run_dir})"
        )
    write_samples(plan, run_dir, policy)
    requested = {s.name for s in plan.splits}
    episodes = [
        e
        for e in records.read_episodes(run_dir)
        if e.split in requested and e.index < cfg.eval_episodes
    ]
    rows = summarize(episodes)
    records.atomic_write_json(
        run_dir / records.DONE_FILE, {"summary": rows, "train_step": train_step}
    )
    print(format_summary(run_dir.name, method_label(plan), rows))
    for row in rows:
        if row["truncated_pct"] > 50:
            print(
                f"warning: {row['truncated_pct']:.0f} % of {row['split']} episodes hit the step "
                f"limit T = {plan.step_limit} before ending; a longer --max-episode-steps "
                "may be needed to measure success"
            )
    print(f"run folder: {run_dir}")
    return run_dir


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym run`."""
    plan = resolve(parse_config(argv))
    if plan.config.population != 1:
        outcomes = run_population(plan)
        for outcome in outcomes:
            if outcome.error is not None:
                print(f"error: seed {outcome.seed} stopped: {outcome.error}", file=sys.stderr)
        return exit_status(outcomes)
    try:
        run(plan)
    except NonFiniteError as error:  # a NaN reward or loss is bad input: one line, exit 2
        raise UsageError(str(error)) from error
    except DamagedFileError as error:  # a corrupt record or checkpoint: one line, exit 2
        raise UsageError(str(error)) from error
    except IncompleteRunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
