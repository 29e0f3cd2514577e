"""``heteroplan plan``: find the best training plan of one job (Sailor planner)."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from heteroplan.argtypes import integer, nonempty, number
from heteroplan.atomic_json import write_json_atomic
from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.commands.jsonout import print_json
from heteroplan.errors import InputError
from heteroplan.names import printable
from heteroplan.planner.api import plan
from heteroplan.planner.explain import describe_terms
from heteroplan.planner.goal import Goal, Objective
from heteroplan.planner.model.sim_config import load_platforms
from heteroplan.planner.model.simulator import gpu_catalog, simulate_plan
from heteroplan.planner.plan import MAX_BATCH, Plan
from heteroplan.planner.request import PlanRequest, SearchOptions


def parse_gpus(text: str, flag: str = "--gpus", zone: str = "us-central1-a") -> dict[tuple[str, str], int]:
    """``"A100-40@us-central1-a=64,V100-16@us-central1-a=64"`` -> ``{(type, zone): count}`` (``zone``
    where none is given); errors name ``flag``."""
    pool: dict[tuple[str, str], int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        try:
            left, count = item.split("=")
            gpu, where = left.split("@") if "@" in left else (left, zone)
            key = (gpu.strip(), where.strip())
            pool[key] = pool.get(key, 0) + integer(1)(count.strip())  # a repeated TYPE@ZONE adds up
        except (ValueError, argparse.ArgumentTypeError):
            raise InputError(flag, item, "expected TYPE@ZONE=COUNT, e.g. A100-40@us-central1-a=64") from None
    if not pool:
        raise InputError(flag, text, "no GPUs given")
    return pool


@contextlib.contextmanager
def _log_filtered(logger: str, keep: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """Drop the records of ``logger`` that ``keep`` refuses while the block runs."""
    log = logging.getLogger(logger)
    filt = logging.Filter()
    filt.filter = keep  # type: ignore[method-assign,assignment]
    log.addFilter(filt)
    try:
        yield
    finally:
        log.removeFilter(filt)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="plan one training job over heterogeneous, multi-zone GPUs (Sailor)")
    p.add_argument("--model", type=nonempty("a name"), help="model name (OPT-350, GPT-Neo-2.7, LLAMA-3-8, OPT-30); required to search")
    p.add_argument("--gbs", type=integer(1, MAX_BATCH), help="global batch size (samples per iteration); required to search")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--gpus", type=nonempty("TYPE@ZONE=COUNT,..."), help="available GPUs: TYPE@ZONE=COUNT,... (e.g. A100-40@us-central1-a=64)")
    src.add_argument("--evaluate", type=nonempty("a path"), metavar="PLAN",
                     help="no search: predict time, cost and memory of this plan file and say whether it fits "
                     "(with --cluster: on that cluster's GPU types, e.g. the ones a --data-dir profiled)")
    p.add_argument("--cluster", type=nonempty("a preset name or a path"), help=f"preset ({', '.join(PRESETS)}) or cluster JSON file: the GPUs to plan on, "
                   "or with --evaluate the GPU types (memory, $/h) and GPUs the plan may use")
    p.add_argument("--objective", choices=[o.value for o in Objective], default=Objective.THROUGHPUT.value,
                   help="maximize iterations/s (throughput; default, optionally under --budget) or minimize $ per "
                   "iteration (cost; optionally above --min-throughput)")
    p.add_argument("--budget", type=number(0), help="max $ per iteration (throughput objective only)")
    p.add_argument("--min-throughput", type=number(0), help="min iterations/s (cost objective only)")
    p.add_argument("--max-pp", type=integer(1), help="deepest pipeline to try (>= 1)")
    p.add_argument("--homogeneous", action="store_true", help="one (type, zone) block per plan")
    p.add_argument("--no-prune", action="store_true", help=f"scan the whole plan space (slow; pools of at most {NO_PRUNE_MAX_GPUS} GPUs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--data-dir", type=nonempty("a path"), help="profiles and network files of `heteroplan profile --out` (default: shipped data)")
    p.add_argument("--out", type=nonempty("a path"), help="write the plan to this JSON file (run it with `heteroplan run --plan FILE`)")
    p.set_defaults(func=run)


def load_cluster(text: str) -> Cluster:
    """``--cluster``: a preset's name or a cluster JSON file."""
    return preset(text) if text in PRESETS else Cluster.from_json(text)


