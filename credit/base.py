"""The credit-module contract.

A credit module turns a batch of trajectories with sparse rewards into dense advantages:

    module(trajectories) -> CreditOutput

Contract (checked for every registered module by tests/test_credit_properties.py):
- `step_advantages[i]` has shape [T_i] (one value per step of trajectory i);
- `token_advantages[i][t]` has one value per action token of step t (shape [A_{i,t}]);
  `TokenBatch.scatter` places them into the trainer's [N_rows, L] layout, so they are
  exactly zero off the action mask by construction;
- all values float32 and finite; empty and one-step trajectories are valid input;
- permuting the input trajectories permutes the output the same way;
- a reward that is NaN, infinite or beyond float32's range is refused with a
  `NonFiniteError` naming the trajectory and step, before any advantage is computed
  (`CreditModuleBase.__call__` does it for every subclass; a module written to the
  Protocol alone calls `check_finite_rewards` itself). The trainers check the advantages
  (`check_finite_advantages`), the loss and the gradient norm before each optimiser step
  whichever module produced them.

Everything a trainer or the command line uses on a module is declared by `CreditModule`:
the call, `state_dict` / `load_state_dict` (saved in every checkpoint: HP-RLVR's reward
baseline), `generation_cache` (handed to the rollout agent, so hindsight scoring reuses
what generation computed; None for modules that score nothing), and, on the class,
`from_context` (how it is built from a `CreditContext`), `reads` (what of a trajectory
it reads: names of `READS`, enforced by tests/test_credit_reads.py), `needs_policy`,
`default_group_size` (rollouts per task when the user sets none), `conventions` (the
peers' ways of computing it that it can follow, docs/conventions.md) and `Options` (the
frozen dataclass of the options a user may name, `--credit-options key=value`:
`credit.options`; the instance is the module's `options`). `CreditModuleBase` provides all
of them for a stateless, model-free module: a subclass writes `compute` (and, if it keeps
state across batches, the two state methods; if it has options, its `Options` and an
`__init__(self, options)`). `build` is the one place modules are made.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from creditgym.agents.trajectory import DEFAULT_REWARD_CHANNEL, Trajectory
from creditgym.credit.options import NoOptions
from creditgym.models.generation_cache import DEFAULT_GENERATION_CACHE_BYTES
from creditgym.models.scoring import DEFAULT_MEMORY_BUDGET_BYTES, ScoreMemo

if TYPE_CHECKING:
    from creditgym.agents.llm import SamplingConfig
    from creditgym.credit.policy_evaluation import TableSource
    from creditgym.envs.mdp import FiniteMDP
    from creditgym.models.generation_cache import GenerationCache
    from creditgym.models.registry import LoadedModel

    ExactSources = Callable[["CreditContext", str], tuple[Callable[[str], FiniteMDP], TableSource]]

# Largest finite float32: advantages are float32, so a larger reward overflows to inf.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# Group size of a method that does not declare one: GRPO / GiGPO / HCAPO use G = 8.
DEFAULT_GROUP_SIZE = 8
# creditgym's own way of computing group statistics (credit.grpo.Convention).
DEFAULT_CONVENTION = "creditgym"


@dataclass(frozen=True)
class Read:
    """One kind of information a credit module may read of a trajectory.

    Attributes:
        description: what it is, in words (docs/credit.md lists them).
        trajectory_fields: the `Trajectory` attributes (fields and properties) it names.
        step_fields: the `Step` attributes it names.
        oracle: whether it is ground truth a trained agent's learner would not have (the
            env's labels, its noise-free verdict beside the reward channel, its exact
            state): a module that reads one is an oracle, listed apart and never ranked
            against the rest.
    """

    description: str
    trajectory_fields: tuple[str, ...] = ()
    step_fields: tuple[str, ...] = ()
    oracle: bool = False


# The `Trajectory` attributes every module may read, as identity and shape (groups, task
# baselines, the output's shape); so is the number of action tokens of each step, whose
# values are "actions". Every other attribute of a trajectory or step is in `READS`.
IDENTITY_FIELDS = (
    "env_id",
    "task_id",
    "seed",
    "group_id",
    "metadata",
    "steps",
    "length",
    "num_action_tokens",
)

# The closed vocabulary of `CreditModule.reads`: each module class names the kinds it
# reads, and tests/test_credit_reads.py hands every registered module trajectories whose
# other fields raise when read.
READS: dict[str, Read] = {
    "return": Read(
        "the trajectory's return on the run's reward channel (the sum of its step rewards); "
        "a success verdict read off the channel (`verdict`) reads it",
        trajectory_fields=("total_return",),
    ),
    "step_rewards": Read("each step's reward on the run's reward channel", step_fields=("reward",)),
    "outcome": Read(
        "the env's own ending beside the channel: its success flag and the terminated / "
        "truncated split (noise-free where the channel's return is not)",
        trajectory_fields=("success", "terminated", "truncated"),
        step_fields=("terminated", "truncated"),
        oracle=True,
    ),
    "env_labels": Read(
        "the env's per-step info: ground-truth labels such as `key_step`",
        step_fields=("info", "key_step"),
        oracle=True,
    ),
    "feedback": Read("the env's final feedback text", trajectory_fields=("feedback",)),
    "observations": Read(
        "what the policy saw: the task, the observations, the admissible commands and the "
        "prompts built from them",
        trajectory_fields=("task", "initial_observation"),
        step_fields=("observation", "admissible_commands", "prompt_text", "prompt_token_ids"),
    ),
    "actions": Read(
        "what the policy did: the action text, the response, its token ids and their "
        "behaviour log-probs",
        step_fields=("action", "response_text", "action_token_ids", "action_logprobs"),
    ),
    "mdp_state": Read(
        "the env's exact state and dynamics, for envs that are a finite MDP (given through "
        "the `CreditContext`, not the trajectory)",
        oracle=True,
    ),
}
ORACLE_READS = frozenset(name for name, read in READS.items() if read.oracle)


def is_oracle(cls: type) -> bool:
    """Whether a credit module class reads ground truth (`Read.oracle`): an oracle row."""
    return bool(cls.reads & ORACLE_READS)


def verdict(trajectory: Trajectory) -> bool:
    """Success or failure of a trajectory on the reward channel it carries: return > 0.

    A module that needs a verdict (HCAPO's do-no-harm gate, the hindsight block's
    outcome line, rule-based credit's bonus) derives it here, from the signal it trains
    on, never from `Trajectory.success` (docs/credit.md, "Reward channels and verdicts").
    It is the papers' success / failure where failure pays 0 (HCAPO, arXiv 2603.08754:
    +10 or 0): on the `outcome` channel it equals the env's verdict; on the `return`
    channel it is exactly as noisy as the return every group baseline reads.
    """
    return trajectory.total_return > 0


class NonFiniteError(ValueError):
    """A reward, advantage or loss that is NaN, infinite or beyond float32's range."""


