"""bfloat16 matrix products for a float32 policy, where the CPU computes them natively.

On a CPU with AMX or AVX-512 BF16 a bfloat16 matmul runs several times faster than a
float32 one (a 2048x576 by 576x1536 product on 2 threads of a Xeon with AMX: 512 against
136 GFLOPS, torch 2.13); without them (an AMD EPYC without AVX-512) it is emulated and
slower, so float32 stays. `use_bfloat16_matmuls` turns a model's decoder-layer linear
maps into `BFloat16Linear`: weights stored in bfloat16, the input rounded to bfloat16,
products accumulated in float32 by the kernel, the output returned in float32
(Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training",
arXiv:1905.12322). Everything else stays float32: embeddings, norms, the residual
stream, attention's softmax, and the output layer, so a logit is never rounded to
bfloat16's 8 bits (at |logit| ~ 20 that would be steps of 0.125 in a log-prob).

The exact-token contract holds because rollouts and the update run the same model
object, hence the same arithmetic: the recorded behaviour log-probs and the update's
log-probs differ only where a product's float32 accumulation, done in another order
for another batch shape, rounds to a neighbouring bfloat16 value
(tests/test_bf16_path.py bounds the PPO ratio of the first epoch).

Only frozen weights are converted: an optimiser must not step bfloat16 weights, so
this is for LoRA (the adapters stay float32) or for inference.
"""

from __future__ import annotations

from functools import cache

import torch
from torch import nn
from torch.nn import functional
from transformers.modeling_layers import GradientCheckpointingLayer

# /proc/cpuinfo flags that give native bfloat16 products (AMX tiles, AVX-512 BF16 dot
# products), and the AVX-512 foundation flag printed beside them.
BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")
REPORTED_FLAGS = (*BFLOAT16_FLAGS, "avx512f")


@cache
def cpu_flags() -> frozenset[str]:
    """The processor's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_features() -> str:
    """`amx_bf16 yes, avx512_bf16 yes, avx512f yes`: the flags that decide the matmul
    precision, for printing beside figures."""
    flags = cpu_flags()
    return ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in REPORTED_FLAGS)


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX-512 BF16)."""
    return any(flag in cpu_flags() for flag in BFLOAT16_FLAGS)


class BFloat16Linear(nn.Linear):
    """`nn.Linear` computed in bfloat16: x [..., in] (float32) -> [..., out] float32.

    The weight is stored in bfloat16; the input is rounded to bfloat16 and the kernel
    accumulates in float32 before rounding its output to bfloat16. Backward runs the
    same bfloat16 products for the input's gradient.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return functional.linear(x.to(self.weight.dtype), self.weight, self.bias).to(x.dtype)


def use_bfloat16_matmuls(model: nn.Module) -> int:
    """Make the plain linear maps inside `model`'s decoder layers `BFloat16Linear`, in
    place (weights cast to bfloat16); returns how many. Call before adding LoRA: peft
    wraps them as it wraps any linear map and keeps its adapters in float32, and
    `trainers.core.prepare_policy` refuses to fine-tune the converted weights.
    """
    converted = 0
    for layer in model.modules():
        if not isinstance(layer, GradientCheckpointingLayer):
            continue
        for module in layer.modules():
            if type(module) is nn.Linear:
                module.__class__ = BFloat16Linear
                module.to(torch.bfloat16)
                converted += 1
    if converted:
        _own_remaining_weights(model)
    return converted


@torch.no_grad()
def _own_remaining_weights(model: nn.Module) -> None:
    """Copy the weights left in float32 (embeddings, norms, the output layer) out of the
    checkpoint's file mapping. transformers maps a safetensors file once and slices every
    weight out of that one mapping; the conversion read (so made resident) every float32
    decoder page, and the mapping lives as long as any weight still points into it.
    Owning those few weights lets it go: about 300 MB less resident memory for
    smollm2-135m (1,010 -> 714 MB after loading and converting)."""
    for parameter in model.parameters():
        if parameter.dtype != torch.bfloat16:
            parameter.data = parameter.data.clone()


def has_bfloat16_matmuls(model: nn.Module) -> bool:
    """Whether `use_bfloat16_matmuls` converted any of `model`'s linear maps."""
    return any(isinstance(module, BFloat16Linear) for module in model.modules())
