"""What every `benchmarks` entry point does the same way, written once.

Turning an env name into its id, env options into constructor kwargs, a model name into a
loaded policy, a configuration into an output name, and range checks of numeric options:
each entry point (`benchmarks.run`, `credit_truth`, `credit_quality`, `hindsight_ablation`,
`trl_grpo`) calls these instead of its own copy, so they cannot drift (markdown tables:
`report.tables`). Every failure is a `UsageError` (one line, exit status 2).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from creditgym import envs
from creditgym.benchmarks.cli import UsageError, lookup, parse_arguments, prog_of, suggest
from creditgym.models.precision import cpu_features, native_bfloat16, use_bfloat16_matmuls
from creditgym.models.registry import MODELS, LoadedModel, ModelUnavailableError, load_model
from creditgym.trainers import warm_start  # noqa: F401  (provides `small-warm`'s loader)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


# The precision `--dtype fast` resolves to on a CPU with native bfloat16 products: float32
# weights and activations, the decoder layers' products in bfloat16 (models/precision.py).
BFLOAT16_PRODUCTS = "bfloat16-products"


# `--dtype` values resolved by the device and processor a run lands on (`resolve_dtype`),
# and what they can resolve to: the same settings name another run folder on a machine
# that resolves them otherwise.
PER_MACHINE_DTYPES = ("auto", "fast")
MACHINE_RESOLVED_DTYPES = ("float32", "bfloat16", BFLOAT16_PRODUCTS)


def resolve_dtype(dtype: str, device: str, model: str) -> str:
    """The precision a run computes in: `dtype` as given, or for `auto` float32 on a CPU
    and bfloat16 on CUDA; for `fast` on a CPU, `BFLOAT16_PRODUCTS` where the processor
    multiplies bfloat16 natively and the model trains a LoRA adapter (full fine-tuning
    keeps float32: an optimiser must not step bfloat16 weights), else float32."""
    if dtype not in PER_MACHINE_DTYPES:
        return dtype
    if device.startswith("cuda"):
        return "bfloat16"
    registered = MODELS.get(model)
    full_finetune = registered is not None and registered.full_finetune
    if dtype == "fast" and native_bfloat16() and not full_finetune:
        return BFLOAT16_PRODUCTS
    return "float32"


def describe_precision(resolved: str) -> str:
    """`resolved` (from `resolve_dtype`) and the processor flags that chose it."""
    return f"{resolved} ({cpu_features()})"


def env_id(name: str) -> str:
    """A short name (`keydoor`) or registered id -> the registered id (UsageError with the
    valid names and close matches)."""
    return lookup("env", name, {**envs.short_names(), **{i: i for i in envs.ENVS}})


def short_name(env_id: str) -> str:
    """The command-line name of a registered env; an unregistered id's last part."""
    info = envs.ENVS.get(env_id)
    return info.short_name if info is not None else env_id.split("/")[-1]


def env_options(
    env_id: str, pairs: str | Sequence[str], flag: str = "--env-options"
) -> envs.EnvOptions:
    """`key=value` texts -> the options of registered `env_id`, parsed by its declared
    options class (`EnvInfo.options`); a bad text is one UsageError line. The step limit
    has its own option everywhere, so `max_steps` is refused here."""
    texts = pairs.split() if isinstance(pairs, str) else pairs
    if any(text.partition("=")[0].strip() == "max_steps" for text in texts):
        raise UsageError(f"the step limit is --max-episode-steps, not {flag} max_steps")
    try:
        return envs.parse_env_options(env_id, texts)
    except ValueError as error:
        raise UsageError(f"{flag}: {error}") from error


def load_policy(
    name: str, device: str = "cpu", dtype: str = "float32", also_valid: Iterable[str] = ()
) -> LoadedModel:
    """`models.registry.load_model` with its one-line error as a UsageError, suggesting close
    registered names (and `also_valid`: an entry point's scripted agents)."""
    try:
        if dtype == BFLOAT16_PRODUCTS:
            loaded = load_model(name, device=device)
            use_bfloat16_matmuls(loaded.model)
            return loaded
        return load_model(name, device=device, dtype=DTYPES[dtype])
    except ModelUnavailableError as error:
        raise UsageError(f"{error}.{suggest(name, [*MODELS, *also_valid])}") from error


def output_name(
    name: str | None,
    env_id: str,
    parts: Sequence[str],
    env_qualifiers: Sequence[str] = (),
    qualifier_separator: str = "_",
) -> str:
    """`name` when given, else `<env>_<part>_<part>...`, where `<env>` is the env's short
    name followed by its qualifiers (options, task families) joined by
    `qualifier_separator`. The names of existing run folders and result files are built
    this way, so the format must not change."""
    if name:
        return name
    env = qualifier_separator.join([short_name(env_id), *env_qualifiers])
    return "_".join([env, *parts])


def check_at_least(bounds: Iterable[tuple[str, float, float]]) -> None:
    """Each (option, value, least): a UsageError for the first value below its least."""
    for option, value, least in bounds:
        if value < least:
            raise UsageError(f"{option} must be >= {least} (got {value})")


def run_scoring_command(
    args_type: type,
    module: str,
    doc: str,
    run: Callable[[Any, list[str]], object],
    argv: Sequence[str] | None,
) -> int:
    """The body of a scoring entry point's `main` (`credit_truth`, `decomposition`,
    `hindsight_ablation`): parse `argv` (the command line if None) into `args_type`
    (`parse_arguments`: a bad flag is one line, exit status 2), use as many torch threads
    as OMP_NUM_THREADS says (1 if unset), call `run(args, argv)`; the argv goes along so
    the outputs can record their command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_arguments(args_type, argv, prog_of(module), description=doc.split("\n")[0])
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    run(args, argv)
    return 0