@dataclass(frozen=True)
class CreditOutput:
    """Advantages for a batch of trajectories.

    Attributes:
        step_advantages: per trajectory, float32 array of shape [T_i].
        token_advantages: per trajectory, per step, float32 array of shape [A_{i,t}].
        metrics: scalar diagnostics (e.g. `frac_reward_zero_std`), stable names.
    """

    step_advantages: list[np.ndarray]
    token_advantages: list[list[np.ndarray]]
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CreditContext:
    """What the run building a credit module offers it (`build`, `from_context`).

    Attributes:
        policy: the policy that generates the trajectories; hindsight modules (HCAPO,
            HP-RLVR) teacher-force it. None where there is no model (scripted agents).
        history_len: (observation, action) pairs in the rollout prompt; rebuilt prompts
            must use the same K to match what the policy saw.
        generation_cache_bytes: budget of the module's `generation_cache`
            (`models.generation_cache`); 0 when no trainer will fill it.
        memory_budget_bytes: chunk budget of the scoring engine (`models.scoring`).
        convention: whose way of computing the module's statistics to follow (one of
            the module's `conventions`: `credit.grpo.CONVENTIONS`).
        options: the module's options (an instance of its `Options`), parsed once at the
            command line (`credit.options.parse_options`); None: every option at its
            default.
        score_memo: scores kept across calls for one set of weights
            (`models.scoring.ScoreMemo`), shared by every module built with this context,
            so a view scored once serves them all; None: every call scores afresh (what a
            trainer needs, whose weights change every update).
        env_id, env_kwargs: the registered env the trajectories come from and its
            constructor options; the oracles (`oracle`, `hca`) read each task's exact
            MDP from it (`envs.mdp`, `measure.ground_truth.TaskMDPs`). None: not known.
        reward_channel: the run's reward channel (`agents.trajectory.REWARD_CHANNELS`):
            the exact-MDP oracles compute on the env's MDP paid on it
            (`measure.ground_truth.MDP_CHANNELS`).
        sampling: how the rollout samples the policy's actions (temperature, top-p,
            constrained decoding, history); the oracles compute the policy's exact action
            table under it (`measure.ground_truth.llm_policy_table`). None: no model rollout.
        exact_sources: (context, module name) -> (task id -> its exact MDP, the policy's
            exact table source), what the exact-MDP modules compute on
            (`exact_sources_of`); an entry point sets it to
            `measure.ground_truth.exact_sources`, so credit/ never imports measure. None:
            no exact solution offered.
    """

    policy: LoadedModel | None = None
    history_len: int = 2
    generation_cache_bytes: int = DEFAULT_GENERATION_CACHE_BYTES
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES
    convention: str = DEFAULT_CONVENTION
    options: Any = None
    score_memo: ScoreMemo | None = None
    env_id: str | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    sampling: SamplingConfig | None = None
    reward_channel: str = DEFAULT_REWARD_CHANNEL
    exact_sources: ExactSources | None = None