def run(args: argparse.Namespace) -> int:
    if args.evaluate:
        return evaluate(args)
    if args.gpus is None and args.cluster is None:
        raise InputError("--gpus/--cluster", None, "give the GPUs to plan on (--gpus or --cluster), or "
                         "--evaluate PLAN")
    if args.gpus is not None and args.cluster is not None:
        raise InputError("--cluster", args.cluster, "give the GPUs to plan on once: --gpus or --cluster, not both")
    for name in ("model", "gbs"):
        if getattr(args, name) is None:
            raise InputError(f"--{name}", None, "required with --gpus or --cluster")
    if args.budget is not None and args.objective != "throughput":
        raise InputError("--budget", args.budget, f"applies to --objective throughput, not {args.objective}")
    if args.min_throughput is not None and args.objective != "cost":
        raise InputError("--min-throughput", args.min_throughput, f"applies to --objective cost, not {args.objective}")
    if args.gpus:
        pool: object = parse_gpus(args.gpus)
    else:
        pool = load_cluster(args.cluster)
    options = SearchOptions(max_pp=args.max_pp, max_blocks=1 if args.homogeneous else SearchOptions.max_blocks, prune=not args.no_prune)
    if args.data_dir:  # the simulator constants calibrated for that directory, as plan_job would pick
        options = replace(options, config=load_platforms(args.data_dir))
    goal = Goal(args.objective, args.budget, args.min_throughput)
    request = PlanRequest.build(args.model, args.gbs, pool, goal,  # type: ignore[arg-type]
                                options=options, data_dir=args.data_dir)
    check_unpruned_size(request, args.no_prune)
    with _log_filtered("heteroplan.planner.api", lambda r: not hasattr(r, "uncalibrated")):
        result = plan(request)  # the result names uncalibrated types itself: the log would say it twice
    if args.out:
        if Path(args.out).is_dir():
            raise InputError("--out", args.out, "is a directory; give a file name such as plan.json")
        try:
            write_json_atomic(Path(args.out), result.plan.to_dict())
        except OSError as exc:
            raise InputError("--out", args.out, f"cannot write the plan: {exc}") from None
    if args.json:
        print_json(result.to_dict())
    else:
        print(printable(result.describe(), keep="\n"))
        if result.estimate is not None:
            print(printable(_indented("by term", describe_terms(result.estimate)), keep="\n"))
        print(printable(_indented("why this plan (the best the search priced of each GPU mix and depth)",
                                  result.explain()), keep="\n"))
    return 0


NO_PRUNE_MAX_GPUS = 32
"""Largest pool (GPUs) ``plan --no-prune`` scans: the unpruned plan space grows steeply with the
pool (OPT-350, gbs 64, A100 + V100 on a busy 2-core machine: 16 GPUs 23 s, 64 GPUs over 4 min,
against 1.2 s and 3.8 s pruned), and the scan writes nothing until it ends."""


def check_unpruned_size(request: PlanRequest, no_prune: bool) -> None:
    """:class:`InputError` naming ``--no-prune`` for a pool above :data:`NO_PRUNE_MAX_GPUS` GPUs."""
    total = sum(request.pool.values())
    if no_prune and total > NO_PRUNE_MAX_GPUS:
        raise InputError("--no-prune", f"{total} GPUs", f"scans the whole plan space, which grows steeply with the "
                         f"pool (16 GPUs: ~20 s, 64: minutes); at most {NO_PRUNE_MAX_GPUS} GPUs with --no-prune: drop "
                         "it (Sailor's pruning, the default) or give fewer GPUs")


def check_plan_on_cluster(loaded: Plan, cluster: Cluster) -> None:
    """:class:`InputError` unless ``cluster`` has the GPUs of each (type, zone) the plan uses."""
    have: dict[tuple[str, str], int] = {}
    for node in cluster.nodes:
        have[(node.gpu_type, node.zone)] = have.get((node.gpu_type, node.zone), 0) + node.num_gpus
    for (gpu_type, zone), count in loaded.gpus_by_type_zone().items():
        if have.get((gpu_type, zone), 0) < count:
            raise InputError("--cluster", cluster.name, f"has {have.get((gpu_type, zone), 0)} {gpu_type} GPUs in "
                             f"zone {zone}; the plan uses {count}")


def _indented(title: str, text: str) -> str:
    return "\n".join([f"  {title}:", *("    " + line for line in text.splitlines())])


def evaluate(args: argparse.Namespace) -> int:
    """``--evaluate PLAN``: the simulator's prediction of a plan file, memory fit included;
    exit code 1 when the plan does not fit its GPUs' memory."""
    loaded = Plan.from_json(args.evaluate)
    for name, value in (("model", loaded.model), ("gbs", loaded.global_batch_size)):
        given = getattr(args, name)
        if given is not None and given != value:
            raise InputError(f"--{name}", given, f"the plan file {args.evaluate} says {value}")
    gpu_types = gpu_catalog()
    if args.cluster is not None:
        cluster = load_cluster(args.cluster)
        gpu_types |= {t.name: t for t in cluster.gpu_types}
        check_plan_on_cluster(loaded, cluster)
    for (gpu_type, _), _count in loaded.gpus_by_type_zone().items():
        if gpu_type not in gpu_types:
            where = f" nor in --cluster {args.cluster}" if args.cluster is not None else ""
            raise InputError("plan GPU type", gpu_type, f"is not a shipped GPU type{where}: its memory (GB) and "
                             "price ($/h) are needed; give --cluster FILE describing it (the cluster you planned "
                             "on, e.g. with the types your --data-dir profiled)")
    est = simulate_plan(loaded, data_dir=args.data_dir, gpu_types=gpu_types)
    if args.json:
        print_json({"plan": loaded.to_dict(), "iteration_time_s": est.iteration_time_s,
                    "throughput_iter_s": est.throughput_iter_s, "cost_per_iteration_usd": est.cost_per_iteration_usd,
                    "memory_per_gpu_gb": list(est.memory_per_stage_gb), "fits_memory": est.fits,
                    "memory_over_gb": est.memory_fit.over_gb if est.memory_fit else 0.0,
                    "tightest_stage": est.memory_fit.stage if est.memory_fit else None,
                    "uncalibrated_gpu_types": list(est.uncalibrated),
                    "utilization": est.utilization.to_dict() if est.utilization is not None else None})
    else:
        print(printable(loaded.describe(), keep="\n"))
        print(printable("\n".join("  " + line for line in est.describe().splitlines()), keep="\n"))
    return 0 if est.fits else 1
