"""Optimal contiguous layer split for a fixed stage-to-hardware mapping.

Given, per stage ``s`` and layer range ``[a, b)``, the steady-state step ``sigma[s, a, b]``,
the additive time ``w[s, a, b]`` and the gradient-sync time ``y[s, a, b]`` (``inf`` where
the range is not allowed), find the split minimizing

    J = (M - 1) * max_s sigma_s + sum_s w_s + max_s y_s.

The max terms are not separable, so the DP minimizes ``sum w`` under thresholds
``sigma <= B`` and ``y <= Y`` and enumerates ``B`` and ``Y`` over the values that occur, in
increasing order, stopping when the lower bound ``(M-1) B + W_min + Y`` cannot beat the best
found: exact when the number of DP calls is not capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from math import comb

import numpy as np

__all__ = ["SplitResult", "best_split"]


@dataclass(frozen=True)
class SplitResult:
    """Best split: stage boundaries ``bounds`` (pp+1 layer indices) and its objective parts."""

    bounds: tuple[int, ...]
    objective: float
    bottleneck: float
    additive: float
    sync: float
    exact: bool


def _min_sum(w: np.ndarray) -> tuple[float, np.ndarray | None]:
    """min over splits of sum_s w[s, a_s, a_{s+1}]; w is (S, n, n) with inf = forbidden."""
    S, n, _ = w.shape
    prev = np.full(n, np.inf)
    prev[0] = 0.0
    args = np.empty((S, n), dtype=np.int64)
    for s in range(S):
        cand = prev[:, None] + w[s]
        args[s] = np.argmin(cand, axis=0)
        prev = cand[args[s], np.arange(n)]
    if not np.isfinite(prev[-1]):
        return np.inf, None
    bounds = np.empty(S + 1, dtype=np.int64)
    bounds[S] = n - 1
    for s in range(S - 1, -1, -1):
        bounds[s] = args[s][bounds[s + 1]]
    return float(prev[-1]), bounds


def _min_max(v: np.ndarray) -> float:
    """min over splits of max_s v[s, a_s, a_{s+1}]."""
    S, n, _ = v.shape
    prev = np.full(n, np.inf)
    prev[0] = -np.inf
    for s in range(S):
        prev = np.min(np.maximum(prev[:, None], v[s]), axis=0)
    return float(prev[-1])


def _min_sum_batch(w: np.ndarray, b_thr: np.ndarray, y_thr: np.ndarray, sig: np.ndarray, yy: np.ndarray):
    """Batched :func:`_min_sum` under thresholds ``sig <= b_thr[k]`` and ``yy <= y_thr[k]``.

    Returns (values (K,), bounds (K, S+1)); rows with value inf have meaningless bounds.
    """
    S, n, _ = w.shape
    K = len(b_thr)
    prev = np.full((K, n), np.inf)
    prev[:, 0] = 0.0
    args = np.empty((S, K, n), dtype=np.int64)
    cols = np.arange(n)[None, :]
    krows = np.arange(K)[:, None]
    for s in range(S):
        ok = (sig[s][None] <= b_thr[:, None, None]) & (yy[s][None] <= y_thr[:, None, None])
        cand = np.where(ok, prev[:, :, None] + w[s][None], np.inf)
        args[s] = cand.argmin(axis=1)
        prev = cand[krows, args[s], cols]
    bounds = np.empty((K, S + 1), dtype=np.int64)
    bounds[:, S] = n - 1
    rows = np.arange(K)
    for s in range(S - 1, -1, -1):
        bounds[:, s] = args[s][rows, bounds[:, s + 1]]
    return prev[:, -1], bounds


def _min_max_batch(v: np.ndarray, sig: np.ndarray, b_thr: np.ndarray) -> np.ndarray:
    """For each threshold ``b_thr[k]``: min over splits with every ``sig <= b_thr[k]`` of
    ``max_s v`` (inf where no split meets the threshold). Batched :func:`_min_max`."""
    S, n, _ = v.shape
    prev = np.full((len(b_thr), n), np.inf)
    prev[:, 0] = -np.inf
    for s in range(S):
        vv = np.where(sig[s][None] <= b_thr[:, None, None], v[s][None], np.inf)
        prev = np.min(np.maximum(prev[:, :, None], vv), axis=1)
    return prev[:, -1]


@lru_cache(maxsize=256)
def _all_splits(stages: int, layers: int) -> np.ndarray:
    """Every contiguous split of ``layers`` layers into ``stages`` stages: (K, stages + 1) bounds."""
    cuts = np.array(list(combinations(range(1, layers), stages - 1)), dtype=np.int64)
    out = np.empty((max(len(cuts), 1), stages + 1), dtype=np.int64)
    out[:, 0], out[:, -1] = 0, layers
    if stages > 1:
        out[:, 1:-1] = cuts
    out.setflags(write=False)
    return out


def _enumerated_split(sigma: np.ndarray, w: np.ndarray, y: np.ndarray, weight: int, cutoff: float) -> SplitResult | None:
    """Best split by scoring every split at once (few stages: cheaper than the threshold DPs)."""
    S, n, _ = w.shape
    bnd = _all_splits(S, n - 1)
    idx = np.arange(S)
    a, b = bnd[:, :-1], bnd[:, 1:]
    ws = w[idx, a, b]
    wsum = ws.sum(axis=1)
    s_max = sigma[idx, a, b].max(axis=1)
    y_max = y[idx, a, b].max(axis=1)
    total = np.where(np.isfinite(wsum), weight * s_max + wsum + y_max, np.inf)
    k = int(np.argmin(total))
    if not np.isfinite(total[k]) or total[k] >= cutoff:
        return None
    return SplitResult(tuple(int(x) for x in bnd[k]), float(total[k]), float(s_max[k]), float(wsum[k]), float(y_max[k]), True)


def best_split(
    sigma: np.ndarray,
    w: np.ndarray,
    y: np.ndarray,
    microbatches: int,
    max_dp_calls: int | None = 4096,
    chunk: int = 32,
    cutoff: float = np.inf,
    enumerate_up_to: int = 20000,
) -> SplitResult | None:
    """Minimize ``(M-1) max sigma + sum w + max y`` over contiguous splits (None if none is allowed,
    or none has an objective below ``cutoff``).

    Arrays are ``(S, L+1, L+1)``; entries that are ``inf`` in ``w`` are forbidden.
    Threshold DPs run batched (``chunk`` at a time); ``max_dp_calls`` caps how many
    threshold pairs are tried (``None``: no cap, exact). ``cutoff`` (the caller's incumbent) prunes
    every threshold whose lower bound reaches it: the search then only proves the layout loses.
    With at most ``enumerate_up_to`` (splits x stages) every split is scored at once instead (exact).
    """
    S, n, _ = w.shape
    if comb(n - 2, S - 1) * S <= enumerate_up_to:
        return _enumerated_split(sigma, w, y, microbatches - 1, cutoff)
    w_min, bounds = _min_sum(w)
    if bounds is None:
        return None
    search = _ThresholdSearch(sigma, w, y, microbatches - 1, chunk, bounds, cutoff)
    # 1) bottleneck thresholds, y unbounded; 2) (bottleneck, sync) pairs whose bound can still win
    b_cands, w_b, lb_b, y_b = search.bottlenecks(w_min, max_dp_calls)
    search.sync_pairs(b_cands, w_b, lb_b, y_b, max_dp_calls)
    return search.result()


class _ThresholdSearch:
    """:func:`best_split`'s threshold search: the DP inputs (forbidden ranges at ``inf``), the
    incumbent (``best``: objective, max sigma, sum w, max y; ``best_bounds``: its split, ``None``
    while the caller's cutoff is better), the DP calls made and whether the search stayed exact.
    Each step tightens the incumbent the next one prunes against."""

    def __init__(self, sigma: np.ndarray, w: np.ndarray, y: np.ndarray, weight: int, chunk: int,
                 bounds: np.ndarray, cutoff: float) -> None:
        allowed = np.isfinite(w)
        self.w, self.weight, self.chunk = w, weight, chunk
        self.sig = np.where(allowed, sigma, np.inf)
        self.yy = np.where(allowed, y, np.inf)
        self.idx = np.arange(w.shape[0])
        self.best = self.first = self.evaluate(bounds[None])[0]
        self.best_bounds: np.ndarray | None = bounds
        if cutoff <= self.best[0]:
            self.best, self.best_bounds = np.array([cutoff, np.inf, np.inf, np.inf]), None
        self.b_star, self.y_star = _min_max(self.sig), _min_max(self.yy)
        self.calls, self.exact = 1, True

    def evaluate(self, bnd: np.ndarray) -> np.ndarray:
        """(K, 4): objective, max sigma, sum w, max y of each split row."""
        a, b = bnd[:, :-1], bnd[:, 1:]
        s_max = self.sig[self.idx, a, b].max(axis=1)
        w_sum = self.w[self.idx, a, b].sum(axis=1)
        y_max = self.yy[self.idx, a, b].max(axis=1)
        return np.stack([self.weight * s_max + w_sum + y_max, s_max, w_sum, y_max], axis=1)

    def offer(self, v: np.ndarray, bnd: np.ndarray) -> np.ndarray:
        """Take the best of a batch of threshold DP results (min sums ``v``, splits ``bnd``) as the
        incumbent if it wins; returns each split's max y (inf where the DP found none)."""
        y_of = np.full(len(v), np.inf)
        good = np.isfinite(v)
        if good.any():
            ev = self.evaluate(bnd[good])
            y_of[good] = ev[:, 3]
            k = int(np.argmin(ev[:, 0]))
            if ev[k, 0] < self.best[0]:
                self.best, self.best_bounds = ev[k], bnd[good][k]
        return y_of

    def run(self, b_thr: np.ndarray, y_thr: np.ndarray, lower: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Threshold DPs in chunks, in the given order; stops once ``lower`` cannot beat the incumbent.
        Returns each threshold's min sum w and the max y of the split that reaches it (inf: not run)."""
        vals = np.full(len(b_thr), np.inf)
        y_of = np.full(len(b_thr), np.inf)
        lo, size = 0, 2
        while lo < len(b_thr):
            if lower is not None and lower[lo] >= self.best[0]:
                break
            hi = lo + size
            if lower is not None:  # only thresholds whose bound can still win
                hi = lo + max(1, int(np.searchsorted(lower[lo:hi], self.best[0])))
            v, bnd = _min_sum_batch(self.w, b_thr[lo:hi], y_thr[lo:hi], self.sig, self.yy)
            vals[lo:hi] = v
            y_of[lo:hi] = self.offer(v, bnd)
            lo, size = hi, min(2 * size, self.chunk)
        self.calls += len(b_thr)
        return vals, y_of

    def pairs(self, b_thr: np.ndarray, y_thr: np.ndarray, lower: np.ndarray) -> None:
        """Threshold DPs over (B, Y) pairs in increasing order of ``lower``. A pair run at (B, Y)
        with min sum ``W`` raises the bound of every pair (B', Y') <= (B, Y) to
        ``(M-1) B' + W + Y'`` (tighter thresholds never lower the min sum); pairs whose bound
        reaches the incumbent are dropped."""
        size, weight = 2, self.weight
        while len(b_thr) and lower[0] < self.best[0]:
            hi = max(1, int(np.searchsorted(lower[:size], self.best[0])))
            v, bnd = _min_sum_batch(self.w, b_thr[:hi], y_thr[:hi], self.sig, self.yy)
            self.calls += hi
            self.offer(v, bnd)
            rb, ry, rl = b_thr[hi:], y_thr[hi:], lower[hi:]
            dominated = (rb[:, None] <= b_thr[None, :hi]) & (ry[:, None] <= y_thr[None, :hi])
            w_lb = np.max(np.where(dominated, v[None, :], -np.inf), axis=1, initial=-np.inf)
            rl = np.maximum(rl, (weight * rb if weight > 0 else 0.0) + w_lb + ry)  # B = inf when M = 1
            keep = rl < self.best[0]
            order = np.argsort(rl[keep], kind="stable")
            b_thr, y_thr, lower = rb[keep][order], ry[keep][order], rl[keep][order]
            size = min(2 * size, self.chunk)

    def bottlenecks(self, w_min: float, max_dp_calls: int | None) -> tuple[np.ndarray, ...]:
        """Step 1: the bottleneck thresholds B whose bound can win, y unbounded. Returns the
        candidates, each one's min sum w, its bound ``(M-1) B`` and the max y of its split (one
        unbounded candidate when M = 1, whose bottleneck costs nothing)."""
        weight = self.weight
        if weight <= 0:
            return np.array([np.inf]), np.array([w_min]), np.array([0.0]), np.array([self.first[3]])
        b_cands = np.unique(self.sig[np.isfinite(self.sig) & (self.sig >= self.b_star)])
        b_cands = b_cands[weight * b_cands + w_min + self.y_star < self.best[0]]
        if max_dp_calls is not None and len(b_cands) > max_dp_calls // 2:
            b_cands, self.exact = b_cands[: max_dp_calls // 2], False
        w_b, y_b = self.run(b_cands, np.full(len(b_cands), np.inf), weight * b_cands + w_min + self.y_star)
        return b_cands, w_b, weight * b_cands, y_b

    def sync_pairs(self, b_cands: np.ndarray, w_b: np.ndarray, lb_b: np.ndarray, y_b: np.ndarray,
                   max_dp_calls: int | None) -> None:
        """Step 2: the (bottleneck, sync) pairs whose lower bound can still beat the incumbent."""
        yy, y_star, weight = self.yy, self.y_star, self.weight
        y_cands = np.unique(yy[np.isfinite(yy) & (yy >= y_star)])
        if not (len(b_cands) and len(y_cands)):
            return
        base = lb_b + w_b
        # the least max y of any split under bottleneck B: pairs (B, Y) with Y below it hold no
        # split (one batched min-max DP per B instead of a min-sum DP per such pair)
        open_b = np.flatnonzero(np.isfinite(base) & (base + y_star < self.best[0]) & (y_b > y_star))
        y_min = np.full(len(b_cands), np.inf)
        if len(open_b) and weight > 0:
            y_min[open_b] = _min_max_batch(yy, self.sig, b_cands[open_b])
        elif len(open_b):
            y_min[open_b] = y_star
        bb, yv = np.meshgrid(np.arange(len(b_cands)), y_cands, indexing="ij")
        # a pair (B, Y) with Y at or above the max y of the split found at B alone finds nothing
        # better: that split already meets Y with the least sum w under B
        keep = (base[bb] + yv < self.best[0]) & np.isfinite(base[bb]) & (yv < y_b[bb]) & (yv >= y_min[bb])
        bb, yv = bb[keep], yv[keep]
        order = np.argsort(base[bb] + yv, kind="stable")
        bb, yv = bb[order], yv[order]
        if max_dp_calls is not None and len(bb) > max_dp_calls - self.calls:
            bb, yv, self.exact = bb[: max(max_dp_calls - self.calls, 0)], yv[: max(max_dp_calls - self.calls, 0)], False
        self.pairs(b_cands[bb], yv, base[bb] + yv)

    def result(self) -> SplitResult | None:
        """The incumbent as a :class:`SplitResult` (``None``: nothing beat the cutoff)."""
        if self.best_bounds is None:
            return None
        best = self.best
        return SplitResult(tuple(int(b) for b in self.best_bounds), float(best[0]), float(best[1]), float(best[2]),
                           float(best[3]), self.exact)