def exact_sources_of(
    context: CreditContext, module: str
) -> tuple[Callable[[str], FiniteMDP], TableSource]:
    """`context.exact_sources(context, module)`: each task's MDP and the policy's exact
    table for an exact-MDP module named `module`.

    Raises:
        ValueError: the context offers no exact solution, or the sources refuse the run
            (no env, an env that is not a finite MDP, sampling that is not exact); the
            message names `module`.
    """
    if context.exact_sources is None:
        raise ValueError(
            f"credit module {module} needs the exact MDP solution (CreditContext.exact_sources, "
            "which an entry point sets to measure.ground_truth.exact_sources)"
        )
    return context.exact_sources(context, module)


@runtime_checkable
class CreditModule(Protocol):
    """A callable from trajectories to advantages (see module docstring).

    Attributes:
        name: stable short name (registry key, run names, metrics).
        reads: what of a trajectory it reads, names of `READS` (an upper bound over its
            options); one of `ORACLE_READS` makes it an oracle (`is_oracle`).
        default_group_size: rollouts per task G when the user sets none (HP-RLVR: 1).
        needs_policy: whether `from_context` needs `CreditContext.policy`.
        conventions: the values of `CreditContext.convention` it accepts; the first is
            its default.
        Options: the frozen dataclass of its options (`credit.options`: one field per
            option, with type, default, help and range checks); `credit.options.NoOptions`
            for a module without any. `CreditContext.options` is an instance of it.
        options: the instance the module was built with.
        generation_cache: the cache a trainer hands to its rollout agent, or None.
    """

    name: ClassVar[str]
    reads: ClassVar[frozenset[str]]
    default_group_size: ClassVar[int]
    needs_policy: ClassVar[bool]
    conventions: ClassVar[tuple[str, ...]]
    Options: ClassVar[type]
    options: Any
    generation_cache: GenerationCache | None

    @classmethod
    def from_context(cls, context: CreditContext) -> CreditModule: ...

    def __call__(self, trajectories: Sequence[Trajectory]) -> CreditOutput: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


# What a module class carries before it is built (`credit.resolve` checks a plug-in for
# them); `generation_cache` may be set per instance, so `build` checks it after building.
CLASS_MEMBERS = (
    "name",
    "default_group_size",
    "needs_policy",
    "conventions",
    "Options",
    "from_context",
    "__call__",
    "state_dict",
    "load_state_dict",
    "reads",
)


def missing_members(obj: object) -> list[str]:
    """The members of `CreditModule` that `obj` (a class or an instance) lacks."""
    members = (
        CLASS_MEMBERS if isinstance(obj, type) else (*CLASS_MEMBERS, "options", "generation_cache")
    )
    return [member for member in members if not hasattr(obj, member)]


def _describe(trajectory: Trajectory, index: int) -> str:
    return f"trajectory {index} (task {trajectory.task_id!r}, group {trajectory.group_id!r})"


def check_finite_rewards(trajectories: Sequence[Trajectory]) -> None:
    """Raise `NonFiniteError` at the first reward (or return) that is not a finite float32.

    A NaN in one reward turns every advantage of its group into NaN (through the group
    mean and std), and the optimiser step then writes NaN into every weight; refusing it
    here names the step that caused it.
    """
    for index, trajectory in enumerate(trajectories):
        for t, step in enumerate(trajectory.steps):
            if not (math.isfinite(step.reward) and abs(step.reward) <= FLOAT32_MAX):
                raise NonFiniteError(
                    f"{_describe(trajectory, index)} step {t}: reward {step.reward!r} is not "
                    "a finite float32; refusing to assign credit"
                )
        # Finite rewards can still sum past float32 (two rewards of 3e38).
        total = trajectory.total_return
        if not (math.isfinite(total) and abs(total) <= FLOAT32_MAX):
            raise NonFiniteError(
                f"{_describe(trajectory, index)}: return {total!r} over its "
                f"{trajectory.length} steps is not a finite float32; refusing to assign credit"
            )


