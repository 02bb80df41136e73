"""C-level stdout silenced around compiled solvers, so that nothing they print reaches our output.

HiGHS prints some lines with C's ``printf`` whatever its output options say (e.g.
``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``,
https://github.com/ERGO-Code/HiGHS/issues/2783), which would corrupt ``--format json`` on stdout.
Inside :func:`c_stdout_silenced` file descriptor 1 points at the null device.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

_LOCK = threading.RLock()  # fd 1 is one per process: blocks in several threads nest, not interleave


@contextlib.contextmanager
def c_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 points at the null device inside the block: what compiled code prints
    with ``printf`` there is dropped, and so is what Python prints there (both are flushed before
    the descriptor is restored). Blocks in several threads are serialised by a lock. A no-op where
    stdout has no file descriptor (e.g. under a notebook's kernel)."""
    with _LOCK:
        try:
            sys.stdout.flush()
            saved = os.dup(1)
        except (OSError, ValueError, AttributeError):
            yield
            return
        try:
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 1)
            yield
        finally:
            try:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    sys.stdout.flush()
                _flush_c_stdio()  # what C buffered inside the block goes to the null device, not after it
            finally:
                os.dup2(saved, 1)
                os.close(saved)


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: C's stdio buffers written out (where the C library can be found)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).fflush(None)
