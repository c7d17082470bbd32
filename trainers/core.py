"""What both trainers share: the policy made trainable, task seeding, the rollout + credit
phase, the optimiser-step bookkeeping, checkpoints and the metrics log.

A trainer (`trainers/policy_gradient.py`, `trainers/sft.py`) subclasses `TrainerCore` and
writes only its update: `train_iteration` calls `rollout_and_credit` (rollouts of
`task_seeds(iteration)` with the current policy, then the credit module), takes its
optimiser steps (each ending in `clip_and_step`) and records each with `log_step`.
`train` runs the iterations, checkpoints every `checkpoint_every` of them and at the end,
and exports the policy to `run_dir/final/`.

Everything random is a pure function of (seed, iteration): the tasks, the agent's
sampling seed, and whatever order a trainer draws with `derive_seed`; a checkpoint holds
the rest (weights, optimiser, credit-module state, RNG states, counters), so a run killed
and resumed equals an uninterrupted one.
"""

from __future__ import annotations

import abc
import contextlib
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from creditgym.agents.atomic import atomic_folder
from creditgym.agents.llm import LLMAgent, SamplingConfig
from creditgym.agents.parsing import is_valid_action
from creditgym.agents.rollout import EnvWorkers, collect, resolve_env_workers
from creditgym.agents.trajectory import TokenBatch, Trajectory, return_channel
from creditgym.credit.base import (
    CreditModule,
    CreditOutput,
    NonFiniteError,
    check_finite_advantages,
)
from creditgym.models.precision import has_bfloat16_matmuls
from creditgym.models.progress import SHOW_AFTER_S, LiveBar
from creditgym.models.registry import MODELS, LoadedModel
from creditgym.trainers.checkpoint import (
    MetricsLog,
    load_newest_checkpoint,
    prune_checkpoints,
    restore_training_state,
    save_checkpoint,
    training_state,
)
from creditgym.trainers.curve import CurveLog, CurveSettings, evaluate_point

# Worker processes of a rollout when `num_envs` is None and the env runs in workers (the
# trainers' fixed default before in-process envs; each worker is a whole process).
WORKER_ENVS = 8
# Models small enough that `finetune="auto"` trains every weight instead of a LoRA adapter
# (`RegisteredModel.full_finetune`, declared with each model in models/registry.py).
FULL_FINETUNE_MODELS = frozenset(name for name, model in MODELS.items() if model.full_finetune)

# Trainer counters saved in checkpoints and restored on resume.
COUNTERS = ("iteration", "optimizer_step", "zero_grad_records")

# Logged with every optimiser step of every trainer, from its iteration's rollouts
# (`rollout_and_credit`); the credit module's own metrics come with them under `credit/`.
ROLLOUT_METRICS = (
    "rollout/success_rate",
    "rollout/traj_length",
    "rollout/valid_action_ratio",
    "rollout/num_trajectories",
    "rollout/mean_return",
    "rollout/action_tokens",
    "rollout/num_tasks",
    "rollout/group_size",
    "rollout/tokens_per_s",
    "time/rollout_s",
    "time/credit_s",
    "iteration",
)
# Logged with every optimiser step of every trainer, about the step (`log_step`).
OPTIMIZER_STEP_METRICS = (
    "charts/grad_norm",
    "charts/grad_norm_is_zero",
    "charts/zero_grad_fraction",
    "charts/action_tokens",
    "time/train_s",
)

# The logged names that read the wall clock: the only ones in which a killed-and-resumed
# run's records differ from an uninterrupted run's.
WALL_CLOCK_METRICS = ("time/rollout_s", "time/credit_s", "time/train_s", "rollout/tokens_per_s")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter (Hu et al. 2021) through peft."""

    rank: int = 8
    """Adapter rank r."""
    alpha: int = 16
    """Scaling numerator: the update is (alpha / r) B A."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Names of the linear layers that get an adapter."""