def check_finite_advantages(trajectories: Sequence[Trajectory], output: CreditOutput) -> None:
    """Raise `NonFiniteError` at the first non-finite step or token advantage.

    Trainers call this before any optimiser step: a module that breaks the contract must
    not write NaN into the policy's weights.
    """
    for index, (trajectory, steps, tokens) in enumerate(
        zip(trajectories, output.step_advantages, output.token_advantages, strict=True)
    ):
        for t, (step_value, token_values) in enumerate(zip(steps, tokens, strict=True)):
            if not (np.isfinite(step_value) and np.all(np.isfinite(token_values))):
                raise NonFiniteError(
                    f"{_describe(trajectory, index)} step {t}: the credit module gave a "
                    "non-finite advantage; refusing the optimiser step"
                )


class CreditModuleBase(ABC):
    """Defaults of the contract for a stateless module that needs no model.

    Subclasses set `name` and `reads` and write `compute`; `__call__` refuses non-finite rewards
    first (`check_finite_rewards`), so no module sees them. A module with options declares
    them as its `Options` dataclass and takes the instance in `__init__(self, options)`
    (docs/extending.md); one without is built with no arguments. A module with state across
    batches overrides `state_dict` / `load_state_dict`; one that scores with the policy
    sets `needs_policy` and overrides `from_context`.
    """

    name: ClassVar[str]
    # No default: every module says what it reads.
    reads: ClassVar[frozenset[str]]
    default_group_size: ClassVar[int] = DEFAULT_GROUP_SIZE
    needs_policy: ClassVar[bool] = False
    conventions: ClassVar[tuple[str, ...]] = (DEFAULT_CONVENTION,)
    Options: ClassVar[type] = NoOptions
    options: Any = NoOptions()
    # Modules that score nothing have no cache for the rollout agent to fill.
    generation_cache: GenerationCache | None = None

    @classmethod
    def from_context(cls, context: CreditContext) -> CreditModuleBase:
        """The module with the options the run names (`options_of`); a module without
        options is built with no arguments (a model-free module needs nothing else)."""
        if cls.Options is NoOptions:
            return cls()
        return cls(options_of(cls, context))

    def __call__(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        check_finite_rewards(trajectories)
        return self.compute(trajectories)

    @abstractmethod
    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        """Advantages of `trajectories`, whose rewards are known to be finite float32."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        del state  # stateless


def build(cls: type[CreditModule], context: CreditContext) -> CreditModule:
    """The one place credit modules are made: `cls.from_context(context)`, checked.

    Raises:
        ValueError: the module reads something not in `READS`, scores with a policy
            and `context.policy` is None, or it does not offer `context.convention`.
        TypeError: `context.options` is not an instance of the module's `Options`, or what
            `from_context` returned does not implement `CreditModule`.
    """
    unknown = sorted(set(cls.reads) - READS.keys())
    if unknown:
        raise ValueError(
            f"credit module {cls.name} reads {', '.join(unknown)}, not in credit.base.READS "
            f"({', '.join(READS)})"
        )
    if cls.needs_policy and context.policy is None:
        raise ValueError(f"credit module {cls.name} scores with the policy and needs a model")
    if context.convention not in cls.conventions:
        raise ValueError(
            f"credit module {cls.name} has no convention {context.convention!r}; "
            f"valid: {', '.join(cls.conventions)}"
        )
    options_of(cls, context)  # refused here, before any model work
    module = cls.from_context(context)
    missing = missing_members(module)
    if missing:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__}.from_context returned an object without "
            f"{', '.join(missing)} (credit.base.CreditModule)"
        )
    return module


def options_of(cls: type, context: CreditContext) -> Any:
    """`context.options`, or the defaults of `cls.Options` when it is None.

    Raises:
        TypeError: options of another class (another module's, or text not yet parsed).
    """
    if context.options is None:
        return cls.Options()
    if type(context.options) is not cls.Options:
        raise TypeError(
            f"credit module {cls.name} takes {cls.Options.__name__}, got "
            f"{type(context.options).__name__} (credit.options.parse_options parses text)"
        )
    return context.options


def broadcast_to_tokens(
    trajectories: Sequence[Trajectory], step_advantages: Sequence[np.ndarray]
) -> list[list[np.ndarray]]:
    """Give every action token of step t the advantage of step t (GRPO-style broadcast)."""
    return [
        [
            np.full(len(step.action_token_ids), float(values[t]), dtype=np.float32)
            for t, step in enumerate(traj.steps)
        ]
        for traj, values in zip(trajectories, step_advantages, strict=True)
    ]
