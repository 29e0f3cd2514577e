"""Sweep results for analysis: a tidy table, per-group means with 95% intervals, plots.

:func:`results_table` has one row per cell: its labels (simulator, workload, family, cluster,
policy, fidelity, seed), status, every metric the simulator reported, wall time (s) and error.
:func:`summarize` groups the finished cells by (cluster, fidelity, policy, workload family) and
gives, per metric, the mean and a Student-t 95% confidence interval over the group's cells
(seeds x workloads).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.errors import InputError

__all__ = ["GROUP", "TIMING_COLUMNS", "format_summary", "plot_bars", "plot_jct_cdf", "results_table", "summarize",
           "write_tables"]

GROUP = ("cluster", "fidelity", "policy", "family")
LABELS = ("simulator", "workload", "family", "cluster", "policy", "fidelity", "seed")
# Columns that measure this machine, not the simulation: they differ from run to run.
TIMING_COLUMNS = ("wall_s", "policy_ms_median", "policy_ms_p95", "policy_time_s")


def results_table(records: Iterable[dict[str, Any]]) -> Any:
    """A pandas DataFrame with a row per cell record (JCT lists stay in the records)."""
    import pandas as pd

    rows = [{**r["labels"], "key": r["key"], "status": r["status"], **r.get("metrics", {}),
             "wall_s": r.get("wall_s"), "error": r.get("error")} for r in records]
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=[*LABELS, "key", "status", "wall_s", "error"])
    return table


def summarize(table: Any, metrics: Sequence[str] | None = None, by: Sequence[str] = GROUP,
              confidence: float = 0.95) -> Any:
    """Long-format summary of the ``status == "ok"`` rows: per group of ``by`` and metric,
    ``n``, ``mean``, ``ci_low``, ``ci_high`` (t-interval at ``confidence``; NaN when n < 2)."""
    import pandas as pd
    from scipy import stats

    if not 0 < confidence < 1:
        raise InputError("confidence", confidence, "must be between 0 and 1")
    ok = table[table["status"] == "ok"] if "status" in table else table
    if metrics is None:
        skip = {*LABELS, "key", "status", "error"}
        metrics = [c for c in ok.columns if c not in skip and pd.api.types.is_numeric_dtype(ok[c])]
    rows = []
    for group, sub in ok.groupby(list(by), sort=True, dropna=False):
        for metric in metrics:
            values = pd.to_numeric(sub[metric], errors="coerce").dropna().to_numpy(dtype=float)
            n = values.size
            mean = float(values.mean()) if n else float("nan")
            low = high = float("nan")
            if n >= 2:
                sem = float(values.std(ddof=1) / np.sqrt(n))
                low, high = (mean, mean) if sem == 0 else stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
            rows.append({**dict(zip(by, group, strict=True)), "metric": metric, "n": n, "mean": mean,
                         "ci_low": float(low), "ci_high": float(high)})
    return pd.DataFrame(rows, columns=[*by, "metric", "n", "mean", "ci_low", "ci_high"])


def format_summary(summary: Any, metrics: Sequence[str] | None = None) -> str:
    """The summary as text: a row per group, ``mean [ci_low, ci_high] (n)`` per metric."""
    import pandas as pd

    if summary.empty:
        return "(no finished cells)"
    metrics = list(metrics) if metrics is not None else list(dict.fromkeys(summary["metric"]))
    sub = summary[summary["metric"].isin(metrics)].copy()
    by = [c for c in summary.columns if c not in ("metric", "n", "mean", "ci_low", "ci_high")]

    def cell(r: Any) -> str:
        ci = "" if np.isnan(r["ci_low"]) else f" [{r['ci_low']:.3g}, {r['ci_high']:.3g}]"
        return f"{r['mean']:.3g}{ci}"

    sub["value"] = sub.apply(cell, axis=1)
    wide = sub.pivot_table(index=[*by, "n"], columns="metric", values="value", aggfunc="first", sort=False)
    wide = wide.reindex(columns=[m for m in metrics if m in wide.columns])
    return pd.DataFrame(wide).reset_index().to_string(index=False)


def write_tables(table: Any, summary: Any, out: str | Path) -> list[Path]:
    """``results.csv`` (+ ``results.parquet`` when pyarrow is installed) and ``summary.csv``."""
    out = Path(out)
    paths = [out / "results.csv", out / "summary.csv"]
    table.to_csv(paths[0], index=False)
    summary.to_csv(paths[1], index=False)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return paths
    table.to_parquet(out / "results.parquet", index=False)
    return [*paths, out / "results.parquet"]


def plot_bars(summary: Any, metric: str, ax: Any = None, path: str | Path | None = None) -> Any:
    """Bars of ``metric``'s mean per workload family (groups) and policy (bars), with 95% intervals."""
    from heteroplan.plots import _axes, save

    sub = summary[summary["metric"] == metric]
    if sub.empty:
        raise InputError("metric", metric, f"not in the summary; known: {sorted(set(summary['metric']))}")
    fig, ax = _axes(ax)
    families = sorted(set(sub["family"]))
    policies = list(dict.fromkeys(sub["policy"]))
    width = 0.8 / len(policies)
    x = np.arange(len(families))
    for i, policy in enumerate(policies):
        rows = sub[sub["policy"] == policy].groupby("family").first().reindex(families)
        mean = rows["mean"].to_numpy(dtype=float)
        err = np.vstack([mean - rows["ci_low"].to_numpy(dtype=float), rows["ci_high"].to_numpy(dtype=float) - mean])
        ax.bar(x + (i - (len(policies) - 1) / 2) * width, mean, width, yerr=np.nan_to_num(err), capsize=3,
               label=policy)
    ax.set_xticks(x, families)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean and 95% interval")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def plot_jct_cdf(records: Iterable[dict[str, Any]], ax: Any = None, path: str | Path | None = None) -> Any:
    """CDF of job completion times (hours, log scale) per policy, pooled over its finished cells."""
    from heteroplan.plots import jct_cdf_of

    pooled: dict[str, list[float]] = {}
    for r in records:
        if r["status"] == "ok":
            pooled.setdefault(r["labels"]["policy"], []).extend(r["jcts"])
    return jct_cdf_of(pooled, ax, path)
