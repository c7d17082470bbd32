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

A gated MLP (SwiGLU: down(silu(gate(x)) * up(x)), Shazeer 2020, "GLU Variants Improve
Transformer", arXiv:2002.05202) whose three maps are converted becomes `BFloat16GatedMLP`:
the same arithmetic, but gate and up stay in the bfloat16 their kernels produced, and the
gating keeps those two for backward instead of three float32 copies (`SiLUGate`): the
update's kept activations fall from about 1.0 to 0.6 MB per token on smollm2-135m, and
three casts per layer go. The output layer's input is made contiguous before its
product: transformers slices the kept positions out of the hidden states, and a strided
3-D input sent the float32 product through a batched matmul over an expanded weight
(0.48 s against ~0.1 s for 198 positions of smollm2). And attention over grouped keys
and values (GQA: smollm2 has 9 query heads over 3) runs through SDPA's own grouping
(`GROUPED_SDPA`) where transformers would copy the keys and values once per query head
because a mask is present: the update keeps a third of them for backward (one KeyDoor
trajectory: 832 -> 689 MB kept), with log-probs unchanged and gradients within float
rounding (6e-7 relative in float32, tests/test_bf16_path.py).
"""

from __future__ import annotations

from functools import cache

import torch
from torch import nn
from torch.nn import functional
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
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


def bfloat16_product(x: torch.Tensor, linear: BFloat16Linear) -> torch.Tensor:
    """`linear`'s product left in the bfloat16 its kernel rounds to: [..., in] -> [..., out]."""
    return functional.linear(x.to(linear.weight.dtype), linear.weight, linear.bias)


# Elements per piece of `SiLUGate`'s float32 work: 1 MiB of float32, so its temporaries
# come from the heap's reused holes and stay in cache, instead of fresh mappings that the
# kernel zeroes page by page (the update maps 4 MiB and up, `trainers.host_memory`).
GATE_PIECE = 1 << 18


class SiLUGate(torch.autograd.Function):
    """silu(gate) * up for bfloat16 gate and up [..., I], computed in float32 and rounded to
    bfloat16, as the unfused ops compute it (float32 copies of the two bfloat16 products,
    then the float32 silu and product, then the next product's bfloat16 cast).

    Backward keeps only the two bfloat16 inputs (the unfused graph keeps three float32
    tensors of the same shape) and runs the same float32 kernels autograd would
    (silu, its backward), so the gradients are the unfused ones too. Both directions
    work through the flattened tensors in pieces of `GATE_PIECE` elements: elementwise,
    so the same values.
    """

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        gated = _empty(gate)
        for g, u, out in _pieces(gate, up, gated):
            out.copy_(functional.silu(g.float()).mul_(u))
        return gated

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        grad_gate, grad_up = _empty(gate), _empty(up)
        for g, u, d, out_gate, out_up in _pieces(gate, up, grad, grad_gate, grad_up):
            g32 = g.float()
            out_up.copy_(functional.silu(g32).mul_(d))
            out_gate.copy_(torch.ops.aten.silu_backward(u.float().mul_(d), g32))
        return grad_gate, grad_up


def _empty(like: torch.Tensor) -> torch.Tensor:
    """A contiguous uninitialised tensor of `like`'s shape, dtype and device."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)


def _pieces(*tensors: torch.Tensor):
    """Matching pieces of `GATE_PIECE` elements of same-shaped tensors, flattened (views
    of the contiguous tensors; an output must already be contiguous, as `_empty`'s are,
    so that writing a piece writes the tensor)."""
    flat = [tensor.contiguous().view(-1) for tensor in tensors]
    for start in range(0, flat[0].numel(), GATE_PIECE):
        yield tuple(tensor[start : start + GATE_PIECE] for tensor in flat)


class BFloat16GatedMLP(nn.Module):
    """Mixin of a converted SwiGLU MLP (transformers' `LlamaMLP` and its kin): x [..., H]
    float32 -> [..., H] float32, through `SiLUGate`. `_fuse_gated_mlp` puts it in front of
    the module's own class, which stays the fallback: a projection that is no longer a
    plain `BFloat16Linear` (peft wrapped it) runs the unfused forward."""

    _unfused_class: type[nn.Module]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projections = (self.gate_proj, self.up_proj, self.down_proj)
        if any(type(projection) is not BFloat16Linear for projection in projections):
            return self._unfused_class.forward(self, x)
        gate = bfloat16_product(x, self.gate_proj)
        gated = SiLUGate.apply(gate, bfloat16_product(x, self.up_proj))
        return bfloat16_product(gated, self.down_proj).to(x.dtype)


def _is_silu_gated_mlp(module: nn.Module) -> bool:
    """Whether `module` is an unfused down(silu(gate(x)) * up(x)) over three converted maps."""
    names = ("gate_proj", "up_proj", "down_proj")
    return (
        not isinstance(module, BFloat16GatedMLP)
        and all(type(getattr(module, name, None)) is BFloat16Linear for name in names)
        and type(getattr(module, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")
    )


# One fused class per original MLP class, so that modules of one model share it.
_FUSED_CLASSES: dict[type, type] = {}


def _fuse_gated_mlp(module: nn.Module) -> None:
    """Fuse `module`'s gating in place: its class becomes a subclass of `BFloat16GatedMLP`
    and of its own class (isinstance checks and state-dict keys stay as they were)."""
    original = type(module)
    if original not in _FUSED_CLASSES:
        _FUSED_CLASSES[original] = type(
            f"BFloat16Gated{original.__name__}",
            (BFloat16GatedMLP, original),
            {"_unfused_class": original},
        )
    module.__class__ = _FUSED_CLASSES[original]


# transformers' name of the attention below; its masks are SDPA's.
GROUPED_SDPA = "sdpa_grouped"


def grouped_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that a masked query block over grouped keys
    and values ([B, H, Lq, D] against [B, H / g, Lk, D], g > 1) lets SDPA group them
    (`enable_gqa`) instead of repeating them g times first (transformers does so on a
    CPU whenever a mask is present). Returns [B, Lq, H, D] and no weights, as transformers'.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    special = any(kwargs.get(name) is not None for name in ("position_bias", "softcap"))
    if groups == 1 or attention_mask is None or query.shape[2] == 1 or special:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    output = functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=True,
    )
    return output.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: nn.Module) -> bool:
    """Switch `model` from transformers' "sdpa" attention to `grouped_sdpa_attention`
    (registered once, with SDPA's masks); returns whether it switched (a model on another
    attention, or without `set_attn_implementation`, stays as it is)."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if GROUPED_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
        AttentionMaskInterface.register(GROUPED_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(GROUPED_SDPA)
    return True


def _contiguous_input(module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: the module's first input made contiguous (see the module docs)."""
    return (args[0].contiguous(), *args[1:])


def use_bfloat16_matmuls(model: nn.Module) -> int:
    """Make the plain linear maps inside `model`'s decoder layers `BFloat16Linear`, in
    place (weights cast to bfloat16), fuse their gated MLPs (`BFloat16GatedMLP`), make
    the output layer's input contiguous and group attention's keys and values inside
    SDPA (`use_grouped_sdpa`); returns how many linear maps were converted.
    Call before adding LoRA: peft wraps them as it wraps any linear map and keeps its
    adapters in float32, and `trainers.core.prepare_policy` refuses to fine-tune the
    converted weights.
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
        for module in layer.modules():
            if _is_silu_gated_mlp(module):
                _fuse_gated_mlp(module)
    if converted:
        _own_remaining_weights(model)
        output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if isinstance(output, nn.Linear):
            output.register_forward_pre_hook(_contiguous_input)
        use_grouped_sdpa(model)
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
