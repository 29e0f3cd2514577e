"""Sia side by side with the Sia artifact's own simulator, on the same workload CSV.

Runs the artifact's ``sia`` policy (siasosp23/artifacts ``sia-simulator``, the options of its
``run_experiment.sh``: p = -0.5, lambda_n = 1.1, lambda_a = 0.01, 60 s rounds,
``--project_throughputs --share_max_replicas``) on a workload -- a generated
``newtrace/seed-<s>`` written with :func:`heteroplan.workload.sia.write_sia_workload`, or a
bundled CSV -- and writes per job: JCT, restarts, GPU-seconds, seconds restoring a checkpoint,
GPUs held (mean over the rounds it held any) and its first/last GPU type. ``--ours`` runs
``make_policy("sia")`` here on the same jobs (``load_breakdown``) and prints the two tails job by
job.

The artifact is not part of this repository: pass its ``sia-simulator`` directory (a copy with the
minimal changes listed in docs/sia.md: HiGHS instead of CBC, pandas >= 2 and numpy >= 1.24
compatibility); without it the script says so and exits 0. Its simulation is driven here
round by round exactly as its ``multi_simulator.py`` does (``Cluster.step``), except that its
per-round log of every submitted job (quadratic in the rounds) is replaced by a per-round line
of the active jobs' GPUs and restarts written as it goes (``--out``/``<name>.rounds.jsonl``), so a
run stopped early keeps what it did.

    python benchmarks/sia_artifact_compare.py --artifact /tmp/sia-art/sia-simulator \\
        --workload newtrace/seed-1 --out benchmarks/results/sia_artifact
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

# One BLAS thread: the artifact's many tiny L-BFGS-B fits spend 12x the CPU time in idle BLAS
# threads otherwise (measured on a 2-core machine under load).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from heteroplan.workload.sia import bundled_workload, read_sia_workload, write_sia_workload  # noqa: E402

HOUR = 3600.0


def p99(values: list[float]) -> float:
    """The artifact's p99: ``sorted(v)[int(0.99 N)]`` (as the loop's summary)."""
    v = sorted(values)
    return v[min(int(0.99 * len(v)), len(v) - 1)]


def _workload_csv(name: str, out: Path) -> Path:
    path = Path(name)
    if path.suffix == ".csv" and path.exists():
        return path
    csv = out / (name.replace("/", "_") + ".csv")
    write_sia_workload(bundled_workload(name), csv)
    return csv


def _short_newtrace(name: str, jobs: int, hours: float | None, out: Path) -> Path:
    """A shorter trace of the newTrace family (the same arrival rate unless ``hours`` is given),
    so that an artifact run takes a minute: ``NewTraceSpec(jobs=240, hours=12)`` of seed 1 shows
    the yolov3 difference of the 960-job traces (docs/sia.md)."""
    from heteroplan.workload.newtrace import NewTraceSpec, generate_newtrace, newtrace_seed  # noqa: PLC0415

    seed = newtrace_seed(name)
    if seed is None:
        raise SystemExit(f"--jobs needs --workload newtrace/seed-<s>, not {name!r}")
    hours = hours if hours is not None else 48.0 * jobs / 960
    csv = out / f"newtrace_seed-{seed}_{jobs}j_{hours:g}h.csv"
    write_sia_workload(generate_newtrace(NewTraceSpec(jobs=jobs, hours=hours), seed=seed), csv)
    return csv.resolve()


def _memoize_fits() -> None:
    """Make the artifact's throughput fits (``goodput.fit_perf_params``, 93% of its run on a
    960-job trace) cheaper without changing them: the gradient written out instead of traced by
    autograd (equal to it within 2e-12 relative on 200 random profiles), and fits answered from a table keyed by their
    exact inputs (a fit is a deterministic function of its observations)."""
    import goodput  # noqa: PLC0415 (the artifact's)
    import job  # noqa: PLC0415
    import numpy as plain_numpy  # noqa: PLC0415

    class _Gradient:  # what fit_perf_params reads from its module-level ``autograd``
        numpy = plain_numpy  # its objective evaluated with plain numpy: the same values, no tracing

        @staticmethod
        def grad(fn):
            return _objective_gradient

    goodput.autograd = _Gradient
    fit = goodput.fit_perf_params
    table: dict = {}

    def memo(*arrays):
        key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in map(_as_array, arrays))
        if key not in table:
            table[key] = fit(*arrays)
        return table[key]

    job.fit_perf_params = memo


def _objective_gradient(params, num_nodes, num_replicas, atomic_bsz, accum_step_time, optim_step_time):
    """The gradient of the artifact's throughput-fit objective (``goodput._obj_fn``), written out:
    what its ``autograd.grad(_obj_fn)`` computes (to rounding, checked by ``--check-gradient``),
    without tracing every call (autograd's tracing was most of a fit's time)."""
    import numpy as np  # noqa: PLC0415

    a_c, b_c, a_n, b_n, a_r, b_r, g = (float(x) for x in params)
    nodes, reps = np.asarray(num_nodes), np.asarray(num_replicas)
    bsz = np.asarray(atomic_bsz, dtype=float)
    accum = a_c + b_c * bsz
    on_n, on_r = nodes > 1, (nodes <= 1) & (reps > 1)
    rounds = np.maximum(reps - 2, 1e-8)
    net = np.select([nodes > 1, reps > 1], [a_n, a_r], 1e-8) + np.select([nodes > 1, reps > 1], [b_n, b_r], 1e-8) * rounds
    ag, ng = accum ** g, net ** g
    total = ag + ng
    log_optim = np.log(total) / g
    r1 = np.log(accum) - np.log(np.asarray(accum_step_time))
    r2 = log_optim - np.log(np.asarray(optim_step_time))
    e1, e2 = np.sqrt(np.mean(r1 ** 2)), np.sqrt(np.mean(r2 ** 2))
    d_accum = r1 / accum / e1 + r2 * (ag / accum) / total / e2  # d(err1 + err2)/d accum_i, times N
    d_net = r2 * (ng / net) / total / e2
    d_g = r2 * ((ag * np.log(accum) + ng * np.log(net)) / total / g - log_optim / g) / e2
    n = len(r1)
    grad = np.array([
        np.sum(d_accum), np.sum(d_accum * bsz),
        np.sum(d_net * on_n), np.sum(d_net * on_n * rounds),
        np.sum(d_net * on_r), np.sum(d_net * on_r * rounds),
        np.sum(d_g),
    ]) / n
    grad[6] += 2e-3 * (g - 1)
    grad[2] += -2e-2 * b_n ** 2 / a_n ** 3
    grad[3] += 2e-2 * b_n / a_n ** 2
    grad[4] += -2e-2 * b_r ** 2 / a_r ** 3
    grad[5] += 2e-2 * b_r / a_r ** 2
    return grad


def _as_array(value):
    import numpy as np  # noqa: PLC0415

    return np.asarray(value)


ABLATIONS = ("app-batch", "seeded-fits")


def _ablate(name: str) -> None:
    """Change one mechanism of the artifact's ``Job`` (its module, patched in place):

    - ``app-batch``: plan every job's goodput with its application's largest batch, as
      heteroplan's ``sia`` does by default (``get_speedup_fn`` with ``target_batch_size`` set
      aside; the job still runs as before);
    - ``seeded-fits``: every job's per-type throughput fits start from all of its application's
      trace profiles (``Job.seed_profiles``) instead of the configurations it has run on; the
      scale-up limit still counts only the replicas it ran on.
    """
    import job as artifact_job  # noqa: PLC0415 (the artifact's)

    cls = artifact_job.Job
    if name == "app-batch":
        plan = cls.get_speedup_fn

        def get_speedup_fn(self, cluster_name=None):
            saved, self.target_batch_size = self.target_batch_size, None
            try:
                return plan(self, cluster_name)
            finally:
                self.target_batch_size = saved

        cls.get_speedup_fn = get_speedup_fn
    elif name == "seeded-fits":
        update, init = cls.update_params, cls.__init__

        def update_params(self, num_nodes, num_replicas, *rest):
            self.__dict__.setdefault("_ran", {}).setdefault(self.current_cluster, set()).add(num_replicas)
            return update(self, num_nodes, num_replicas, *rest)

        def seeded_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            with contextlib.redirect_stdout(io.StringIO()):
                self.seed_profiles(0, 0)

        cls.update_params, cls.__init__ = update_params, seeded_init
        cls.max_profiled_replicas = lambda self, cluster_name=None: max(
            self.__dict__.get("_ran", {}).get(cluster_name, {0}))
    else:
        raise SystemExit(f"--ablation: choose one of {list(ABLATIONS)}, not {name!r}")


def _heteroplan_truth(apps: tuple[str, ...]) -> None:
    """The artifact's ground-truth step times of ``apps`` replaced by heteroplan's (the
    throughput model fitted to the same traces, :func:`heteroplan.sim.job_models.true_model`)
    instead of its interpolation of the measured steps (``Application.get_throughput``). What a
    job observes, and so its fits, follow. Returns (step s, step - compute s), so that the
    artifact's accumulation micro-steps cost heteroplan's compute time."""
    import applications  # noqa: PLC0415 (the artifact's)

    from heteroplan.perf.throughput import compute_time  # noqa: PLC0415
    from heteroplan.sim.job_models import true_model  # noqa: PLC0415

    cls = applications.Application
    measured = cls.get_throughput
    models = {app: true_model(app) for app in apps}
    suffix = {}  # Application -> GPU type, from its placements file

    def get_throughput(self, placement, local_bsz):
        model = models.get(self.name)
        if model is None or suffix.get(id(self)) not in model.params:
            return measured(self, placement, local_bsz)
        placement = tuple(filter(None, placement))
        gpu_type = suffix[id(self)]
        params = model.params[gpu_type]
        step = float(model.step_time(gpu_type, len(placement), sum(placement), local_bsz, 0))
        return step, step - float(compute_time(params, local_bsz))

    for gpu_type, per_type in applications.APPLICATIONS.items():
        for app in per_type.values():
            suffix[id(app)] = gpu_type
    cls.get_throughput = get_throughput


def run_artifact(artifact: Path, csv: Path, out: Path, tag: str, interval: int = 60,
                 ablation: str | None = None, truth_of: tuple[str, ...] = ()) -> dict:
    """The artifact's Sia on ``csv``; per-job records, written to ``out/<tag>.artifact.json``."""
    os.chdir(artifact)  # it reads traces/ relative to the working directory
    sys.path.insert(0, str(artifact))
    if ablation:
        _ablate(ablation)
    if truth_of:
        _heteroplan_truth(truth_of)
    import pandas  # noqa: PLC0415 (the artifact's dependency, not ours)
    import simulator_config as sim_config  # noqa: PLC0415
    from cluster import Cluster  # noqa: PLC0415
    from sia import SiaPolicy  # noqa: PLC0415

    sim_config.num_parallel_jobs = 1
    _memoize_fits()
    workload = pandas.read_csv(csv)
    ngpus = {k: sim_config.cluster_ngpus_per_node[k] for k in sim_config.cluster_nnodes}
    with contextlib.redirect_stdout(io.StringIO()):
        policy = SiaPolicy(p_fairness=-0.5, restart_penalty=30, lambda_a=0.01, lambda_n=1.1,
                           project_throughputs=True, share_max_replicas=True, enable_bsz_tuning=True)
        policy.populate_valid_configs(sim_config.cluster_nnodes, ngpus, sim_config.cluster_max_physical_nnodes)
        cluster = Cluster(workload, policy, sim_config.cluster_nnodes, ngpus,
                          max_physical_nodes=sim_config.cluster_max_physical_nnodes)
    cluster.step_log = lambda: None  # its per-round log of every job; ours is below
    restoring = {j.name: 0.0 for j in cluster.jobs}
    held = {j.name: [0.0, 0] for j in cluster.jobs}  # GPU-rounds, rounds with GPUs
    types = {j.name: [] for j in cluster.jobs}
    placements: dict = {}  # application -> "type:GPUs" -> job-rounds
    rounds_path = out / f"{tag}.rounds.jsonl"
    start = time.time()
    stop = {"now": False}

    def _stop(signum, frame):  # keep what was done on SIGINT/SIGTERM
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with open(rounds_path, "w") as rounds:
        while not cluster.all_complete() and not stop["now"]:
            now = cluster.current_time
            active = [j for j in cluster.jobs if j.submission_time <= now and j.completion_time is None]
            for j in active:
                if j.placement:
                    restoring[j.name] += min(j.rescale_time, interval)
                    g = sum(j.placement)
                    held[j.name][0] += g
                    held[j.name][1] += 1
                    if not types[j.name] or types[j.name][-1] != j.current_cluster:
                        types[j.name].append(j.current_cluster)
                    key = f"{j.current_cluster}:{g}"
                    app = placements.setdefault(j.app_name, {})
                    app[key] = app.get(key, 0) + 1
            rounds.write(json.dumps({"t": now, "jobs": {j.name: [j.current_cluster, sum(j.placement),
                                                                 j.num_restarts] for j in active}}) + "\n")
            with contextlib.redirect_stdout(io.StringIO()):
                cluster.step(interval)
            if int(cluster.current_time) % (20 * interval) == 0:
                done = sum(j.completion_time is not None for j in cluster.jobs)
                print(f"[{tag}] t={cluster.current_time / HOUR:.1f} h done={done}/{len(cluster.jobs)} "
                      f"active={len(active)} wall={time.time() - start:.0f} s", flush=True)
    jobs = {}
    for j in cluster.jobs:
        finished = j.completion_time is not None
        jobs[j.name] = {
            "application": j.app_name, "arrival_s": j.submission_time,
            "jct_s": (j.completion_time - j.submission_time) if finished else None,
            "start_s": j.start_time, "restarts": j.num_restarts or 0,
            "restoring_s": restoring[j.name], "gpu_s": j.used_gpu_seconds + j.wasted_gpu_seconds,
            "gpus_held": held[j.name][0] / held[j.name][1] if held[j.name][1] else 0.0,
            "types": types[j.name],
        }
    record = {"tag": tag, "workload": str(csv), "finished": not stop["now"], "wall_s": time.time() - start,
              "end_s": cluster.current_time, "placements": placements, "jobs": jobs}
    (out / f"{tag}.artifact.json").write_text(json.dumps(record))
    return record


