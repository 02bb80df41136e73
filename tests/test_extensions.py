"""Compiled extensions: loading one alone gives the package's own object; C-level prints are dropped (quiet)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import scipy
import scipy.special

from prfaas_plan.extensions import load_extension

PROBE = """
import ctypes, sys
from prfaas_plan.quiet import c_stdout_silenced
libc = ctypes.CDLL(None)
print("before", flush=True)
with c_stdout_silenced():
    libc.printf(b"from C inside\\n")
    print("from Python inside")
libc.printf(b"from C after\\n")
libc.fflush(None)
print("after")
"""


def test_c_printf_inside_the_block_is_dropped_and_stdout_works_after():
    # a pipe, as under `prfaas-plan ... --format json | jq`: C's stdio buffers fully there
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["before", "from C after", "after"]


THREADS = """
import ctypes, threading, time
from prfaas_plan.quiet import c_stdout_silenced
libc = ctypes.CDLL(None)
def solve(i):
    with c_stdout_silenced():
        time.sleep(0.01 * (i % 3))
        libc.printf(b"stray %d\\n", i)
workers = [threading.Thread(target=solve, args=(i,)) for i in range(8)]
for w in workers: w.start()
for w in workers: w.join()
print("after", flush=True)
"""


def test_blocks_in_several_threads_leave_stdout_restored():
    out = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["after"]


def test_an_extension_loaded_alone_is_the_packages_code():
    ufuncs = load_extension(Path(scipy.__file__).parent / "special", "_special_ufuncs", "probe._special_ufuncs")
    assert ufuncs is not None and isinstance(ufuncs.ndtr, np.ufunc)
    z = np.linspace(-8, 8, 101)
    assert np.array_equal(ufuncs.ndtr(z), scipy.special.ndtr(z))
    assert load_extension(Path(scipy.__file__).parent / "special", "no_such_module", "probe.none") is None
