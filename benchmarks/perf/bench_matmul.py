"""The processor's matmul throughput per dtype: what `--dtype fast` can gain on this CPU.

`--dtype fast` computes the decoder's products in bfloat16 only where the processor has
AMX or AVX-512 BF16 (`models/precision.py`); elsewhere bfloat16 is emulated and far slower
than float32, so a run there resolves to float32 (and gets another run folder,
docs/running.md). This script times one product of smollm2-135m's MLP shape (2048 tokens
x 576 by 576 x 1536) in float32 and in bfloat16 and prints GFLOPS with the processor's
features, so the choice can be checked on any machine:

    python -m creditgym.benchmarks.perf.bench_matmul
    python -m creditgym.benchmarks.perf.bench_matmul --threads 2 --repeats 20
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state
from creditgym.models.precision import cpu_features, native_bfloat16


@dataclass(frozen=True)
class BenchArgs:
    """Options of the matmul benchmark."""

    rows: int = 2048
    """Rows of the left factor (tokens of a batch)."""
    inner: int = 576
    """The shared dimension (smollm2-135m's hidden size)."""
    columns: int = 1536
    """Columns of the right factor (smollm2-135m's MLP width)."""
    threads: int = 1
    """torch threads."""
    repeats: int = 5
    """Timed products per dtype, after two untimed ones."""


def gflops(args: BenchArgs, dtype: torch.dtype) -> float:
    """Billions of multiply-adds x 2 per second of `args`' product in `dtype`."""
    generator = torch.Generator().manual_seed(0)
    left = torch.randn(args.rows, args.inner, generator=generator).to(dtype)
    right = torch.randn(args.inner, args.columns, generator=generator).to(dtype)
    for _ in range(2):  # first calls pick kernels and fault pages in
        left @ right
    start = time.perf_counter()
    for _ in range(args.repeats):
        left @ right
    seconds = (time.perf_counter() - start) / args.repeats
    return 2 * args.rows * args.inner * args.columns / seconds / 1e9


def main(args: BenchArgs) -> None:
    torch.set_num_threads(args.threads)
    print(machine_state())
    print(f"processor features: {cpu_features()}; native bfloat16: {native_bfloat16()}")
    print(f"{args.rows}x{args.inner} @ {args.inner}x{args.columns}, {args.threads} thread(s)")
    rates = {dtype: gflops(args, dtype) for dtype in (torch.float32, torch.bfloat16)}
    for dtype, rate in rates.items():
        print(f"{str(dtype).removeprefix('torch.'):>9}: {rate:8.1f} GFLOPS")
    ratio = rates[torch.bfloat16] / rates[torch.float32]
    print(f"bfloat16 / float32: {ratio:.3f}")
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_matmul"))
