"""Names turned into objects for `creditgym run`: scripted agents, envs, policies,
credit modules and trainers, through dict registries, each failure one `UsageError` line.

Nothing here reads a `RunConfig`: the callers pass the values of the run's plan
(`benchmarks/run/plan.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
from peft import PeftModel

from creditgym import credit
from creditgym.agents.base import Agent, ExpertAgent, RandomAgent
from creditgym.agents.trajectory import DEFAULT_REWARD_CHANNEL
from creditgym.benchmarks import common
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.run.config import NO_CREDIT
from creditgym.credit.base import DEFAULT_CONVENTION, CreditContext, CreditModule
from creditgym.measure.ground_truth import exact_sources
from creditgym.models.registry import LoadedModel
from creditgym.trainers.core import peft_quietly
from creditgym.trainers.policy_gradient import AgentConfig, PolicyGradientTrainer
from creditgym.trainers.sft import CreditFilteredSFTTrainer

# Scripted agents, built per episode from a seed so a resumed run replays exactly the
# episodes an uninterrupted one would have played.
SCRIPTED_AGENTS: dict[str, Callable[[int], Agent]] = {
    "expert": lambda seed: ExpertAgent(),
    "random": lambda seed: RandomAgent(seed=seed),
}


# The trainers `--trainer` names (`--trainer eval-only` trains nothing).
TRAINERS: dict[str, type] = {
    "policy_gradient": PolicyGradientTrainer,
    "sft": CreditFilteredSFTTrainer,
}


def make_env(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    """`gym.make` with env errors (missing module, bad kwargs, missing data) as one line."""
    try:
        return gym.make(env_id, **env_kwargs)
    except (ImportError, gym.error.Error, TypeError, ValueError, OSError) as error:
        raise UsageError(f"cannot create env {env_id} with {dict(env_kwargs)}: {error}") from error


def load_run_policy(name: str, device: str, dtype: str = "float32") -> LoadedModel:
    """`benchmarks.common.load_policy` for a run's `--model`, which may also name a scripted
    agent: a typo's suggestions include the scripted agents' names."""
    return common.load_policy(name, device, dtype, also_valid=SCRIPTED_AGENTS)


def load_trained_policy(
    base: LoadedModel, final_dir: Path, device: str, dtype: str = "float32"
) -> LoadedModel:
    """The policy a finished training exported: a LoRA adapter over `base`, or a whole
    fine-tuned model (the trainers export one or the other)."""
    if (final_dir / "adapter_config.json").is_file():
        with peft_quietly():
            model = PeftModel.from_pretrained(base.model, str(final_dir)).to(device)
    else:
        model = load_run_policy(str(final_dir.resolve()), device, dtype).model
    model.eval()
    return LoadedModel(name=base.name, model=model, tokenizer=base.tokenizer)


def credit_class(name: str) -> type[CreditModule]:
    """The class of a registered credit module or of a `package.module:Class` path."""
    try:
        return credit.resolve(name)
    except KeyError as error:
        raise UsageError(str(error.args[0])) from error


def credit_names() -> dict[str, str]:
    """Every valid --credit value (the credit registry plus `none`)."""
    return {NO_CREDIT: NO_CREDIT, **{name: name for name in credit.REGISTRY}}


def build_credit(
    name: str,
    policy: LoadedModel | None,
    history_len: int = 2,
    generation_cache_gib: float = 0.0,
    convention: str = DEFAULT_CONVENTION,
    options: Any = None,
    env_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    sampling: AgentConfig | None = None,
    reward_channel: str = DEFAULT_REWARD_CHANNEL,
) -> CreditModule:
    """Build a credit module (`credit.build`) from one context: the policy it may score
    with, the prompt history length (rebuilt prompts must match the rollout's), the
    generation-cache budget (0 where no trainer fills the cache), the convention of
    its group statistics (docs/conventions.md), the options the user named (an instance
    of the module's `Options`, `RunPlan.credit_options`; None: its defaults), and the env,
    rollout sampling and reward channel the exact-MDP oracles (`oracle`, `hca`) read."""
    context = CreditContext(
        policy=policy,
        history_len=history_len,
        generation_cache_bytes=int(generation_cache_gib * 2**30),
        convention=convention,
        options=options,
        env_id=env_id,
        env_kwargs=dict(env_kwargs or {}),
        sampling=sampling,
        reward_channel=reward_channel,
        exact_sources=exact_sources,
    )
    try:
        return credit.build(credit_class(name), context)
    except (TypeError, ValueError) as error:  # a needed policy missing, a broken plug-in
        raise UsageError(f"--credit {name}: {error}") from error
