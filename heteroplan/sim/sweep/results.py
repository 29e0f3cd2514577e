"""Sweep results for analysis: a tidy table, per-group means with 95% intervals, plots.

:func:`results_table` has one row per cell: its labels (simulator, workload, family, cluster,
policy, fidelity, seed), status, every metric the simulator reported, wall time (s) and error.
:func:`summarize` groups the finished cells by (cluster, fidelity, policy, workload) and gives,
per metric, the mean over the group's seeds and, from 3 seeds on, a Student-t 95% confidence
interval clipped to the metric's physical range (utilisation in [0, 1], times >= 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.atomic_json import write_bytes_atomic, write_text_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import real_value
from heteroplan.sim.quantities import Quantity, quantity

__all__ = ["BY_FAMILY", "GROUP", "TIMING_COLUMNS", "format_summary", "plot_bars", "plot_jct_cdf", "results_table", "summarize",
           "write_tables"]

GROUP = ("cluster", "fidelity", "policy", "family", "workload")
# Pools the workloads of a trace (a paper's per-trace figure): the interval then spans the
# workloads' spread, not the seeds'. Pass it as ``by`` only to compare with such figures.
BY_FAMILY = ("cluster", "fidelity", "policy", "family")
LABELS = ("simulator", "workload", "family", "cluster", "policy", "fidelity", "seed")
# Columns that measure this machine, not the simulation: they differ from run to run.
TIMING_COLUMNS = ("wall_s", "policy_ms_median", "policy_ms_p95", "policy_time_s")


def results_table(records: Iterable[dict[str, Any]]) -> Any:
    """A pandas DataFrame with a row per cell record (JCT lists stay in the records): the records
    a :class:`~heteroplan.sim.sweep.store.ResultStore` or ``SweepReport.records`` gives, not a path."""
    import pandas as pd

    if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
        raise InputError("records", records, "must be cell records (ResultStore(out).records(keys) or "
                         "report.records), not a path or one record")
    records = list(records)
    for r in records:
        if not (isinstance(r, Mapping) and isinstance(r.get("labels"), Mapping) and "key" in r and "status" in r):
            raise InputError("records", r, "each must be a cell record (a dict with labels, key and status)")
    rows = [{**r["labels"], "key": r["key"], "status": r["status"], **_current_names(r.get("metrics", {})),
             "wall_s": r.get("wall_s"), "error": r.get("error")} for r in records]
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=[*LABELS, "key", "status", "wall_s", "error"])
    return table


def _current_names(metrics: dict[str, Any]) -> dict[str, Any]:
    """A stored record's metrics under today's names (records written before a rename keep
    their old keys: ``avg_queuing_delay_h`` -> ``avg_queueing_delay_h``; read, never written)."""
    return {_FORMER_KEYS.get(k, k): v for k, v in metrics.items()}


# Metric keys of records stored before a rename: former key -> key.
_FORMER_KEYS = {"avg_queuing_delay_h": "avg_queueing_delay_h"}


def summarize(table: Any, metrics: Sequence[str] | None = None, by: Sequence[str] = GROUP,
              confidence: float = 0.95) -> Any:
    """Long-format summary of the ``status == "ok"`` rows: per group of ``by`` (default one
    workload on one cluster under one policy and fidelity: its seeds) and metric, ``n``,
    ``mean``, ``ci_low``, ``ci_high`` and ``ci_method``.

    The interval is Student's t at ``confidence`` over the group's ``n`` values, only when
    ``n >= MIN_N`` (3; NaN and an empty ``ci_method`` below), and clipped to the metric's
    physical range (:mod:`heteroplan.sim.quantities`: utilisation in [0, 1], times >= 0);
    ``ci_method`` says ``"t"`` or ``"t, clipped to [lo, hi]"``. Pooling workloads into one
    interval (``by`` with ``"family"`` but not ``"workload"``) mixes two sources of spread:
    the interval then is not one over seeds.
    """
    import pandas as pd
    from scipy import stats

    if not isinstance(table, pd.DataFrame):  # results_table(records) makes one
        raise InputError("table", type(table).__name__, "must be a pandas DataFrame (results_table(records))")
    if not 0 < real_value(confidence) < 1:  # "0.9" was a TypeError
        raise InputError("confidence", confidence, "must be between 0 and 1")
    ok = table[table["status"] == "ok"] if "status" in table else table
    by = [c for c in by if c in ok.columns]
    if metrics is None:
        skip = {*LABELS, "key", "status", "error"}
        metrics = [c for c in ok.columns if c not in skip and pd.api.types.is_numeric_dtype(ok[c])]
    rows = []
    groups = ok.groupby(by, sort=True, dropna=False) if by else [((), ok)]
    for group, sub in groups:
        group = group if isinstance(group, tuple) else (group,)
        for metric in metrics:
            values = pd.to_numeric(sub[metric], errors="coerce").dropna().to_numpy(dtype=float)
            n = values.size
            mean = float(values.mean()) if n else float("nan")
            low, high, method = _interval(values, quantity(metric), confidence, stats)
            rows.append({**dict(zip(by, group, strict=True)), "metric": metric, "n": n, "mean": mean,
                         "ci_low": low, "ci_high": high, "ci_method": method})
    return pd.DataFrame(rows, columns=[*by, *SUMMARY_COLUMNS])


# The columns summarize() adds after the group's labels.
SUMMARY_COLUMNS = ("metric", "n", "mean", "ci_low", "ci_high", "ci_method")
MIN_N = 3  # fewer values than this: no interval (a t-interval on 2 values spans most of any range)


def _interval(values: np.ndarray, q: Quantity, confidence: float, stats: Any) -> tuple[float, float, str]:
    """(low, high, method) of the t-interval of ``values``' mean, clipped to ``q``'s range."""
    n = values.size
    if n < MIN_N:
        return float("nan"), float("nan"), ""
    mean = float(values.mean())
    sem = float(values.std(ddof=1) / np.sqrt(n))
    low, high = (mean, mean) if sem == 0 else (float(v) for v in stats.t.interval(confidence, n - 1, loc=mean,
                                                                                     scale=sem))
    if q.clip(low) == low and q.clip(high) == high:
        return low, high, "t"
    return q.clip(low), q.clip(high), f"t, clipped to [{q.lower:g}, {q.upper:g}]"


def format_summary(summary: Any, metrics: Sequence[str] | None = None) -> str:
    """The summary as text: a row per group with its ``n``, ``mean [ci_low, ci_high]`` per metric
    (the mean alone where ``n < 3``), and a line saying what the interval is."""
    import pandas as pd

    if summary.empty:
        return "(no finished cells)"
    metrics = list(metrics) if metrics is not None else list(dict.fromkeys(summary["metric"]))
    sub = summary[summary["metric"].isin(metrics)].copy()
    by = [c for c in summary.columns if c not in SUMMARY_COLUMNS]

    def cell(r: Any) -> str:
        ci = "" if np.isnan(r["ci_low"]) else f" [{r['ci_low']:.3g}, {r['ci_high']:.3g}]"
        return f"{r['mean']:.3g}{ci}"

    sub["value"] = sub.apply(cell, axis=1)
    wide = sub.pivot_table(index=[*by, "n"], columns="metric", values="value", aggfunc="first", sort=False)
    wide = wide.reindex(columns=[m for m in metrics if m in wide.columns])
    text = pd.DataFrame(wide).reset_index().to_string(index=False)
    methods = sub["ci_method"] if "ci_method" in sub else [""] * len(sub)  # a summary.csv of an older version
    clipped = sorted({m for m, method in zip(sub["metric"], methods, strict=True) if "clipped" in str(method)})
    note = (f"mean [95% Student-t interval over the n seeds of each workload; none for n < {MIN_N}"
            + (f"; clipped to the metric's range: {', '.join(clipped)}" if clipped else "") + "]")
    return f"{text}\n{note}"


def write_tables(table: Any, summary: Any, out: str | Path) -> list[Path]:
    """``results.csv`` (+ ``results.parquet`` when pyarrow is installed) and ``summary.csv``."""
    out = Path(out)
    paths = [out / "results.csv", out / "summary.csv"]
    write_text_atomic(paths[0], table.to_csv(index=False), root=out)
    write_text_atomic(paths[1], summary.to_csv(index=False), root=out)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return paths
    write_bytes_atomic(out / "results.parquet", table.to_parquet(index=False), root=out)
    return [*paths, out / "results.parquet"]


def plot_bars(summary: Any, metric: str, ax: Any = None, path: str | Path | None = None,
              colors: Mapping[str, Any] | None = None) -> Any:
    """Bars of ``metric``'s mean per workload (groups; per family for an older summary without
    a workload column) and policy (bars), with the summary's intervals as error bars where it
    has one (``n >= 3``). Axis and title carry the metric's label and unit; ``colors``
    (policy -> colour, default :func:`heteroplan.plots.policy_colors` of the policies drawn)
    keeps a policy's colour the same across figures."""
    from heteroplan.plots import _axes, policy_colors, save

    sub = summary[summary["metric"] == metric]
    if sub.empty:
        raise InputError("metric", metric, f"not in the summary; known: {sorted(set(summary['metric']))}")
    q = quantity(metric)
    fig, ax = _axes(ax)
    column = "workload" if "workload" in sub.columns else "family"
    groups = sorted(set(sub[column]))
    policies = list(dict.fromkeys(sub["policy"]))
    colors = colors if colors is not None else policy_colors(policies)
    width = 0.8 / len(policies)
    x = np.arange(len(groups))
    for i, policy in enumerate(policies):
        rows = sub[sub["policy"] == policy].groupby(column).first().reindex(groups)
        mean = rows["mean"].to_numpy(dtype=float)
        err = np.vstack([mean - rows["ci_low"].to_numpy(dtype=float), rows["ci_high"].to_numpy(dtype=float) - mean])
        ax.bar(x + (i - (len(policies) - 1) / 2) * width, mean, width, yerr=np.nan_to_num(err), capsize=3,
               label=policy, color=colors.get(policy))
    ax.set_xticks(x, groups)
    ax.set_xlabel(column)
    ax.set_ylabel(q.axis_label)
    n = sorted({int(v) for v in sub["n"]})
    ns = f"n = {n[0]}" if len(n) == 1 else f"n = {n[0]}-{n[-1]}"
    ax.set_title(f"{q.axis_label}: mean over seeds ({ns}), 95% t-interval where n \u2265 {MIN_N}")
    if q.lower == 0:
        ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def plot_jct_cdf(records: Iterable[dict[str, Any]], ax: Any = None, path: str | Path | None = None,
                 colors: Mapping[str, Any] | None = None) -> Any:
    """CDF of job completion times (hours, log scale) per policy, pooled over its finished cells
    (``colors``: policy -> colour, as in :func:`plot_bars`)."""
    from heteroplan.plots import jct_cdf_of

    pooled: dict[str, list[float]] = {}
    for r in records:
        if r["status"] == "ok":
            pooled.setdefault(r["labels"]["policy"], []).extend(r["jcts"])
    return jct_cdf_of(pooled, ax, path, title="JCT CDF, pooled over each policy's cells", colors=colors)
