"""Plotting helpers (matplotlib): JCT CDFs, GPUs per type over time, and friends.

Each function draws on a given ``ax`` (or a new figure) and returns the figure, so they work
in notebooks and scripts alike; pass ``path`` to save a PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["jct_cdf", "gpus_over_time", "save"]


def _axes(ax: Any = None):
    import matplotlib

    if ax is None:
        if matplotlib.get_backend().lower() not in ("agg",) and not _in_notebook():
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        return fig, ax
    return ax.figure, ax


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]

        return get_ipython() is not None
    except ImportError:
        return False


def save(fig: Any, path: str | Path | None) -> Any:
    """Save ``fig`` as PNG when ``path`` is given; return the figure."""
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def jct_cdf(results: Sequence[Any], ax: Any = None, path: str | Path | None = None) -> Any:
    """CDF of job completion times (hours, log scale) for several simulation results."""
    fig, ax = _axes(ax)
    for res in results:
        jct = np.sort([j.jct / 3600 for j in res.finished()])
        if jct.size:
            ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post", label=res.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return save(fig, path)


def gpus_over_time(result: Any, ax: Any = None, path: str | Path | None = None) -> Any:
    """Stacked GPUs in use per type over time (hours) for one simulation result."""
    fig, ax = _axes(ax)
    times, per_type = result.gpus_over_time()
    if times.size:
        t0 = times[0]
        ax.stackplot((times - t0) / 3600, *per_type.values(), labels=list(per_type), step="post")
    ax.axhline(sum(result.capacity.values()), color="k", lw=0.8, ls="--", label="capacity")
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs in use")
    ax.set_title(f"{result.policy} on {result.cluster}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return save(fig, path)
