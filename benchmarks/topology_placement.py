"""Topology-aware placement vs best fit: fragmentation and job completion time (JCT).

A FIFO gang scheduler on a cluster of 32 nodes x 4 GPUs under 4 switches (8 nodes each; node
links 100 Gbit/s, switch uplinks 50 Gbit/s) places each
arriving gang with :func:`heteroplan.policies.placement.place`, either best fit (``topology=None``)
or topology-aware (gangs under one switch when one has room). A job's step is 70% compute and
30% communication at 100 Gbit/s; on a placement whose bottleneck bandwidth
(:meth:`heteroplan.topology.Topology.bandwidth`) is ``bw`` the communication takes
``100 / bw`` times longer (single-node jobs talk over the node's own links and never slow down).
Reported per placement, mean and standard deviation over seeds: mean and p90 JCT (s), makespan,
the share of multi-node gangs split across switches, and fragmentation (mean over scheduling
events of 1 - largest free GPUs under one switch / all free GPUs).

    python benchmarks/topology_placement.py [--seeds 5] [--jobs 300]
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _common import print_table, write_json  # noqa: E402

from heteroplan.cluster import Cluster, GPUType, Node  # noqa: E402
from heteroplan.policies.base import Allocation  # noqa: E402
from heteroplan.policies.placement import place  # noqa: E402
from heteroplan.topology import Topology  # noqa: E402

NODES, GPUS_PER_NODE, NODES_PER_SWITCH = 32, 4, 8
NODE_GBPS, UPLINK_GBPS = 100.0, 50.0
COMM_SHARE = 0.3
SIZES = np.array([1, 2, 4, 8, 16, 32])
SIZE_P = np.array([0.2, 0.15, 0.25, 0.2, 0.15, 0.05])


def make_jobs(seed: int, n: int) -> list[tuple[float, int, float]]:
    """(arrival s, GPUs, work s at full speed) per job; load about 0.9 of the cluster."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(SIZES, n, p=SIZE_P)
    work = rng.lognormal(np.log(1800.0), 0.8, n)
    mean_gpu_s = float((SIZES * SIZE_P).sum() * np.exp(np.log(1800.0) + 0.8**2 / 2))
    gaps = rng.exponential(mean_gpu_s / (0.9 * NODES * GPUS_PER_NODE), n)
    return list(zip(np.cumsum(gaps).tolist(), sizes.tolist(), work.tolist(), strict=True))


def speed(topo: Topology, alloc: Allocation) -> float:
    """Fraction of full speed on ``alloc``'s placement (1 on one node)."""
    nodes = [n for n, _ in alloc.placement]
    if len(nodes) == 1:
        return 1.0
    bw = topo.bandwidth(nodes)
    return 1.0 / ((1 - COMM_SHARE) + COMM_SHARE * NODE_GBPS / bw)


def fragmentation(topo: Topology, free: dict[str, int]) -> float:
    total = sum(free.values())
    if total == 0:
        return 0.0
    return 1.0 - max(sum(free[n] for n in members) for members in topo.nodes_by_switch().values()) / total


def simulate(cluster: Cluster, topo: Topology, jobs: list[tuple[float, int, float]], aware: bool) -> dict[str, float]:
    """Strict FIFO: the head of the queue starts as soon as enough GPUs are free anywhere."""
    events: list[tuple[float, int, str]] = [(a, 0, f"j{i}") for i, (a, _, _) in enumerate(jobs)]
    heapq.heapify(events)
    running: dict[str, Allocation] = {}
    queue: list[str] = []
    done: dict[str, float] = {}
    split = multi = 0
    frags: list[float] = []
    info = {f"j{i}": job for i, job in enumerate(jobs)}
    free_total = cluster.num_gpus
    now = 0.0
    while events:
        now, kind, job = heapq.heappop(events)
        if kind == 0:
            queue.append(job)
        else:
            done[job] = now
            free_total += running.pop(job).num_gpus
        while queue and info[queue[0]][1] <= free_total:
            head = queue.pop(0)
            wanted = {j: (a.gpu_type, a.num_gpus) for j, a in running.items()} | {head: ("T", info[head][1])}
            placed, failed = place(cluster, wanted, running, topology=topo if aware else None)
            assert not failed, failed
            alloc = placed[head]
            running[head] = alloc
            free_total -= alloc.num_gpus
            if len(alloc.placement) > 1:
                multi += 1
                split += len({topo.switch_of(n) for n, _ in alloc.placement}) > 1
            heapq.heappush(events, (now + info[head][2] / speed(topo, alloc), 1, head))
        free = {n.name: n.num_gpus for n in cluster.nodes}
        for a in running.values():
            for n, c in a.placement:
                free[n] -= c
        frags.append(fragmentation(topo, free))
    jct = np.array([done[j] - info[j][0] for j in done])
    return {
        "mean_jct_s": float(jct.mean()),
        "p90_jct_s": float(np.quantile(jct, 0.9)),
        "makespan_s": now,
        "split_gangs": split / max(multi, 1),
        "fragmentation": float(np.mean(frags)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    gpu = GPUType("T", 32.0, GPUS_PER_NODE)
    cluster = Cluster((gpu,), tuple(Node(f"n{i:02d}", "T", GPUS_PER_NODE, "z") for i in range(NODES)), name="4-switch")
    topo = Topology.from_cluster(cluster, nodes_per_switch=NODES_PER_SWITCH, node_gbps=NODE_GBPS, uplink_gbps=UPLINK_GBPS)
    runs: dict[str, list[dict[str, float]]] = {"best fit": [], "topology-aware": []}
    for seed in range(args.seeds):
        jobs = make_jobs(seed, args.jobs)
        for name, aware in (("best fit", False), ("topology-aware", True)):
            runs[name].append(simulate(cluster, topo, jobs, aware))
    metrics = list(runs["best fit"][0])
    rows = []
    for name, results in runs.items():
        row: dict[str, object] = {"placement": name}
        for m in metrics:
            values = [r[m] for r in results]
            row[m] = f"{statistics.mean(values):.4g} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.2g}"
        rows.append(row)
    print(f"{NODES} nodes x {GPUS_PER_NODE} GPUs, {NODES_PER_SWITCH} nodes/switch, {args.jobs} jobs, "
          f"{args.seeds} seeds (mean ± std)")
    print_table(rows, ["placement", *metrics])
    ratios = [a["mean_jct_s"] / b["mean_jct_s"] for a, b in zip(runs["topology-aware"], runs["best fit"], strict=True)]
    print(f"mean JCT, topology-aware / best fit, per seed (paired): median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}")
    path = write_json("topology_placement", {"config": vars(args), "runs": runs, "summary": rows, "jct_ratio_per_seed": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
