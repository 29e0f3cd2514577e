"""Microbatches per pipeline replica when the replicas run at different speeds.

A pipeline replica that runs ``m`` microbatches takes ``(m - 1) step + fixed`` seconds under 1F1B
(``step``: its steady-state seconds per microbatch, ``fixed``: fill and drain). An iteration's
``total`` microbatches are shared so that the slowest replica finishes first: minimize
``max_d (m_d - 1) step_d + fixed_d`` over integers ``m_d >= 1`` with ``sum_d m_d = total``.

- :func:`water_fill`: any number of replicas; the greedy that hands each next microbatch to the
  replica that would finish it first is exact for a max of increasing functions.
- :func:`two_class_totals`: two classes of identical replicas (a mixed-type stage's two pipeline
  kinds), vectorized over many candidate layer splits by bisection on class 1's per-replica count.
- :func:`class_microbatches`: the per-replica counts of class totals (even within a class).
"""

from __future__ import annotations

import heapq

import numpy as np

__all__ = ["water_fill", "two_class_totals", "class_microbatches", "finish_s"]


def finish_s(m: np.ndarray | int, step: np.ndarray | float, fixed: np.ndarray | float) -> np.ndarray:
    """Seconds of a pipeline replica running ``m`` microbatches: ``(m - 1) step + fixed``."""
    return (np.asarray(m, dtype=float) - 1) * step + fixed


def water_fill(step: np.ndarray, fixed: np.ndarray, total: int) -> tuple[int, ...]:
    """Microbatches per replica minimizing the slowest replica's seconds (ties: lower index)."""
    step, fixed = np.asarray(step, dtype=float), np.asarray(fixed, dtype=float)
    if total < len(step):
        raise ValueError(f"{total} microbatches cannot give each of {len(step)} replicas one")
    m = [1] * len(step)
    heap = [(float(fixed[d] + step[d]), d) for d in range(len(step))]
    heapq.heapify(heap)
    for _ in range(total - len(step)):
        _, d = heapq.heappop(heap)
        m[d] += 1
        heapq.heappush(heap, (float(fixed[d] + m[d] * step[d]), d))
    return tuple(m)


def two_class_totals(
    step1: np.ndarray, fixed1: np.ndarray, d1: int, step2: np.ndarray, fixed2: np.ndarray, d2: int, total: int
) -> tuple[np.ndarray, np.ndarray]:
    """Class totals ``M1`` (class 2 runs ``total - M1``) and the slowest replica's seconds, for
    ``d1`` replicas of (step1, fixed1) and ``d2`` of (step2, fixed2), each array over candidates.

    Class ``c``'s slowest replica runs ``ceil(M_c / d_c)`` microbatches. With ``m1`` that count
    for class 1, class 1 takes ``M1 = min(d1 m1, total - d2)`` and class 2 the rest; class 1's
    time rises and class 2's falls with ``m1``, so the optimum is at the crossing, found by
    bisection (exact; the same minimum as :func:`water_fill`)."""
    step1, fixed1, step2, fixed2 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (step1, fixed1, step2, fixed2)))
    if total < d1 + d2:
        raise ValueError(f"{total} microbatches cannot give each of {d1 + d2} replicas one")
    top = -(-(total - d2) // d1)  # class 1's largest useful per-replica count

    def times(m1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        big1 = np.minimum(d1 * m1, total - d2)
        m2 = -(-(total - big1) // d2)
        return big1, finish_s(-(-big1 // d1), step1, fixed1), finish_s(m2, step2, fixed2)

    lo = np.ones(step1.shape, dtype=np.int64)  # invariant: the crossing is in [lo, hi]
    hi = np.full(step1.shape, top, dtype=np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        _, t1, t2 = times(mid)
        past = t1 >= t2
        hi = np.where(past, mid, hi)
        lo = np.where(past, lo, mid + 1)
    big_a, t1a, t2a = times(lo)
    big_b, t1b, t2b = times(np.maximum(lo - 1, 1))
    ta, tb = np.maximum(t1a, t2a), np.maximum(t1b, t2b)
    take_b = tb < ta
    return np.where(take_b, big_b, big_a), np.where(take_b, tb, ta)


def class_microbatches(counts: tuple[int, ...], totals: tuple[int, ...]) -> tuple[int, ...]:
    """Per-replica microbatches, class by class: class ``c``'s ``totals[c]`` spread evenly over its
    ``counts[c]`` replicas (the first ones take the remainder)."""
    out: list[int] = []
    for d, big in zip(counts, totals, strict=True):
        q, r = divmod(int(big), d)
        out += [q + 1] * r + [q] * (d - r)
    return tuple(out)
