"""The layer split of a layout whose pipeline sends are buffered, chosen on the 1F1B replay's
times (what :func:`~heteroplan.planner.model.simulator.simulate_plan` charges), and the split's
exact price (iteration seconds, pipeline egress $) as the simulator computes it.

Functions over a :class:`~heteroplan.planner.search.context.SearchContext` (its stage tables,
network and constants); the searcher (:mod:`.searcher`) calls them per layout.
"""

from __future__ import annotations

import math

import numpy as np

from heteroplan.planner.model import sync
from heteroplan.planner.model.pipeline_replay import one_f_one_b_lower_bound
from heteroplan.planner.model.simulator import replica_pipeline_times
from heteroplan.planner.model.straggler import clark_max
from heteroplan.planner.model.terms import one_f_one_b_s, pipeline_fill_s
from heteroplan.planner.plan import PipelineBlock
from heteroplan.planner.search.context import SearchContext
from heteroplan.planner.search.split_dp import _all_splits, best_split

__all__ = ["REPLAY_ENUMERATE_UP_TO", "REPLAY_BUDGET", "pipeline_egress_usd", "split_time_s", "replay_split"]

REPLAY_ENUMERATE_UP_TO = 20_000  # splits x stages bounded at once for a layout with buffered sends (else local moves)
REPLAY_BUDGET = 256  # most splits replayed per layout (in order of their lower bound)


def pipeline_egress_usd(ctx: SearchContext, stages: list[PipelineBlock], b: np.ndarray, mbs: int, dp: int, M: int) -> float:
    """$ per iteration of the activations and gradients that the split ``b`` sends across zones."""
    cost = 0.0
    for s in range(len(stages) - 1):
        blk, nxt = stages[s], stages[s + 1]
        if blk.pool[1] != nxt.pool[1]:
            out = ctx.table(blk.pool[0], blk.tp, mbs).out_bytes[b[s + 1]]
            cost += sync.boundary_egress(ctx.network, blk.pool[1], nxt.pool[1], out, blk.tp, M,
                                         ctx.cfg.for_gpu(blk.pool[0]))[1] * dp
    return cost


def split_time_s(ctx: SearchContext, stages: list[PipelineBlock], b: np.ndarray, links: np.ndarray,
                 y: np.ndarray, buffered: np.ndarray, mbs: int, dp: int, M: int) -> float:
    """Iteration seconds of the split ``b`` exactly as ``simulate`` prices it
    (:func:`~heteroplan.planner.model.simulator.replica_pipeline_times`, the slowest of ``dp`` replicas)."""
    idx = np.arange(len(stages))
    tabs = [ctx.table(blk.pool[0], blk.tp, mbs) for blk in stages]
    fb = np.array([[t.fb[b[s], b[s + 1]]] for s, t in enumerate(tabs)])
    share = np.array([[t.forward_share[b[s], b[s + 1]]] for s, t in enumerate(tabs)])
    comm = np.zeros((len(stages) + 1, 1))
    comm[1:-1, 0] = links[idx[:-1], b[1:-1]]  # seconds out of stage s
    mean, sd = replica_pipeline_times(fb, share, comm, buffered[idx[:-1], b[1:-1]][:, None], np.array([M]),
                                      ctx.cv(stages))
    pipe = clark_max(np.repeat(mean, dp), np.repeat(sd, dp))[0]
    return float(pipe) + float(y[idx, b[:-1], b[1:]].max())


def replay_split(ctx: SearchContext, stages: list[PipelineBlock], sigma: np.ndarray, w: np.ndarray, y: np.ndarray,
                 links: np.ndarray, buffered: np.ndarray, mbs: int, dp: int, M: int, rate: float,
                 cutoff: float) -> np.ndarray | None:
    """The split that minimizes the replayed time (+ pipeline egress as time, as the closed form
    has it); None if none fits memory or none can get below ``cutoff``.

    Where every split can be scored at once (``REPLAY_ENUMERATE_UP_TO`` splits x stages):
    splits are replayed in order of a lower bound
    (:func:`~heteroplan.planner.model.pipeline_replay.one_f_one_b_lower_bound` + the slowest sync)
    until the bound reaches the best replayed (exact), at most ``REPLAY_BUDGET`` replays.
    Deeper: the closed form's best split, then moves of one boundary by one layer while they
    improve (a local search; no new pass after ``REPLAY_BUDGET`` replays)."""
    pp = len(stages)
    idx = np.arange(pp)
    fb = np.stack([ctx.table(blk.pool[0], blk.tp, mbs).fb for blk in stages])

    def score(bnd: np.ndarray) -> float:
        if not np.isfinite(w[idx, bnd[:-1], bnd[1:]]).all():
            return np.inf
        egress = pipeline_egress_usd(ctx, stages, bnd, mbs, dp, M) / rate if rate > 0 else 0.0
        return split_time_s(ctx, stages, bnd, links, y, buffered, mbs, dp, M) + egress

    if math.comb(ctx.L - 1, pp - 1) * pp <= REPLAY_ENUMERATE_UP_TO:
        splits = _all_splits(pp, ctx.L)
        a, z = splits[:, :-1], splits[:, 1:]
        stage_fb = fb[idx, a, z]
        share = np.stack([ctx.table(blk.pool[0], blk.tp, mbs).forward_share for blk in stages])[idx, a, z]
        send, buf = links[idx[:-1], z[:, :-1]], buffered[idx[:-1], z[:, :-1]]
        closed = one_f_one_b_s(M, sigma[idx, a, z].max(axis=1), pipeline_fill_s(stage_fb.sum(axis=1), send.sum(axis=1)))
        replayed = one_f_one_b_lower_bound(stage_fb * share, stage_fb * (1 - share), send, M, buf)
        # a split without a buffered send is priced by the closed form (a bound too: the noise only adds)
        lb = np.where(buf.any(axis=1), replayed, closed) + y[idx, a, z].max(axis=1)
        lb = np.where(np.isfinite(w[idx, a, z]).all(axis=1), lb, np.inf)
        if not np.isfinite(lb).any():
            ctx.memory_misses += 1
            return None
        best, best_score = None, cutoff
        for k in np.argsort(lb, kind="stable")[:REPLAY_BUDGET]:
            if lb[k] >= best_score:
                break
            t = score(splits[k])
            if t < best_score:
                best, best_score = splits[k], t
        return best
    res = best_split(sigma, w, y, M, ctx.options.max_split_dp_calls)
    if res is None:
        ctx.memory_misses += 1
        return None
    best = np.asarray(res.bounds)
    best_score = score(best)
    improved, replays = True, 1
    while improved and replays < REPLAY_BUDGET:
        improved = False
        for i in range(1, pp):
            for step in (-1, 1):
                trial = best.copy()
                trial[i] += step
                if not trial[i - 1] < trial[i] < trial[i + 1]:
                    continue
                t = score(trial)
                replays += 1
                if t < best_score * (1 - 1e-12):
                    best, best_score, improved = trial, t, True
    return best if best_score < cutoff else None
