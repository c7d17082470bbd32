"""Large tensors of the update mapped from the kernel, so that freed memory leaves the process.

glibc's malloc serves a request above its mmap threshold with a fresh mapping, returned
to the kernel on free, and everything below it from the heap, whose freed holes it keeps
for later requests. The threshold starts at 128 KiB and rises to the size of every mapped
chunk freed, up to 32 MiB (glibc's `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit), so after the
first few frees of a CPU update nearly every activation comes from the heap. The update
of a pretrained policy allocates tensors of a few MB whose lifetimes interleave (the
layer inputs the recompute keeps until backward between the temporaries freed after
each layer), and the heap grows by the holes it cannot reuse. Measured on smollm2-135m +
LoRA with bfloat16 products, KeyDoor delay 4, one GRPO iteration on 1 thread of a 2-core
Xeon (amx_bf16 / avx512_bf16 / avx512f yes), the arithmetic identical (same gradient
norm):
- 8 rollouts, three processes side by side (a probe of
  `benchmarks.perf.bench_pretrained_iteration`'s `measure`, the threshold set through
  `MALLOC_MMAP_THRESHOLD_`): peak RSS 3,264 MB with glibc's default, 1,586 MB at
  256 KiB (update 184 -> 253 s: a mapping is zeroed by the kernel on first touch, a heap
  hole is not); 3,362 / 3,396 / 2,096 MB at default / 16 MiB / 4 MiB with transparent
  huge pages for malloc (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), update 182 / 187 /
  209 s;
- 32 rollouts, `python -m creditgym.benchmarks.perf.bench_pretrained_iteration` (this module on
  the new path, 4 MiB): peak RSS 2,548 MB against 4,080 MB for the old path on the heap,
  where the same new path measured 4,269 MB before this module.

`large_tensors_mapped` fixes the threshold at `UPDATE_MMAP_THRESHOLD` for the update
only and puts the ceiling back afterwards: the rollout's KV caches, which grow by a
column per generated token, stay on the heap (with 256 KiB for the whole process the
8-rollout rollout took 1.3x longer, and its peak did not fall). The arithmetic is
untouched: only where the bytes live changes. Other C libraries (musl, macOS) are left
alone.

On entering, the block also hands the heap's free pages back to the kernel
(`malloc_trim(0)`): the rollout's KV caches are freed by then, but their heap pages stay
resident and the update's peak sits on top of them. One smollm2-135m KeyDoor rollout of
32 episodes left 2,163 MB resident, 915 MB after the trim (an AMD EPYC with AVX-512
BF16, bfloat16 products).
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

# mallopt's parameter number for the mmap threshold (malloc.h).
M_MMAP_THRESHOLD = -3
# Requests of at least this many bytes are mapped during the update (see the docstring's
# figures: 4 MiB keeps most of the saving for a fraction of the zeroing cost of 256 KiB).
UPDATE_MMAP_THRESHOLD = 4 << 20
# What the threshold returns to: the ceiling glibc's own adjustment would reach.
HEAP_MMAP_THRESHOLD = 32 << 20


@cache
def _mallopt():
    """glibc's `mallopt`, or None under another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


@cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None under another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    malloc_trim = ctypes.CDLL(None).malloc_trim
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return malloc_trim


def release_free_heap() -> None:
    """Hand the heap's free pages back to the kernel (`malloc_trim(0)`; glibc only)."""
    malloc_trim = _malloc_trim()
    if malloc_trim is not None:
        malloc_trim(0)


@contextmanager
def large_tensors_mapped(threshold: int = UPDATE_MMAP_THRESHOLD) -> Iterator[bool]:
    """Within the block, host allocations of at least `threshold` bytes are fresh mappings
    returned to the kernel when freed, and the block starts with the heap's free pages
    returned to it. Yields whether that applies (glibc only)."""
    mallopt = _mallopt()
    if mallopt is None or not mallopt(M_MMAP_THRESHOLD, threshold):
        yield False
        return
    release_free_heap()
    try:
        yield True
    finally:
        mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
