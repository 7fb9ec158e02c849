"""validation.uneven.keep_freed_memory: memory freed and taken again is not faulted back in from
the kernel (counted in page faults, not timed). Each case runs in its own process: the setting
is the whole process's. The blocks are glibc's own (malloc, memset, free through ctypes), as
torch's CPU tensors are: through torch the interpreter's and torch's own allocations came
between them, and the counts moved with the heap's layout from run to run (12k to 80k of the
98k pages by default, 2k to 10k kept), where through malloc alone they repeat exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest

ROUNDS, BLOCKS, BLOCK_BYTES = 10, 5, 8_000_000  # 40 MB a round in 8 MB blocks, freed and taken again
PAGES = ROUNDS * BLOCKS * BLOCK_BYTES // 4096  # what the rounds would fault in were nothing kept

SCRIPT = f"""
import ctypes, resource, sys
from validation.uneven.memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else True
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes, libc.memset.argtypes = [ctypes.c_void_p], [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def step():  # a step's buffers: taken, written, freed
    blocks = [libc.malloc({BLOCK_BYTES}) for _ in range({BLOCKS})]
    for b in blocks: libc.memset(b, 1, {BLOCK_BYTES})
    for b in blocks: libc.free(b)
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()  # the first step's
before = faults()
for _ in range({ROUNDS}): step()
print(int(kept), faults() - before)
"""


def page_faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    kept, faults = out.stdout.split()
    return kept == "1", int(faults)


@pytest.mark.slow  # two processes
def test_memory_freed_by_a_step_is_taken_again_without_page_faults():
    kept, faults = page_faults("keep")
    if not kept:
        pytest.skip("this C library has no mallopt (not glibc)")
    _, default = page_faults("default")
    assert default > PAGES * 0.9  # glibc alone gives it back and faults it in again, every round
    assert faults < PAGES // 100  # kept: taken again from the process's own heap
