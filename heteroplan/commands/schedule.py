"""``heteroplan schedule``: run a workload of training jobs under a policy, on a Ray cluster or here.

Each job is a real training run (a tiny GPT, or ``--model module:task``) whose compute per
iteration lasts what its GPU type's would (``--emulate``, the step-time table; docs/cluster.md);
the policy reads the goodput model of exactly that step time. Every round the policy's
decisions are carried out: ranks started as Ray actors on the decision's nodes (``--ray``) or as
local processes, rescaled and preempted through checkpoints, restarted from the last checkpoint
when a rank or node is lost. Records are written to ``--out`` as the run goes (``rounds.jsonl``
each round, ``jobs.json``, ``latencies.json``, the session in ``session.json``); SIGINT/SIGTERM
checkpoint and stop every job and keep them, and ``--resume`` continues the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from heteroplan.argtypes import integer, nonempty, number
from heteroplan.commands.jsonout import print_json, to_json_text
from heteroplan.errors import InputError
from heteroplan.inputs import MAX_WAIT_S
from heteroplan.names import printable

DEFAULT_EMULATION = "A100=0.02,V100=0.05"
EXIT_UNFINISHED = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schedule", help="run training jobs under a policy on a Ray cluster or local processes "
                       "(needs [runtime]; --ray needs [ray])")
    p.add_argument("--policy", type=nonempty("a name"), default="sia", help="registered policy name (heteroplan simulate --help lists them)")
    p.add_argument("--ray", type=nonempty("'auto' or a Ray address"), nargs="?", const="auto", default=None, metavar="ADDRESS",
                   help="run on a Ray cluster: 'auto' (the one `ray start` began here) or host:port; "
                   "its GPU nodes are the cluster (without --ray: local processes on --cluster)")
    p.add_argument("--cluster", type=nonempty("TYPE=COUNT,..."), default="A100=2,V100=2",
                   help="local run: GPUs per type, TYPE=COUNT,... (one process per GPU; default A100=2,V100=2)")
    p.add_argument("--type-label", action="append", default=[], metavar="RAY=NAME",
                   help="Ray accelerator label -> GPU type name (repeatable), e.g. A100=A100-40")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--jobs", type=integer(1, 10_000), default=8, help="generated jobs (default 8)")
    src.add_argument("--trace", type=nonempty("a path"), metavar="CSV", help="a Sia workload CSV: its jobs' arrivals, scaled by --time-scale")
    p.add_argument("--time-scale", type=number(0), default=1 / 60,
                   help="trace seconds -> run seconds (default 1/60: a trace minute is a second)")
    p.add_argument("--interarrival", type=number(0), default=15.0, help="mean seconds between generated arrivals")
    p.add_argument("--work", default="60,240", help="each job's seconds alone on one GPU of the fastest type, "
                   "drawn uniformly from MIN,MAX (default 60,240)")
    p.add_argument("--emulate", default=DEFAULT_EMULATION, metavar="TYPE=S,...",
                   help=f"seconds of compute per sample on each GPU type (default {DEFAULT_EMULATION})")
    p.add_argument("--overhead", type=number(0, high=MAX_WAIT_S), default=0.1, help="seconds of compute per iteration (default 0.1)")
    p.add_argument("--batch", type=integer(1, 4096), default=16, help="samples per iteration (default 16)")
    p.add_argument("--requested-gpus", type=integer(1, 4), default=1,
                   help="each job's gang: the GPUs a rigid policy (fifo, gavel, hadar) runs it on at once, where an "
                        "elastic one (sia, pollux) starts (default 1; jobs use at most 4)")
    p.add_argument("--restart-delay", type=number(0), default=10.0,
                   help="seconds a restart costs, as the policy assumes (default 10)")
    p.add_argument("--model", type=nonempty("PACKAGE.MODULE:FACTORY"), default=None, metavar="MODULE:FACTORY",
                   help="train your own TrainTask (default: a tiny GPT)")
    p.add_argument("--round", type=number(0, high=MAX_WAIT_S), default=30.0, help="seconds per round (default 30)")
    p.add_argument("--max-rounds", type=integer(1), default=10_000, help="stop after this many rounds (default 10000)")
    p.add_argument("--max-failures", type=integer(1), default=3, help="failures before a job is given up (default 3)")
    p.add_argument("--seed", type=integer(0), default=1, help="seed of the generated arrivals and job sizes (default 1)")
    p.add_argument("--out", type=nonempty("a path"), default="schedule-out", help="records, checkpoints and the session (default schedule-out)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run saved in --out (where none is saved: a warning, then a fresh run)")
    p.add_argument("--json", action="store_true", help="print the job records as one JSON document")
    p.set_defaults(func=run)


def _pairs(flag: str, text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            number_ = float(value)
        except ValueError:
            number_ = float("nan")
        if not sep or not name.strip() or not number_ >= 0 or number_ == float("inf"):
            raise InputError(flag, text, "give TYPE=NUMBER pairs separated by commas, numbers >= 0")
        out[name.strip()] = number_
    return out


def _labels(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        label, sep, name = item.partition("=")
        if not sep or not label or not name:
            raise InputError("--type-label", item, "give RAY_LABEL=GPU_TYPE")
        out[label] = name
    return out


def _workload(args: argparse.Namespace, emulation):
    from heteroplan.runtime.emulated import EmulatedWorkload

    lo, _, hi = args.work.partition(",")
    try:
        work = (float(lo), float(hi))
    except ValueError:
        raise InputError("--work", args.work, "give MIN,MAX seconds") from None
    if not 0 < work[0] <= work[1] < float("inf"):
        raise InputError("--work", args.work, "give 0 < MIN <= MAX seconds")
    count = args.jobs
    arrivals = None
    if args.trace:
        from heteroplan.workload.sia import read_sia_workload

        specs = read_sia_workload(args.trace)
        count = len(specs)
        arrivals = tuple(float(s.arrival_time) * args.time_scale for s in specs)
    workload = EmulatedWorkload.generate(count, emulation, seed=args.seed, interarrival_s=args.interarrival,
                                         work_s=work, batch_size=args.batch, restart_delay_s=args.restart_delay,
                                         requested_gpus=args.requested_gpus)
    if arrivals is not None:
        start = min(arrivals)
        workload = EmulatedWorkload(emulation, tuple(round(a - start, 1) for a in arrivals), workload.steps,
                                    batch_size=args.batch, restart_delay_s=args.restart_delay,
                                    requested_gpus=args.requested_gpus)
    if args.model:
        from dataclasses import replace

        from heteroplan.runtime.models import load_task

        workload = replace(workload, task=load_task(args.model))
    return workload


def run(args: argparse.Namespace) -> int:
    try:
        from heteroplan.runtime import RunConfig
        from heteroplan.runtime.config import StepEmulation
        from heteroplan.runtime.emulated import emulated_jobs
        from heteroplan.runtime.rounds import RoundExecutor
    except ImportError as exc:
        raise InputError("runtime", "torch", str(exc)) from None
    from heteroplan.cluster import Cluster, GPUType
    from heteroplan.commands.outdir import writable_dir
    from heteroplan.commands.plan import parse_gpus
    from heteroplan.policies.registry import make_policy

    emulation = StepEmulation(_pairs("--emulate", args.emulate), overhead_s=args.overhead)
    labels = _labels(args.type_label)
    policy = make_policy(args.policy)
    out = writable_dir(args.out)
    if args.ray is not None:
        from heteroplan.runtime.ray_backend import RayBackend

        try:
            backend = RayBackend(args.ray, type_labels=labels)
        except ImportError as exc:
            raise InputError("--ray", args.ray, str(exc)) from None
        cluster = None
    else:
        from heteroplan.runtime.backends import LocalBackend

        backend = LocalBackend()
        counts = parse_gpus(args.cluster, "--cluster", zone="default")
        per_node = {t: max(n for (tt, _), n in counts.items() if tt == t) for t, _ in counts}
        cluster = Cluster.from_counts(tuple(GPUType(t, 16, n) for t, n in per_node.items()), counts, "local")
    workload = _workload(args, emulation)
    jobs = emulated_jobs(workload, RunConfig(lr=0.01, startup_timeout_s=300.0, timeout_s=120.0))
    rounds = (out / "rounds.jsonl").open("a", encoding="utf-8")

    def progress(entry) -> None:
        rounds.write(json.dumps({"round": entry.index, "time": entry.time, "allocations": entry.allocations,
                                 "events": [{"kind": e.kind.value, "job": e.job_id, "time": e.time,
                                             "detail": e.detail} for e in entry.events]}) + "\n")
        rounds.flush()
        _write_json(out, "jobs.json", [asdict(r) for r in executor.outcomes.values()])
        text = printable("; ".join(map(str, entry.events)) or "-")
        print(f"round {entry.index} t={entry.time:.0f}s {text}", file=sys.stderr, flush=True)

    executor = RoundExecutor(cluster, policy, jobs, out / "jobs", round_length=args.round,
                             max_rounds=args.max_rounds, progress=progress, backend=backend,
                             max_failures=args.max_failures, resume=args.resume)
    print(f"{len(jobs)} jobs under {policy.name} on {executor.cluster.summary()}", file=sys.stderr)
    try:
        records = executor.run()
    finally:
        rounds.close()
    _write_json(out, "jobs.json", [asdict(r) for r in records.values()])
    _write_json(out, "latencies.json", [asdict(lat) for lat in executor.latencies])
    _print(records, executor, args.json, args.restart_delay)
    if executor.stopped_by is not None and executor.stopped_by.signum is not None:
        return 128 + int(executor.stopped_by.signum)
    return EXIT_UNFINISHED if any(r.finish_time is None for r in records.values()) else 0


def _write_json(out, name: str, data: object) -> None:
    """``out/name`` written atomically as strict JSON, as ``--json`` prints it (an unknown
    ``isolated_time``, infinite, is ``null``: ``Infinity`` is no JSON and read_json refuses it)."""
    from heteroplan.atomic_json import write_text_atomic

    write_text_atomic(out / name, to_json_text(data), root=out)


def _print(records, executor, as_json: bool, assumed_s: float) -> None:
    if as_json:
        print_json({"jobs": [asdict(r) for r in records.values()],  # strict JSON: an infinite time is null
                    "latencies": [asdict(lat) for lat in executor.latencies]})
        return
    print(f"{'job':10} {'arrival':>8} {'JCT (s)':>8} {'restarts':>8} {'failures':>8} {'GPU-s':>8}  note")
    for r in records.values():
        jct = f"{r.jct_s:8.1f}" if r.jct_s is not None else "       -"
        note = printable(r.gave_up or ("" if r.finish_time is not None else "unfinished"))
        print(f"{printable(r.job_id):10} {r.arrival_time:8.1f} {jct} {r.restarts:8d} {r.failures:8d} {r.gpu_seconds:8.0f}  {note}")
    lat = [x.seconds for x in executor.latencies if x.restart]
    if lat:
        print(f"restarts: decision -> first iteration {min(lat):.1f}-{max(lat):.1f} s "
              f"(the policy assumed {assumed_s:.0f} s)")

