"""Plotting helpers (matplotlib): JCT CDFs, GPUs per type over time, 1F1B pipeline timelines,
cost/throughput Pareto fronts.

Each function draws on a given ``ax`` (or a new figure) and returns the figure, so they work
in notebooks and scripts alike; pass ``path`` to save a PNG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.errors import InputError

__all__ = ["jct_cdf", "jct_cdf_of", "gpus_over_time", "pipeline_timeline", "cost_throughput_front", "policy_colors",
           "save"]


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
    """Save ``fig`` when ``path`` is given (atomically; PNG, or the format its suffix names); return the figure."""
    if path is not None:
        import io

        from heteroplan.atomic_json import write_bytes_atomic

        buffer = io.BytesIO()
        fig.savefig(buffer, format=Path(path).suffix[1:].lower() or "png", dpi=120, bbox_inches="tight")
        write_bytes_atomic(path, buffer.getvalue())
    return fig


def policy_colors(policies: Iterable[str]) -> dict[str, str]:
    """A stable colour per policy: the sorted distinct names take the ``tab10`` colours in turn
    (``tab20`` beyond ten), so every figure drawn from the same set of policies agrees, whatever
    order or subset each figure draws them in. Pass the whole run's policies when a figure may
    lack some of them."""
    import matplotlib

    names = sorted(set(policies))
    cmap = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: matplotlib.colors.to_hex(cmap(i % cmap.N)) for i, name in enumerate(names)}


def jct_cdf(results: Sequence[Any], ax: Any = None, path: str | Path | None = None,
            title: str | None = None, colors: Mapping[str, Any] | None = None) -> Any:
    """CDF of job completion times (hours, log scale) for several simulation results.

    The log axis is labelled in plain hours (0.1, 1, 10), not powers of ten; the title names
    the cluster and job count unless ``title`` is given; ``colors`` as in :func:`jct_cdf_of`.
    """
    if title is None and results:
        title = f"JCT CDF: {len(results[0].jobs)} jobs on {results[0].cluster}"
    return jct_cdf_of({res.policy: [j.jct_s for j in res.finished()] for res in results}, ax, path, title, colors)


def jct_cdf_of(jcts: Mapping[str, Sequence[float]], ax: Any = None, path: str | Path | None = None,
               title: str | None = None, colors: Mapping[str, Any] | None = None) -> Any:
    """CDF of job completion times (given in seconds, drawn in hours, log scale), one line per label.

    ``colors``: label -> colour (default :func:`policy_colors` of the labels). Ticks read as
    plain numbers; when the times span less than a decade the intermediate ticks (2, 3, 5 x
    a power of ten) are labelled too, so the axis always shows at least two values.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, ax = _axes(ax)
    colors = colors if colors is not None else policy_colors(jcts)
    low, high = np.inf, -np.inf
    for label, values in jcts.items():
        jct = np.sort(np.asarray(values, dtype=float)) / 3600
        jct = jct[np.isfinite(jct) & (jct > 0)]
        if jct.size:
            ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post", label=label, color=colors.get(label))
            low, high = min(low, jct[0]), max(high, jct[-1])
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    if np.isfinite(low) and high / low < 10:  # under a decade: label 2, 3, 5 x 10^k as well
        ax.xaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0)))
        ax.xaxis.set_minor_formatter(FuncFormatter(_plain_number))
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("fraction of jobs finished")
    ax.set_ylim(0, 1.02)
    ax.set_title(title or "JCT CDF")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    return save(fig, path)


def _plain_number(value: float, _pos: Any = None) -> str:
    """``0.01, 0.1, 1, 10, 100`` rather than ``10^-2 ... 10^2`` (tick labels)."""
    return f"{value:g}" if value >= 1e-3 else f"{value:.0e}"


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


