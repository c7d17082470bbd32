"""bfloat16 matrix products (models/precision.py): what is converted, and the PPO ratio.

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
from creditgym.agents.action_logprobs import action_logprobs
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import TokenBatch
from creditgym.models import precision
from creditgym.models.precision import (
    BFloat16Linear,
    cpu_features,
    has_bfloat16_matmuls,
    native_bfloat16,
    use_bfloat16_matmuls,
)
from creditgym.models.registry import build_tiny
from creditgym.trainers.activation_checkpointing import measure_activation_cost
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


def lora_logits_and_grads(fuse: bool, monkeypatch) -> tuple[torch.Tensor, dict]:
    """tiny with bfloat16 products and LoRA (adapters made non-zero): logits at the last
    5 positions of 3 rows and the adapters' gradients, with the gated MLP fused or not."""
    loaded = build_tiny()
    with monkeypatch.context() as patch:
        if not fuse:
            patch.setattr(precision, "_is_silu_gated_mlp", lambda module: False)
        use_bfloat16_matmuls(loaded.model)
    torch.manual_seed(1)
    model = prepare_policy(loaded, "lora", LoraSettings()).model
    for name, parameter in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.02)
    input_ids = torch.randint(10, 200, (3, 48), generator=torch.Generator().manual_seed(0))
    logits = model(input_ids=input_ids, logits_to_keep=5, use_cache=False).logits
    logits.square().sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def test_fused_gated_mlp_is_the_same_arithmetic(monkeypatch):
    fused_logits, fused_grads = lora_logits_and_grads(True, monkeypatch)
    logits, grads = lora_logits_and_grads(False, monkeypatch)
    assert torch.equal(fused_logits, logits)  # bit for bit, not within a tolerance
    assert fused_grads.keys() == grads.keys() and len(grads) > 0
    for name, grad in grads.items():
        assert torch.equal(fused_grads[name], grad), name
    # the fused class is used, and stays an instance of the model's own MLP class
    model = build_tiny().model
    mlp_class = type(model.model.layers[0].mlp)
    use_bfloat16_matmuls(model)
    assert all(
        isinstance(layer.mlp, precision.BFloat16GatedMLP) and isinstance(layer.mlp, mlp_class)
        for layer in model.model.layers
    )


def test_fused_gated_mlp_falls_back_where_peft_wraps_a_projection():
    loaded = build_tiny()
    use_bfloat16_matmuls(loaded.model)
    mlp_lora = LoraSettings(target_modules=("gate_proj", "up_proj", "down_proj"))
    model = prepare_policy(loaded, "lora", mlp_lora).model
    mlp = model.base_model.model.model.layers[0].mlp
    assert isinstance(mlp, precision.BFloat16GatedMLP)
    x = torch.randn(2, 4, model.config.hidden_size)
    with torch.no_grad():  # non-zero adapters, so that skipping them would show
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    expected = mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
    assert torch.equal(mlp(x), expected)


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
    from creditgym.benchmarks.run import RunConfig, resolve

    native = BFLOAT16_PRODUCTS if native_bfloat16() else "float32"
    assert resolve(RunConfig(dtype="fast", model="smollm2-135m")).dtype == native
    # full fine-tuning (small, tiny) keeps float32: the same run as float32
    assert resolve(RunConfig(dtype="fast", model="small")).dtype == "float32"
    assert (
        resolve(RunConfig(dtype="fast", model="small")).name
        == resolve(RunConfig(model="small")).name
    )
    # auto is unchanged: float32 on a CPU
    assert resolve(RunConfig(model="smollm2-135m")).dtype == "float32"
    fast = RunConfig(dtype="fast", model="smollm2-135m")
    float32 = RunConfig(model="smollm2-135m")
    assert (resolve(fast).name != resolve(float32).name) == native_bfloat16()


def grouped_query_model() -> torch.nn.Module:
    """A random 2-layer Llama with 4 query heads over 2 key-value heads (float32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).eval()


def test_grouped_sdpa_equals_repeated_keys_and_keeps_fewer():
    model = grouped_query_model()
    input_ids = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :7] = 0  # left padding: the mask that made transformers repeat

    def run():
        model.zero_grad(set_to_none=True)
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=6, use_cache=False
        ).logits
        logits.square().mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    repeated_logits, repeated_grads = run()
    repeated_cost = measure_activation_cost(model)
    assert precision.use_grouped_sdpa(model)
    assert model.config._attn_implementation == precision.GROUPED_SDPA
    logits, grads = run()
    torch.testing.assert_close(logits, repeated_logits, rtol=1e-5, atol=1e-5)
    for grad, repeated in zip(grads, repeated_grads, strict=True):
        torch.testing.assert_close(grad, repeated, rtol=1e-4, atol=1e-6)
    # keys and values kept once per key-value head, not once per query head
    assert measure_activation_cost(model).per_token < repeated_cost.per_token
    assert not precision.use_grouped_sdpa(model)  # already switched: nothing to do
