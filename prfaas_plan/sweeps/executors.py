"""Where a sweep's cells run: in this process, on a local process pool, or on a dask cluster.

Each executor takes the cells to compute, submits them all at once (before any progress-bar
thread exists) and returns an iterator of ``(cell, record)`` as they finish. A task is one cell,
except that the seeds of a simulated cell share a task where that leaves every worker about two
tasks (the worker then plans once for all of them). A worker lost by the executor fails its
cells with an unsaved record, so a rerun retries them.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prfaas_plan.errors import InvalidInput
from prfaas_plan.sweeps import cells as cell_runner

if TYPE_CHECKING:
    from prfaas_plan.sweeps.grid import Cell

Results = Iterator[tuple["Cell", dict]]
SCHEDULER_TIMEOUT_S = 10.0
"""How long to try to reach a dask scheduler given by its address before saying it cannot be reached."""


def units(todo: list[Cell], slots: int) -> list[list[Cell]]:
    """Tasks: cells sharing a plan go together (the worker plans once), split only as far as
    needed to give each of ``slots`` workers about two tasks. A plan grid is one cell per task."""
    groups: dict[str, list[Cell]] = {}
    for c in todo:
        groups.setdefault(c.plan_key, []).append(c)
    per = max(1, math.ceil(2 * max(1, slots) / max(1, len(groups))))
    out = []
    for cells in groups.values():
        size = math.ceil(len(cells) / min(per, len(cells)))
        out += [cells[i:i + size] for i in range(0, len(cells), size)]
    return out


def run_serial(todo: list[Cell], workers: int | None, scheduler: Any, stack: contextlib.ExitStack) -> Results:
    """In this process, one cell after another (for debugging); the seeds of a cell plan once."""
    def results():
        for unit in units(todo, 1):
            plans: dict = {}
            for cell in unit:
                yield cell, cell_runner.run_cell(cell, plans)

    return results()


def _pool_context():
    """Fork on Linux while this process has a single thread (fast, and scripts need no
    ``if __name__ == "__main__"`` guard); otherwise forkserver (Linux) or the platform default."""
    import multiprocessing as mp
    import threading

    if sys.platform.startswith("linux"):
        if threading.active_count() == 1:
            return mp.get_context("fork")
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["prfaas_plan.sweeps", "prfaas_plan.planner"])
        return ctx
    return mp.get_context()


def _finished(pairs: Iterator[tuple[Callable[[], list[dict]], list[Cell]]]) -> Results:
    """(cell, record) of each finished task, given (its result getter, its cells) as they finish."""
    for result, unit in pairs:
        try:
            recs = result()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - a broken pool or a killed worker fails the task's cells, unsaved
            recs = [cell_runner.lost(c, exc) for c in unit]
        yield from zip(unit, recs)


def run_local(todo: list[Cell], workers: int | None, scheduler: Any, stack: contextlib.ExitStack) -> Results:
    """A process pool of ``workers`` (default one per CPU); every task is submitted now."""
    import concurrent.futures as cf

    tasks = units(todo, workers or os.cpu_count() or 1)
    n = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=_pool_context())
    stack.callback(pool.shutdown, wait=True, cancel_futures=True)
    futures = {pool.submit(cell_runner.run_unit, u): u for u in tasks}
    return _finished((fut.result, futures[fut]) for fut in cf.as_completed(futures))


def check_executor_flags(executor: str, workers: int | None, scheduler: Any, executors: tuple[str, ...]) -> None:
    """One line naming the flag when ``executor`` is not one of ``executors``, ``workers`` is below
    1, a ``scheduler`` comes without dask, or dask is asked for but dask.distributed is missing."""
    import importlib.util

    if executor not in executors:
        raise InvalidInput(f"--executor: {executor!r} is not an executor; use {', '.join(executors)}")
    if workers is not None and workers < 1:
        raise InvalidInput("--workers: give at least 1")
    if scheduler is not None and executor != "dask":
        raise InvalidInput("--scheduler: only with --executor dask")
    if executor == "dask" and importlib.util.find_spec("distributed") is None:
        raise InvalidInput("--executor dask: dask.distributed is not installed; pip install 'prfaas-plan[sweep]'")


def dask_client(workers: int | None, scheduler: Any, stack: contextlib.ExitStack):
    """A client for a scheduler address, a Client, a cluster, or a new LocalCluster; whatever
    is created here is closed when ``stack`` unwinds."""
    import logging

    from dask.distributed import Client, LocalCluster

    if scheduler is None:
        cluster = stack.enter_context(LocalCluster(
            n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
            dashboard_address=None, silence_logs=logging.ERROR))
        return stack.enter_context(Client(cluster))
    if workers is not None:
        raise InvalidInput("--workers: with --scheduler the cluster's own workers run the cells; drop --workers")
    if isinstance(scheduler, Client):
        return scheduler
    if isinstance(scheduler, str):
        try:
            client = Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S}s")
        except (OSError, TimeoutError) as exc:
            raise InvalidInput(f"--scheduler: cannot reach a dask scheduler at {scheduler} ({exc})") from None
        return stack.enter_context(client)
    return stack.enter_context(Client(scheduler))  # a cluster object


def run_dask(todo: list[Cell], workers: int | None, scheduler: Any, stack: contextlib.ExitStack) -> Results:
    """A dask cluster (see :func:`dask_client`); every task is submitted now."""
    from dask.distributed import as_completed

    client = dask_client(workers, scheduler, stack)
    tasks = units(todo, sum(client.nthreads().values()))
    futures = [client.submit(cell_runner.run_unit, u, key=f"prfaas-cells-{u[0].cell_id}-{len(u)}", pure=False)
               for u in tasks]
    stack.callback(lambda: client.cancel([f for f in futures if not f.done()]))
    by_key = {f.key: u for f, u in zip(futures, tasks)}

    def done():
        for fut in as_completed(futures):
            yield fut.result, by_key[fut.key]
            fut.release()

    return _finished(done())


EXECUTORS: dict[str, Callable[[list, int | None, Any, contextlib.ExitStack], Results]] = {
    "local": run_local, "dask": run_dask, "serial": run_serial}
"""The executors by name (:data:`prfaas_plan.vocab.SWEEP_EXECUTORS`)."""