def pipeline_timeline(
    plan_or_result: Any,
    replica: int | None = None,
    ax: Any = None,
    path: str | Path | None = None,
    *,
    max_microbatches: int | None = None,
    **schedule_kwargs: Any,
) -> Any:
    """Gantt chart of the 1F1B schedule of one pipeline replica (seconds).

    One row per stage (stage 0 on top): forward blocks, backward blocks and, in grey,
    point-to-point transfers; times from the planner simulator's per-stage compute and comm
    (:func:`heteroplan.planner.model.schedule.pipeline_schedule`). Blocking transfers sit behind the
    ops that receive and send them; on a replayed replica (buffered sends) each transfer is a thin
    bar under its sender's row, from when it went on the wire to when it landed (it may overlap
    the sender's compute).

    Args:
        plan_or_result: a ``Plan``, a ``PlanResult`` or a ``PipelineSchedule``.
        replica: pipeline replica; default the slowest.
        max_microbatches: draw only the first microbatches' forwards and backwards (long
            pipelines); the schedule itself is not truncated.
        schedule_kwargs: passed to ``pipeline_schedule`` (``config``, ``profile``, ...).

    The bars are ``ax.containers`` labelled ``"forward"``, ``"backward"``, ``"comm"``.
    """
    from heteroplan.planner.model.schedule import PipelineSchedule, pipeline_schedule

    sched = (
        plan_or_result
        if isinstance(plan_or_result, PipelineSchedule)
        else pipeline_schedule(plan_or_result, replica, **schedule_kwargs)
    )
    S, M = sched.num_stages, sched.num_microbatches
    if max_microbatches is not None:
        if isinstance(max_microbatches, bool) or not isinstance(max_microbatches, int) or max_microbatches < 1:
            raise InputError("max_microbatches", max_microbatches, "must be an integer >= 1")
        M = min(M, max_microbatches)
    new_figure = ax is None
    fig, ax = _axes(ax)
    if new_figure:
        fig.set_size_inches(8.0, 1.5 + 0.5 * S)
    rows = np.repeat(np.arange(S), M)
    fs, fe = sched.forward_start[:, :M], sched.forward_end[:, :M]
    bs, be = sched.backward_start[:, :M], sched.backward_end[:, :M]
    h = 0.8
    _draw_transfers(ax, sched, M, h)
    ax.barh(rows, (fe - fs).ravel(), left=fs.ravel(), height=h, color="tab:blue", edgecolor="white", lw=0.5,
            label="forward")
    ax.barh(rows, (be - bs).ravel(), left=bs.ravel(), height=h, color="tab:orange", edgecolor="white", lw=0.5,
            label="backward")
    if M <= 16 and S <= 16:
        for start, end in ((fs, fe), (bs, be)):
            for s in range(S):
                for m in range(M):
                    ax.text((start[s, m] + end[s, m]) / 2, s, str(m), ha="center", va="center", fontsize=6,
                            color="white")
    ax.set_yticks(range(S))
    ax.set_yticklabels([f"stage {s}" + (f"\n{sched.labels[s]}" if sched.labels else "") for s in range(S)],
                       fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    text = f"1F1B schedule, {sched.num_microbatches} microbatches: {sched.makespan:.3g} s"
    if sched.replica >= 0:
        text = f"replica {sched.replica}, " + text
    if np.isfinite(sched.simulated_time):
        text += f" (simulator: {sched.simulated_time:.3g} s)"
    ax.set_title(text, fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()
    return save(fig, path)


def _draw_transfers(ax: Any, sched: Any, M: int, h: float) -> None:
    """The ``"comm"`` bars of :func:`pipeline_timeline` for the first ``M`` microbatches (``h``:
    the ops' bar height): on a replayed replica the transfers as they crossed, under the sender's
    row; on a blocking one a receive before each op and a send after it (zero-length ones dropped)."""
    if sched.transfers is not None:
        t = sched.transfers[(sched.transfers[:, 2] < M) & (sched.transfers[:, 4] > sched.transfers[:, 3])]
        ax.barh(t[:, 0] + h / 2 + 0.05, t[:, 4] - t[:, 3], left=t[:, 3], height=0.1, color="0.5", label="comm")
        return
    S, c = sched.num_stages, sched.comm
    fs, fe = sched.forward_start[:, :M], sched.forward_end[:, :M]
    bs, be = sched.backward_start[:, :M], sched.backward_end[:, :M]
    recv_f, send_f = np.broadcast_to(c[:S, None], fs.shape), np.broadcast_to(c[1:, None], fs.shape)
    recv_b, send_b = send_f, recv_f
    comm_left = np.concatenate([fs - recv_f, fe, bs - recv_b, be], axis=None)
    comm_width = np.concatenate([recv_f, send_f, recv_b, send_b], axis=None)
    comm_rows = np.tile(np.repeat(np.arange(S), M), 4)
    keep = comm_width > 0
    ax.barh(comm_rows[keep], comm_width[keep], left=comm_left[keep], height=h * 0.4, color="0.7", label="comm")


def cost_throughput_front(
    points: Any,
    ax: Any = None,
    path: str | Path | None = None,
    *,
    show_evaluated: bool = True,
    annotate: bool = True,
    budget: float | None = None,
) -> Any:
    """Pareto front of $/iteration (y) against iterations/s (x).

    Args:
        points: a :class:`~heteroplan.planner.pareto.ParetoFront` (its other evaluated plans are
            drawn in grey when ``show_evaluated``), or a sequence of ``PlanResult`` s,
            ``ParetoPoint`` s or ``(cost, throughput)`` pairs (drawn as given, sorted by cost).
        annotate: label each front point with its GPU count (``PlanResult`` inputs only).
        budget: draw the budget ($/iteration) as a dashed horizontal line labelled ``"budget"``.

    The front is the line labelled ``"Pareto front"`` in ``ax.lines``.
    """
    evaluated: list[tuple[float, float]] = []
    if hasattr(points, "evaluated") and hasattr(points, "points"):
        evaluated = [(p.cost, p.throughput) for p in points.evaluated]
        points = points.points
    pts = [_cost_throughput(p) for p in points]
    if not pts:
        raise InputError("points", points, "need at least one point")
    pts.sort(key=lambda p: (p[0], p[1]))
    fig, ax = _axes(ax)
    if show_evaluated and evaluated:
        cost, thr = np.array(evaluated).T
        ax.scatter(thr, cost, s=14, color="0.6", label="other plans found", zorder=1)
    cost = np.array([p[0] for p in pts])
    thr = np.array([p[1] for p in pts])
    ax.plot(thr, cost, "o-", color="tab:red", label="Pareto front", zorder=2, drawstyle="default")
    if annotate:
        for (c, t, gpus) in pts:
            if gpus is not None:
                ax.annotate(f"{gpus} GPUs", (t, c), textcoords="offset points", xytext=(4, -10), fontsize=7)
    if budget is not None:
        ax.axhline(budget, color="tab:blue", ls="--", lw=1, label=f"budget ${budget:g}/iteration")
    ax.set_xlabel("throughput (iterations/s)")
    ax.set_ylabel("cost ($/iteration)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def _cost_throughput(p: Any) -> tuple[float, float, int | None]:
    """(cost $/iteration, throughput iter/s, GPUs or None) of a PlanResult, ParetoPoint or pair."""
    result = getattr(p, "result", p)
    if hasattr(result, "cost_per_iteration_usd") and hasattr(result, "throughput_iter_s"):
        plan = getattr(result, "plan", None)
        return float(result.cost_per_iteration_usd), float(result.throughput_iter_s), getattr(plan, "num_gpus", None)
    try:
        cost, thr = (float(x) for x in p[:2])
    except (TypeError, ValueError, IndexError):
        raise InputError("points", p, "each point: a PlanResult, a ParetoPoint or a (cost, throughput) pair") from None
    if not (np.isfinite(cost) and np.isfinite(thr)):
        raise InputError("points", p, "cost and throughput must be finite")
    return cost, thr, None