@dataclass(frozen=True)
class TrainerSettings:
    """The settings every trainer shares, declared once here: `TrainerCore` reads them,
    and each trainer's config (`PolicyGradientConfig`, `SFTConfig`) subclasses this one,
    adds its own fields, gives its own defaults where they differ, and provides
    `iterations` (how many the run trains) and `num_tasks` (tasks per iteration)."""

    group_size: int = 8
    """G: rollouts per task (8 for GRPO / GiGPO / HCAPO, 1 for HP-RLVR; group credit
    modules need G > 1 to tell good from bad)."""
    task_pool: int = 0
    """Draw task seeds from range(task_pool) without replacement each iteration, so tasks
    repeat across iterations; 0 = a fresh seed for every task."""
    num_envs: int | None = None
    """Environments stepped together during rollouts (the largest generation batch).
    None: every rollout of the iteration at once where the envs run in-process (free to
    add), else 8 worker processes (`TrainerCore.rollout_envs`)."""
    env_workers: EnvWorkers = "auto"
    """What runs each rollout env: a worker process, the trainer's own process (pure
    in-memory envs), or a Ray actor (on the Ray cluster `ray.init()` joins); the same
    trajectories either way. auto: in-process for envs registered `in_process` (KeyDoor,
    Umbrella), else a process (`agents.rollout.resolve_env_workers`)."""
    learning_rate: float = 1e-5
    """AdamW learning rate (the papers use 1e-6 for full fine-tuning of 1.5B-7B models)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (the norm before clipping is logged)."""
    finetune: Literal["auto", "lora", "full"] = "auto"
    """auto = full fine-tuning for models in `FULL_FINETUNE_MODELS` (`tiny`, `small`,
    `small-warm`), LoRA otherwise."""
    lora: LoraSettings = field(default_factory=LoraSettings)
    """LoRA adapter settings (used when fine-tuning with LoRA)."""
    seed: int = 0
    """Seeds task selection, sampling, shuffling and every RNG."""
    checkpoint_every: int = 10
    """Save a checkpoint every this many iterations (and always at the end)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk (0 keeps all)."""
    resume: bool = False
    """Continue from the newest checkpoint in the run folder, if there is one."""

    @property
    def iterations(self) -> int:
        """Iterations of the run (the trainer's config names them)."""
        raise NotImplementedError

    @property
    def num_tasks(self) -> int:
        """Tasks per iteration (the trainer's config decides them)."""
        raise NotImplementedError

    def validate(self) -> None:
        """Raise ValueError with a readable message on shared settings that cannot work;
        a trainer's config checks its own fields, then calls this."""
        positive = {
            "group_size": self.group_size,
            "num_envs": 1 if self.num_envs is None else self.num_envs,
            "checkpoint_every": self.checkpoint_every,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.learning_rate <= 0 or self.max_grad_norm <= 0:
            raise ValueError("learning_rate and max_grad_norm must be > 0")
        if self.task_pool and self.task_pool < self.num_tasks:
            raise ValueError(
                f"task_pool ({self.task_pool}) must hold at least the {self.num_tasks} tasks "
                "of one iteration (tasks of one iteration are distinct)"
            )


@contextlib.contextmanager
def peft_quietly() -> Iterator[None]:
    """Wrap a model with peft without its FutureWarning about transformers'
    `is_gradient_checkpointing` (peft 0.18 reads the deprecated property whenever it wraps
    a model, so every LoRA run printed a warning no user can act on); other warnings pass."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed that depends only on (seed, parts): resumed runs re-derive the same."""
    return random.Random(":".join(str(x) for x in (seed, *parts))).getrandbits(31)


def prepare_policy(
    loaded: LoadedModel, finetune: Literal["auto", "lora", "full"], lora: LoraSettings
) -> LoadedModel:
    """Make `loaded` trainable: add a LoRA adapter (in place) or unfreeze every weight.

    peft injects the adapter layers into the base model's modules in place, so a credit
    module built on `loaded` before this call (HCAPO, HP-RLVR score with the policy)
    scores with the adapter too. A model that already is a `PeftModel` is used as is.
    """
    mode = finetune
    if mode == "auto":
        mode = "full" if loaded.name in FULL_FINETUNE_MODELS else "lora"
    model = loaded.model
    if mode == "lora" and not isinstance(model, PeftModel):
        adapter = LoraConfig(
            r=lora.rank,
            lora_alpha=lora.alpha,
            target_modules=list(lora.target_modules),
            # No dropout: the PPO ratio needs the same distribution the rollout sampled.
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            with peft_quietly():
                model = get_peft_model(model, adapter)
        except ValueError as error:
            raise ValueError(
                f"cannot add LoRA to {loaded.name!r} with target modules "
                f"{lora.target_modules}: {error}"
            ) from error
    elif mode == "full":
        if has_bfloat16_matmuls(model):
            raise ValueError(
                f"{loaded.name!r} computes in bfloat16 (models.precision): its weights cannot "
                "be fine-tuned; train a LoRA adapter instead"
            )
        model.requires_grad_(True)
    # Eval mode throughout: no dropout anywhere, so the teacher-forced log-probs match
    # the sampled ones; gradients flow all the same.
    model.eval()
    return LoadedModel(name=loaded.name, model=model, tokenizer=loaded.tokenizer)


def to_device(batch: TokenBatch, device: torch.device) -> TokenBatch:
    """The same batch with every tensor on `device` (the policy's)."""
    return TokenBatch(*(tensor.to(device) for tensor in batch))


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate, mean trajectory length and valid-action ratio of a batch.

    Validity is `agents.parsing.is_valid_action`, the rollout engine's own definition (an
    admissible command where the env lists them, a well-formed action block otherwise).
    """
    steps = [step for traj in trajectories for step in traj.steps]
    return {
        "rollout/success_rate": float(np.mean([t.success for t in trajectories])),
        "rollout/traj_length": float(np.mean([t.length for t in trajectories])),
        "rollout/valid_action_ratio": (
            sum(is_valid_action(step) for step in steps) / len(steps) if steps else 1.0
        ),
        "rollout/num_trajectories": float(len(trajectories)),
        # The return shows what success hides (SysDiag's `reboot` trap pays +0.3, no success).
        "rollout/mean_return": float(np.mean([t.total_return for t in trajectories])),
        "rollout/action_tokens": float(sum(t.num_action_tokens for t in trajectories)),
    }


class RolloutPhase(NamedTuple):
    """One iteration's rollouts, their credit, and the metrics every step of it logs."""

    trajectories: list[Trajectory]
    credit: CreditOutput
    metrics: dict[str, float]  # ROLLOUT_METRICS and the credit module's under `credit/`


class TrainerCore(abc.ABC):
    """The run a trainer's update lives in (module docstring).

    Args:
        loaded: the policy (`models.registry.load_model`); made trainable in place.
        credit: a credit module instance (never a name: names are resolved in benchmarks/).
        env_id: registered Gymnasium id, e.g. ``creditgym/SysDiag-v0``.
        env_kwargs: constructor kwargs of the env (e.g. ``faults=[...]``, ``max_steps=``).
        sampling: how the policy samples during rollouts (and is re-scored with).
        config: the trainer's settings (`TrainerSettings`).
        run_dir: folder for `metrics.jsonl`, `train.log`, `tensorboard/`, `checkpoints/`
            and `final/`.
        curve: periodic evaluation on held-out tasks (`trainers/curve.py`, `curve.jsonl`);
            None: none.
        reward_channel: the signal credit and training see (`agents.trajectory.
            REWARD_CHANNELS`), applied to every rollout before the credit module; the
            rollout metrics keep the env's own reward and verdict.

    The nine arguments are listed here only: a subclass adds what it needs in `setup`
    (called once the policy and optimiser exist and before `resume`, so what it builds
    sees the starting weights, e.g. a frozen KL reference) and says in
    `total_optimizer_steps` how many optimiser steps the run takes; `__init__` then calls
    `resume`, which may load trained weights.
    """

    # Rollouts prefill a prompt prefix their steps share once (`models.batching`); a
    # subclass turns it on where its update shares the prefix too (the policy-gradient
    # trainer's LoRA runs), so runs made before it keep their arithmetic.
    share_prefix: bool = False

    def __init__(
        self,
        loaded: LoadedModel,
        credit: CreditModule,
        env_id: str,
        env_kwargs: Mapping[str, Any],
        sampling: SamplingConfig,
        config: TrainerSettings,
        run_dir: str | os.PathLike,
        curve: CurveSettings | None = None,
        reward_channel: Callable[[Trajectory], Trajectory] = return_channel,
    ) -> None:
        config.validate()
        self.config, self.sampling, self.curve = config, sampling, curve
        self.reward_channel = reward_channel
        self.credit, self.env_id, self.env_kwargs = credit, env_id, dict(env_kwargs)
        self.run_dir = Path(run_dir)
        torch.manual_seed(config.seed)
        self.policy = prepare_policy(loaded, config.finetune, config.lora)
        self.params = [p for p in self.policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.learning_rate, weight_decay=config.weight_decay
        )
        pad = self.policy.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.policy.tokenizer.eos_token_id)
        self.iteration = 0
        self.optimizer_step = 0
        self.zero_grad_records = 0
        self.setup()
        self.resume(self.total_optimizer_steps())

    def setup(self) -> None:  # noqa: B027 - a hook; most trainers need none
        """What a trainer builds from the starting weights before `resume` (default: nothing)."""

    def total_optimizer_steps(self) -> int | None:
        """Optimiser steps in the whole run, numbering the per-step metric lines (None: not
        known ahead, as when a round's step count depends on its rollouts)."""
        return None

    def resume(self, total_optimizer_steps: int | None) -> None:
        """Continue from the newest checkpoint when the config says `resume` (and there is
        one), then open the metrics log; `total_optimizer_steps` (None: not known ahead)
        numbers the per-step lines."""
        # A damaged newest checkpoint is reported and the one before it used.
        found = load_newest_checkpoint(self.run_dir) if self.config.resume else None
        if found is not None:
            counters = restore_training_state(
                found[1],
                self.policy.model,
                self.optimizer,
                self.credit,
                COUNTERS,
            )
            for name, value in counters.items():
                setattr(self, name, value)
        self.log = MetricsLog(
            self.run_dir, resume_step=self.optimizer_step, total_steps=total_optimizer_steps
        )
        self.curve_log = CurveLog(self.run_dir, resume_iteration=self.iteration)

    def train(self) -> list[dict[str, float]]:
        """Run the remaining iterations; returns every metrics record of the run."""
        try:
            while self.iteration < self.config.iterations:
                self.curve_point()
                self.train_iteration()
                last = self.iteration == self.config.iterations
                if last or self.iteration % self.config.checkpoint_every == 0:
                    self.save()
            self.curve_point()
            self.export(self.run_dir / "final")
        finally:
            self.log.close()
        return self.log.read()

    def curve_point(self) -> None:
        """Evaluate the current weights on the curve's held-out tasks when a point is due
        after this many iterations and not yet written (a resumed run takes it again)."""
        curve = self.curve
        if curve is None or not curve.due(self.iteration, self.config.iterations):
            return
        if self.iteration in self.curve_log.iterations:
            return
        point = evaluate_point(
            self.policy, self.env_id, self.sampling, curve, self.config.env_workers
        )
        self.curve_log.append(
            {"iteration": self.iteration, "optimizer_step": self.optimizer_step, **point}
        )
        self.log.say(
            f"curve after {self.iteration} iterations: success {point['success_rate']:.2f} "
            f"on {point['episodes']:.0f} held-out tasks ({point['eval_s']:.1f}s)"
        )

    @abc.abstractmethod
    def train_iteration(self) -> list[dict[str, float]]:
        """One iteration: rollout + credit, the trainer's optimiser steps; their records."""

    def task_seeds(self, iteration: int) -> list[int]:
        """The env seeds of one iteration's tasks, a pure function of (seed, iteration)."""
        n, rng = self.config.num_tasks, random.Random(derive_seed(self.config.seed, iteration))
        if self.config.task_pool:
            return rng.sample(range(self.config.task_pool), n)
        return [derive_seed(self.config.seed, iteration, "task", j) for j in range(n)]

    def rollout_envs(self) -> int:
        """Envs stepped together: `config.num_envs`, or when None every rollout of the
        iteration for in-process envs (`agents.rollout.resolve_env_workers`) and
        WORKER_ENVS worker processes otherwise."""
        config = self.config
        if config.num_envs is not None:
            return config.num_envs
        if resolve_env_workers(self.env_id, config.env_workers) == "inline":
            return config.num_tasks * config.group_size
        return WORKER_ENVS

    def rollout_and_credit(self) -> RolloutPhase:
        """Roll out this iteration's tasks with the current policy and score them."""
        config, iteration = self.config, self.iteration
        cache = self.credit.generation_cache
        cache_before = dict(cache.stats) if cache is not None else {}
        start = time.perf_counter()
        agent = LLMAgent(
            self.policy,
            **asdict(self.sampling),
            seed=derive_seed(config.seed, iteration, "agent"),
            # hindsight credit modules reuse what generation computed (models.generation_cache)
            generation_cache=self.credit.generation_cache,
            share_prefix=self.share_prefix,
        )
        trajectories, _ = collect(
            self.env_id,
            agent,
            seeds=self.task_seeds(iteration),
            group_size=config.group_size,
            num_envs=self.rollout_envs(),
            env_workers=config.env_workers,
            env_kwargs=self.env_kwargs,
        )
        rollout_s = time.perf_counter() - start
        if not trajectories:
            raise RuntimeError(f"iteration {iteration}: every rollout was dropped (see log)")
        generated = sum(t.num_action_tokens for t in trajectories)
        played = trajectories  # the env's rewards, for the rollout metrics
        trajectories = [self.reward_channel(trajectory) for trajectory in played]

        start = time.perf_counter()
        # A hindsight module spends minutes of a CPU run building and scoring views: its
        # scoring bar counts views, this one also covers the building (shown after 2 s).
        with LiveBar(
            desc="credit", bar_format="{desc}: {elapsed}", leave=False, delay=SHOW_AFTER_S
        ):
            credit_output = self.credit(trajectories)
        credit_s = time.perf_counter() - start
        # A NaN advantage would poison the gradient, or pass SFT's `value <= min_credit`
        # test as False and keep its step.
        check_finite_advantages(trajectories, credit_output)
        metrics = {
            **rollout_metrics(played),
            "rollout/num_tasks": float(config.num_tasks),
            "rollout/group_size": float(config.group_size),
            **{f"credit/{key}": float(value) for key, value in credit_output.metrics.items()},
            "time/rollout_s": rollout_s,
            "time/credit_s": credit_s,
            "rollout/tokens_per_s": generated / max(rollout_s, 1e-9),
            "iteration": float(iteration),
            # What hindsight scoring took from generation this iteration: refused entries
            # (over `generation_cache_gib`) are steps the scoring had to recompute.
            **{
                f"cache/{key}": float(value - cache_before[key])
                for key, value in (cache.stats.items() if cache is not None else ())
            },
        }
        return RolloutPhase(trajectories, credit_output, metrics)

    def check_finite_loss(self, loss: torch.Tensor, trajectories: Sequence[Trajectory]) -> None:
        """NonFiniteError naming the tasks when a micro-batch's loss is NaN or infinite."""
        if not torch.isfinite(loss):
            raise NonFiniteError(
                f"optimiser step {self.optimizer_step + 1}: loss {float(loss.detach())} on "
                f"tasks {sorted({t.task_id for t in trajectories})}; refusing the step"
            )

    def clip_and_step(self) -> float:
        """Clip the accumulated gradient at `max_grad_norm` and step AdamW; returns the norm
        before clipping."""
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm))
        if not np.isfinite(grad_norm):  # finite losses can still overflow in backward
            raise NonFiniteError(
                f"optimiser step {self.optimizer_step + 1}: gradient norm {grad_norm}; "
                "refusing the step"
            )
        self.optimizer.step()
        return grad_norm

    def log_step(
        self, phase: RolloutPhase, stats: Mapping[str, float], train_s: float
    ) -> dict[str, float]:
        """Count and log one optimiser step: the iteration's metrics, the step's `stats`
        (with `charts/grad_norm`) and the OPTIMIZER_STEP_METRICS derived here."""
        self.optimizer_step += 1
        zero = stats["charts/grad_norm"] == 0.0  # an exactly-zero gradient, HP-RLVR's count
        self.zero_grad_records += int(zero)
        record = {
            **phase.metrics,
            **stats,
            "charts/grad_norm_is_zero": float(zero),
            "time/train_s": train_s,
            "charts/zero_grad_fraction": self.zero_grad_records / self.optimizer_step,
        }
        self.log.write(self.optimizer_step, record)
        return record

    def save(self) -> Path:
        """Checkpoint everything a resumed run needs to continue identically."""
        counters = {name: getattr(self, name) for name in COUNTERS}
        state = training_state(
            self.policy.model, self.optimizer, self.credit, counters, self.config
        )
        path = save_checkpoint(self.run_dir, self.iteration, state)
        prune_checkpoints(self.run_dir, self.config.keep_checkpoints)
        return path

    def export(self, directory: str | os.PathLike) -> None:
        """Save the trained policy: the LoRA adapter, or the full model, plus the tokenizer.

        Written beside `directory` and renamed into place, so a run killed while exporting
        leaves no half-written folder that a rerun would take for the trained policy."""
        with atomic_folder(directory) as staging:
            self.policy.model.save_pretrained(str(staging))
            self.policy.tokenizer.save_pretrained(str(staging))