def summary(jobs: dict) -> tuple[float, float, float, int]:
    """(avg JCT h, p99 JCT h, makespan h, finished) over finished jobs."""
    done = [r for r in jobs.values() if r["jct_s"] is not None]
    jct = [r["jct_s"] / HOUR for r in done]
    end = max(r["arrival_s"] + r["jct_s"] for r in done) / HOUR
    return sum(jct) / len(jct), p99(jct), end, len(done)


def run_ours(csv: Path, out: Path, tag: str, options: dict | None = None, profiles: str = "truth") -> dict:
    """``make_policy("sia", **options)`` on the same jobs (new jobs' 1-GPU profiles from
    ``profiles``, :class:`~heteroplan.sim.fidelity.SimFidelity`); per-job records in the
    artifact's shape."""
    from heteroplan.cluster import preset  # noqa: PLC0415
    from heteroplan.sim import make_policy, simulate  # noqa: PLC0415
    from heteroplan.sim.breakdown import load_breakdown  # noqa: PLC0415
    from heteroplan.sim.fidelity import SimFidelity  # noqa: PLC0415

    jobs = read_sia_workload(csv)
    start = time.process_time()
    result = simulate(jobs, preset("sia-64"), make_policy("sia", **(options or {})), progress=False, record=True,
                      fidelity=SimFidelity(profiles=profiles))
    app_of = {j.name: j.application for j in jobs}
    placements: dict = {}  # application -> "type:GPUs" -> job-rounds, as the artifact's
    for _, allocs in result.schedule:
        for name, alloc in allocs.items():
            app = placements.setdefault(app_of[name], {})
            key = f"{alloc.gpu_type}:{alloc.num_gpus}"
            app[key] = app.get(key, 0) + 1
    rows = {}
    for b in load_breakdown(result).jobs:
        rows[b.name] = {"application": b.application, "arrival_s": b.arrival_time, "jct_s": b.jct,
                        "restarts": b.restarts, "restoring_s": b.restoring, "queued_s": b.queued,
                        "gpu_s": b.gpu_seconds, "gpus_held": b.mean_gpus}
    record = {"tag": tag, "workload": str(csv), "options": options or {}, "profiles": profiles, "finished": result.stop_reason == "finished",
              "cpu_s": time.process_time() - start, "placements": placements, "jobs": rows}
    (out / f"{tag}.ours.json").write_text(json.dumps(record))
    return record


