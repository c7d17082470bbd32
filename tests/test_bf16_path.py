"""bfloat16 matrix products (agents/precision.py): what is converted, and the PPO ratio.

Tolerance of the first epoch's ratio: rollouts and the update run the same
`BFloat16Linear`s, but a decode step multiplies a few rows and the update whole prompts,
so the kernels accumulate in float32 in different orders; where two such sums straddle a
bfloat16 rounding boundary they round one bfloat16 step apart (2^-8 relative), and that
difference travels through the later layers. On `tiny` (2 layers) below, over 2,216
action tokens: |log r| at most 4.9e-4, mean 3e-6 (float32 throughout: 9.5e-7, 1.3e-7).
The bounds, 1e-2 and 1e-4, leave room for another CPU's kernels and stay far below the
clip range (|log r| < 0.18 for eps = 0.2). smollm2-135m (30 layers) reaches a max of
about 0.1 and a mean of 1.3e-3 (docs/training.md).
"""

from __future__ import annotations

import os

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

import tests.rollout_envs  # noqa: F401  (registers Corridor-v0 in this process)
from creditgym.agents.llm import LLMAgent
from creditgym.agents.logprobs import action_logprobs
from creditgym.agents.models import build_tiny
from creditgym.agents.precision import (
    BFloat16Linear,
    cpu_features,
    has_bfloat16_matmuls,
    native_bfloat16,
    use_bfloat16_matmuls,
)
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import TokenBatch
from creditgym.trainers.core import LoraSettings, prepare_policy

CORRIDOR = "tests.rollout_envs:Corridor-v0"
MAX_LOG_RATIO = 1e-2
MEAN_LOG_RATIO = 1e-4


def test_decoder_linears_become_bfloat16_and_the_rest_stays_float32():
    model = build_tiny().model
    converted = use_bfloat16_matmuls(model)
    layers = model.config.num_hidden_layers
    assert converted == 7 * layers  # q, k, v, o, gate, up, down per layer
    for name, module in model.named_modules():
        if isinstance(module, BFloat16Linear):
            assert ".layers." in name and module.weight.dtype == torch.bfloat16
    assert model.lm_head.weight.dtype == torch.float32
    assert model.model.embed_tokens.weight.dtype == torch.float32
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if "norm" in n)
    x = torch.randn(3, 5, model.config.hidden_size)
    assert model.model.layers[0].mlp.up_proj(x).dtype == torch.float32


def mapped_ranges(path) -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of the file `path` (/proc/self/maps)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(str(path)):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                ranges.append((start, end))
    return ranges


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
def test_conversion_lets_the_checkpoint_file_mapping_go(tmp_path):
    # transformers slices every weight out of one mapping of the safetensors file; the
    # float32 weights left after conversion must be copied out of it, or the mapping
    # (whose decoder pages the conversion made resident) stays for the model's lifetime.
    build_tiny().model.save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    weights = tmp_path / "model.safetensors"

    def in_mapping(tensor) -> bool:
        pointer = tensor.untyped_storage().data_ptr()
        return any(start <= pointer < end for start, end in mapped_ranges(weights))

    assert any(in_mapping(p) for p in model.parameters())  # loaded by mapping the file
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    use_bfloat16_matmuls(model)
    assert not any(in_mapping(p) for p in model.parameters())
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    for name, p in model.named_parameters():
        if p.dtype == torch.float32:
            assert torch.equal(p, before[name]), name


def test_lora_over_bfloat16_matmuls_trains_float32_adapters_only():
    loaded = build_tiny()
    use_bfloat16_matmuls(loaded.model)
    policy = prepare_policy(loaded, "lora", LoraSettings())
    assert isinstance(policy.model, PeftModel) and has_bfloat16_matmuls(policy.model)
    trained = {n: p for n, p in policy.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    assert all(p.dtype == torch.float32 for p in trained.values())


def test_full_finetuning_refuses_bfloat16_weights():
    loaded = build_tiny()
    use_bfloat16_matmuls(loaded.model)
    with pytest.raises(ValueError, match="bfloat16"):
        prepare_policy(loaded, "full", LoraSettings())


def test_first_epoch_ppo_ratio_is_one_within_the_bfloat16_tolerance():
    torch.set_num_threads(1)
    loaded = build_tiny()
    use_bfloat16_matmuls(loaded.model)
    policy = prepare_policy(loaded, "lora", LoraSettings())
    agent = LLMAgent(policy, max_new_tokens=24, seed=7)
    trajectories, _ = collect(
        CORRIDOR, agent, [0, 1, 2, 3], group_size=4, num_envs=16, progress=False
    )
    batch = TokenBatch.from_trajectories(trajectories, loaded.tokenizer.pad_token_id)
    mask = batch.action_mask.bool()
    new = action_logprobs(policy.model, batch, trajectories, share_prefix=True)
    log_ratio = (new.detach() - batch.old_logprobs)[mask].abs()
    assert mask.sum() > 1000
    assert log_ratio.max() <= MAX_LOG_RATIO
    assert log_ratio.mean() <= MEAN_LOG_RATIO


def test_cpu_features_name_the_flags_that_decide_the_precision():
    features = cpu_features()
    for flag in ("amx_bf16", "avx512_bf16", "avx512f"):
        assert f"{flag} yes" in features or f"{flag} no" in features


def test_dtype_fast_picks_bfloat16_products_only_where_native_and_for_lora():
    from creditgym.benchmarks.common import BFLOAT16_PRODUCTS
    from creditgym.benchmarks.run_config import RunConfig
    from creditgym.benchmarks.run_identity import run_name
    from creditgym.benchmarks.run_settings import model_dtype

    native = BFLOAT16_PRODUCTS if native_bfloat16() else "float32"
    assert model_dtype(RunConfig(dtype="fast", model="smollm2-135m")) == native
    # full fine-tuning (small, tiny) keeps float32: the same run as float32
    assert model_dtype(RunConfig(dtype="fast", model="small")) == "float32"
    assert run_name(RunConfig(dtype="fast", model="small")) == run_name(RunConfig(model="small"))
    # auto is unchanged: float32 on a CPU
    assert model_dtype(RunConfig(model="smollm2-135m")) == "float32"
    fast = RunConfig(dtype="fast", model="smollm2-135m")
    float32 = RunConfig(model="smollm2-135m")
    assert (run_name(fast) != run_name(float32)) == native_bfloat16()
