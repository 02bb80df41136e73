"""Parameter sweeps: a grid of scenario variants planned (or simulated) in parallel, resumably.

A **grid** (a YAML file or a dict) names a base scenario and the axes to vary::

    scenario: paper-case-study          # built-in id, or a path (relative to the grid file)
    run: plan                           # plan | simulate
    mode: exact                         # planner mode for every cell (or make it an axis)
    axes:                               # any dotted scenario field; also mode, n_buckets, duration_s, policy
      link.gbps: [10, 25, 50, 100]
      prfaas.gpus: [16, 32, 48]
    fixed: {workload.sigma: 1.0}        # overrides applied to every cell
    # simulate only: seeds: 3 (or a list), duration_s: 600, policy: fixed|short|dual
    # both: load: 0.8 (sets the scenario's load), n_buckets: 128

Cells are the product of the axes (times the seeds for ``run: simulate``), every one built and
validated before anything runs. They run on a local process pool, a dask.distributed cluster, or
in this process; finished cells are kept beside the output and reused by a rerun. A cell whose
planner finds no deployment (:class:`~prfaas_plan.errors.Infeasible`) is recorded with status
``infeasible``; bad input is status ``error``; a crash or a lost worker is an unsaved ``error``,
retried on resume.

The package, one idea a module:

* :mod:`.grid` -- the grid file and its cells (:func:`expand_grid`);
* :mod:`.cells` -- one cell run on a worker (:func:`run_cell`), its outputs and status;
* :mod:`.executors` -- serial, local process pool, dask;
* :mod:`.results` -- the resumable sidecar, the results table and its parquet;
* :mod:`.run` -- :func:`sweep` itself;
* :mod:`.heatmaps` -- the table a sweep's heatmap page shows (the page: ``prfaas_plan.report.sweep_page``).
"""

from __future__ import annotations

from prfaas_plan.sweeps.cells import STATUSES, plan_outputs, run_cell, run_unit, summary_outputs
from prfaas_plan.sweeps.grid import Cell, GridSpec, expand_grid, grid_axes
from prfaas_plan.sweeps.heatmaps import HeatmapData, heatmap_data
from prfaas_plan.sweeps.results import read_results, read_sidecar, sidecar_dir
from prfaas_plan.sweeps.run import sweep

__all__ = [
    "STATUSES", "Cell", "GridSpec", "HeatmapData", "expand_grid", "grid_axes", "heatmap_data", "plan_outputs",
    "read_results", "read_sidecar", "run_cell", "run_unit", "sidecar_dir", "summary_outputs", "sweep",
]