def _cell(r: dict | None) -> str:
    if not r or r["jct_s"] is None:
        return "unfinished"
    return (f"{r['jct_s'] / HOUR:6.2f} / {r['restarts']:3d} / {r['restoring_s'] / HOUR:5.2f}"
            f" / {r['gpus_held']:4.1f}")


def groups(jobs: dict) -> list[tuple[str, list[dict]]]:
    """(label, job records): all jobs, the p99 tail (JCT >= p99) and each application."""
    done = [r for r in jobs.values() if r["jct_s"] is not None]
    q = p99([r["jct_s"] for r in done])
    out = [("all", done), ("p99 tail", [r for r in done if r["jct_s"] >= q])]
    for app in sorted({r["application"] for r in done}):
        out.append((app, [r for r in done if r["application"] == app]))
    return out


def group_row(label: str, rows: list[dict]) -> str:
    """Means of a group: JCT h, restarts, restoring h, GPUs held."""
    n = len(rows)
    mean = (lambda key, scale=1.0: sum(r[key] for r in rows) / n / scale)  # noqa: E731
    return (f"{label:12s} {n:4d} jobs  JCT {mean('jct_s', HOUR):6.2f} h  restarts {mean('restarts'):5.1f}  "
            f"restoring {mean('restoring_s', HOUR):5.2f} h  GPUs held {mean('gpus_held'):4.1f}")


