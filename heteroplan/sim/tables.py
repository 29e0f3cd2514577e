"""Simulation results as pandas DataFrames, for notebooks (rich HTML display) and analysis.

Reads only a result's per-job records (``result.jobs``), its timeline and ``summary()``,
so it works for any simulator that fills a :class:`~heteroplan.sim.metrics.SimResult`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["jobs_frame", "gpus_frame", "summary_frame", "FrameKind"]


class FrameKind(StrEnum):
    """Which table ``to_dataframe`` gives."""

    JOBS = "jobs"  # one row per job
    GPUS = "gpus"  # GPUs in use per type over time (one result)
    SUMMARY = "summary"  # the paper's metrics, one row per result

# column -> the JobRecord attribute it shows; every time has its unit in the column's name
# (the columns were "arrival_time", "start_time", "finish_time", "jct", "queueing_delay", "isolated_time")
_JOB_ATTRIBUTES = {"name": "job_id", "application": "application", "arrival_time_s": "arrival_time",
                   "start_time_s": "start_time", "finish_time_s": "finish_time", "jct_s": "jct_s",
                   "queueing_delay_s": "queueing_delay_s", "restarts": "restarts", "gpu_seconds": "gpu_seconds",
                   "fraction_done": "fraction_done", "isolated_time_s": "isolated_time"}
JOB_COLUMNS = tuple(_JOB_ATTRIBUTES)


def jobs_frame(result: Any) -> pd.DataFrame:
    """One row per job (index: job name); times in seconds (``_s``), ``jct_h`` in hours; NaN when
    unfinished or never started."""
    import pandas as pd

    rows = [{c: getattr(j, a) for c, a in _JOB_ATTRIBUTES.items()} for j in result.jobs]
    frame = pd.DataFrame(rows, columns=list(JOB_COLUMNS)).astype(
        {"jct_s": float, "start_time_s": float, "finish_time_s": float, "queueing_delay_s": float})
    frame["jct_h"] = frame["jct_s"] / 3600
    frame.insert(0, "policy", result.policy)
    return frame.set_index("name")


def gpus_frame(result: Any) -> pd.DataFrame:
    """GPUs in use per type (columns) at each round start (index: simulated time, hours)."""
    import pandas as pd

    times, per_type = result.gpus_over_time()
    frame = pd.DataFrame({k: v for k, v in per_type.items()}, index=pd.Index(times / 3600, name="time_h"))
    frame["total"] = frame.sum(axis=1)
    return frame


def summary_frame(results: Iterable[Any]) -> pd.DataFrame:
    """One row per result (index: policy) with the paper's metrics (:meth:`SimResult.summary`)."""
    import pandas as pd

    return pd.DataFrame([r.summary().to_dict() for r in results]).set_index("policy")
