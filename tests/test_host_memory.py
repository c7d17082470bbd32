"""The update's large host allocations are fresh mappings (trainers/host_memory.py)."""

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

# Run in a fresh interpreter: what a request gets depends on the heap's free holes, so
# the check starts from a heap no earlier test has shaped.
PROBE = """
import ctypes, json
import torch
from creditgym.trainers.host_memory import large_tensors_mapped

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2

def mapped_growth(megabytes):
    before = mallinfo2().hblkhd  # bytes malloc holds in mapped chunks
    tensor = torch.empty(megabytes * 2**18)  # float32
    grown = mallinfo2().hblkhd - before
    del tensor
    return grown / 2**20

# A freed 24 MiB mapping raises glibc's own threshold to 24 MiB, as an update's first
# frees do: from then on an 8 MiB tensor comes from the heap.
mapped_growth(24)
out = {"before": mapped_growth(8)}
with large_tensors_mapped() as applies:
    # 16 MiB: larger than the hole the 8 MiB tensor left, which a request would reuse
    out.update(applies=applies, inside=mapped_growth(16), small_inside=mapped_growth(1))
out["after"] = mapped_growth(16)
print(json.dumps(out))
"""


def test_large_tensors_are_mapped_inside_the_block_and_heap_allocated_after():
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    growth = json.loads(result.stdout.strip().splitlines()[-1])
    assert growth["before"] == 0  # glibc's adjusted threshold: the heap
    assert growth["applies"]
    assert growth["inside"] >= 16  # mapped
    assert growth["small_inside"] == 0  # below the update's 4 MiB threshold: the heap
    assert growth["after"] == 0  # the threshold is back at the heap's ceiling


# Freed heap holes between live chunks (not at the heap's top, which free trims itself),
# made resident, then the block entered: its trim hands the holes' pages back.
TRIM_PROBE = """
import ctypes, json, os
from creditgym.trainers.host_memory import large_tensors_mapped

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.mallopt(-3, 32 << 20)  # the threshold an update's frees raise it to: 1 MiB is heap

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

holes, keepers = [], []
for _ in range(256):
    holes.append(libc.malloc(1 << 20))
    ctypes.memset(holes[-1], 1, 1 << 20)
    # keeps each hole off the heap's top; too large for a hole an import left behind
    keepers.append(libc.malloc(128 << 10))
for pointer in holes:
    libc.free(pointer)
out = {"freed": resident_mb()}
with large_tensors_mapped():
    out["inside"] = resident_mb()
print(json.dumps(out))
"""


def test_the_block_returns_the_heaps_free_pages_on_entering():
    result = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    resident = json.loads(result.stdout.strip().splitlines()[-1])
    # 256 MiB of freed holes were resident; the trim returns nearly all of them
    assert resident["freed"] - resident["inside"] >= 200
