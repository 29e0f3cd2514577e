"""Sweeps: a grid of workloads x clusters x policies x fidelities x seeds, run cell by cell.

- :func:`load_sweep` / :func:`parse_sweep`: a sweep TOML file (or its tables) -> :class:`SweepSpec`.
- :func:`run_sweep`: run the unfinished cells in this process, local processes or on Ray,
  writing each cell's record atomically as it finishes (reruns resume).
- :func:`run_cell`: the adapter from one :class:`CellSpec` to the simulators.
- :func:`results_table`, :func:`summarize`, :func:`plot_bars`, :func:`plot_jct_cdf`: analysis.
"""

from heteroplan.sim.sweep.cell import execute_cell, run_cell
from heteroplan.sim.sweep.executors import (
    InProcessExecutor,
    ProcessExecutor,
    RayExecutor,
    make_executor,
)
from heteroplan.sim.sweep.results import plot_bars, plot_jct_cdf, results_table, summarize
from heteroplan.sim.sweep.runner import SweepReport, run_sweep
from heteroplan.sim.sweep.spec import CellSpec, SweepSpec, load_sweep, parse_sweep
from heteroplan.sim.sweep.store import ResultStore

__all__ = [
    "CellSpec",
    "InProcessExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "ResultStore",
    "SweepReport",
    "SweepSpec",
    "execute_cell",
    "load_sweep",
    "make_executor",
    "parse_sweep",
    "plot_bars",
    "plot_jct_cdf",
    "results_table",
    "run_cell",
    "run_sweep",
    "summarize",
]