def placement_row(label: str, record: dict, app: str, top: int = 6) -> str:
    """The ``top`` most frequent (GPU type, GPUs) of ``app``'s job-rounds, as shares."""
    counts = record.get("placements", {}).get(app, {})
    total = sum(counts.values()) or 1
    cells = [f"{k} {v / total:4.0%}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:top]]
    return f"  {label:10s} {app:12s} " + "  ".join(cells)


def print_side_by_side(art: dict, ours: dict, tail: int = 12, apps: tuple[str, ...] = ()) -> None:
    for label, rec in (("artifact sia", art), ("heteroplan sia", ours)):
        avg, q, end, n = summary(rec["jobs"])
        print(f"{label:15s} avg {avg:.3f} h  p99 {q:.2f} h  makespan {end:.1f} h  ({n} finished)")
    for label, rec in (("artifact", art), ("heteroplan", ours)):
        print(f"\n{label}:")
        for name, rows in groups(rec["jobs"]):
            print("  " + group_row(name, rows))
    if apps:
        print("\nwhere jobs run (share of job-rounds with GPUs, GPU type:GPUs):")
        for app in apps:
            print(placement_row("artifact", art, app))
            print(placement_row("heteroplan", ours, app))
    print(f"\nlongest {tail} jobs of the artifact, with ours (JCT h / restarts / restoring h / GPUs held):")
    order = sorted((n for n, r in art["jobs"].items() if r["jct_s"] is not None),
                   key=lambda n: -art["jobs"][n]["jct_s"])
    for name in order[:tail]:
        a, o = art["jobs"][name], ours["jobs"].get(name)
        print(f"  {name:16s} artifact {_cell(a)}   ours {_cell(o)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=None, help="the artifact's sia-simulator directory")
    ap.add_argument("--workload", default="newtrace/seed-1", help="bundled name or CSV path")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sia_artifact")
    ap.add_argument("--ours", action="store_true", help="also run heteroplan's sia on the same jobs")
    ap.add_argument("--skip-artifact", action="store_true", help="reuse <out>/<tag>.artifact.json")
    ap.add_argument("--jobs", type=int, default=None,
                    help="with --workload newtrace/seed-<s>: generate this many jobs (a short trace)")
    ap.add_argument("--hours", type=float, default=None, help="with --jobs: arrival window in hours")
    ap.add_argument("--placements", nargs="*", default=["yolov3"],
                    help="applications whose (GPU type, GPUs) shares to print side by side")
    ap.add_argument("--ablation", choices=ABLATIONS, default=None,
                    help="change one mechanism of the artifact (see _ablate); its tag gets the name")
    ap.add_argument("--heteroplan-truth", nargs="*", default=[], metavar="APP",
                    help="the artifact's ground truth of these applications replaced by heteroplan's")
    ap.add_argument("--profiles", choices=("traces", "truth"), default="truth",
                    help="ours: new jobs' 1-GPU profiles from the ground truth (SimFidelity's default) or the traces")
    ap.add_argument("--options", type=json.loads, default=None, help='make_policy("sia") options as JSON')
    args = ap.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tag = Path(args.workload).stem if args.workload.endswith(".csv") else args.workload.replace("/", "_")
    if args.jobs is not None:
        csv = _short_newtrace(args.workload, args.jobs, args.hours, out)
        tag = csv.stem
    else:
        csv = _workload_csv(args.workload, out).resolve()
    art_tag = "-".join([tag] + ([args.ablation] if args.ablation else [])
                       + [f"truth-{a}" for a in args.heteroplan_truth])
    cwd = Path.cwd()
    art = None
    saved = out / f"{art_tag}.artifact.json"
    if args.skip_artifact:
        art = json.loads(saved.read_text()) if saved.exists() else None
    elif args.artifact is None or not (args.artifact / "sia.py").exists():
        print(f"artifact not found at {args.artifact}: nothing to compare (pass --artifact .../sia-simulator)")
        if not args.ours:
            return 0
    else:
        art = run_artifact(args.artifact.resolve(), csv, out, art_tag, ablation=args.ablation,
                           truth_of=tuple(args.heteroplan_truth))
        os.chdir(cwd)
    if art is not None:
        avg, q, end, n = summary(art["jobs"])
        print(f"artifact sia {art_tag}: avg {avg:.3f} h  p99 {q:.2f} h  makespan {end:.1f} h  ({n} finished)")
    if args.ours:
        ours = run_ours(csv, out, tag, args.options, args.profiles)
        avg, q, end, n = summary(ours["jobs"])
        print(f"heteroplan sia {tag} {args.options or ''} profiles={args.profiles}: avg {avg:.3f} h  p99 {q:.2f} h  makespan {end:.1f} h  "
              f"({n} finished, {ours['cpu_s']:.0f} CPU s)")
        if art is not None:
            print_side_by_side(art, ours, apps=tuple(args.placements))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
