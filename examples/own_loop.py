"""Bring your own loop: an outside scheduler drives heteroplan's scheduling session.

The loop keeps its own jobs and clock. Each round it submits the jobs that arrived, asks the
session for the round's decisions, applies them, and reports what ran. Its "GPUs" are
heteroplan's simulated training (the simulator's own progress model), so its average JCT
equals ``heteroplan simulate``'s for the same policy and jobs (docs/own_loop.md).

Run: ``python examples/own_loop.py [--policy sia] [--jobs 8] [--verbose]``
"""

from __future__ import annotations

import argparse
import math

from heteroplan import DecisionKind, SchedulingSession, bundled_workload, make_policy, preset
from heteroplan.sim import SimFidelity, SimulatedTraining
from heteroplan.sim.job_models import build_jobs


def run(policy_name: str = "sia", num_jobs: int = 8, verbose: bool = False) -> float:
    """Average JCT (hours) of the first ``num_jobs`` jobs of philly/workload-1 on sia-64."""
    cluster, policy, fidelity = preset("sia-64"), make_policy(policy_name), SimFidelity()
    workload = bundled_workload("philly/workload-1")[:num_jobs]
    jobs = {j.name: j for j in build_jobs(workload, cluster, policy.elastic, None, fidelity)}
    gpus = SimulatedTraining(cluster, policy.forking, fidelity.epoch_rates)  # stands in for real training
    session = SchedulingSession(cluster, policy, free_moves=fidelity.free_moves)
    L = policy.round_length  # s per round
    waiting = sorted(jobs.values(), key=lambda j: j.arrival_time)
    finish: dict[str, float] = {}
    clock = 0.0
    while len(finish) < len(jobs):
        if len(session.unfinished()) == 0:  # idle: jump to the round boundary after the next arrival
            clock = max(clock, math.ceil(waiting[0].arrival_time / L - 1e-9) * L)
        while waiting and waiting[0].arrival_time <= clock + 1e-9:
            job = waiting.pop(0)
            session.submit(job.name, arrival_time=job.arrival_time, application=job.application,
                           perf_model=job.estimator, requested_gpus=job.requested_gpus, max_gpus=job.max_gpus,
                           elastic=job.elastic, batch_size=job.given_batch, total_work=job.total_work,
                           restart_delay_s=job.restart_delay)
        for decision in session.round(clock):
            if verbose and decision.kind not in (DecisionKind.KEEP, DecisionKind.WAIT):
                print(f"t={clock:7.0f} s  {decision.kind.value:8s} {decision.job_id}  {decision.allocation}")
            if decision.allocation is None:  # preempted or waiting: nothing runs
                continue
            used = gpus.run(jobs[decision.job_id], decision, L, session.report)  # runs, reports progress
            if used is not None:  # its work ran out `used` seconds into the round
                finish[decision.job_id] = clock + used
                session.finish(decision.job_id, clock + used)
        clock += L
    return sum(finish[j] - jobs[j].arrival_time for j in finish) / len(finish) / 3600.0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="sia")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    print(f"{args.policy}: average JCT {run(args.policy, args.jobs, args.verbose):.4f} h over {args.jobs} jobs")
