"""Large tensors of the update mapped from the kernel, so that freed memory leaves the process.

glibc's malloc serves a request above its mmap threshold with a fresh mapping, returned
to the kernel on free, and everything below it from the heap, whose freed holes it keeps
for later requests. The threshold starts at 128 KiB and rises to the size of every mapped
chunk freed, up to 32 MiB (glibc's `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit), so after the
first few frees of a CPU update nearly every activation comes from the heap. The update
of a pretrained policy allocates tensors of a few MB whose lifetimes interleave (the
layer inputs the recompute keeps until backward between the temporaries freed after
each layer), and the heap grows by the holes it cannot reuse: measured on smollm2-135m +
LoRA, KeyDoor delay 4, 8 rollouts, one GRPO update on 1 thread (three processes side by
side on a 2-core Xeon, amx_bf16 / avx512_bf16 / avx512f yes), peak RSS 3,362 MB with the
default behaviour, 2,096 MB with the threshold fixed at 4 MiB, 1,586 MB at 256 KiB; the
update took 182, 209 and 224-253 s (a mapping is zeroed by the kernel on first touch,
a heap hole is not).

`large_tensors_mapped` fixes the threshold at `UPDATE_MMAP_THRESHOLD` for the update
only and puts the ceiling back afterwards (the rollout's many small KV-cache growths stay
on the heap, where they cost nothing). The arithmetic is untouched: only where the bytes
live changes. Other C libraries (musl, macOS) are left alone.
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


@contextmanager
def large_tensors_mapped(threshold: int = UPDATE_MMAP_THRESHOLD) -> Iterator[bool]:
    """Within the block, host allocations of at least `threshold` bytes are fresh mappings
    returned to the kernel when freed. Yields whether that applies (glibc only)."""
    mallopt = _mallopt()
    if mallopt is None or not mallopt(M_MMAP_THRESHOLD, threshold):
        yield False
        return
    try:
        yield True
    finally:
        mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
